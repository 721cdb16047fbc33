"""Distributed training: ``torchrun --nproc_per_node 2`` (gloo, CPU) against one process with the same global batch.

The stated tolerance (docs/scale-out.md): every logged training loss and evaluation metric of a 2-rank run is within
a relative 1e-4 of the one-process run (the two differ only in the order of floating-point sums: each rank's mean
gradient is averaged by the all-reduce, BatchNorm statistics are summed across ranks).
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.train.loop import Run, train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

TORCHRUN = Path(sys.executable).with_name("torchrun")
SCRIPT = Path(__file__).with_name("scripts") / "ddp_train.py"
RTOL = 1e-4

LM = {"steps": 8, "eval_every": 4, "batch_size": 8, "eval_limit": 8, "warmup_steps": 2,
      "model_options": {"n_layer": 2, "n_embd": 16, "n_head": 2}}
# Random crops and flips on: each example must get the same draw on 2 ranks as in one process.
IMG = {"steps": 8, "eval_every": 4, "batch_size": 8, "eval_limit": 32, "warmup_steps": 0,
       "augmentation": "crop+flip", "crop_padding": 2, "model_options": {"channels": [8, 8, 8]}}

RUNS = {
    "layernorm": dict(task="synth-lm", model="gpt", norm="layernorm", seed=1, recipe_overrides=LM),
    "batchnorm_sync": dict(task="synth-shapes", model="resnet", norm="batchnorm", seed=1, recipe_overrides=IMG,
                           sync_bn=True),
    "batchnorm_local": dict(task="synth-shapes", model="resnet", norm="batchnorm", seed=1, recipe_overrides=IMG),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _series(rec) -> list[float]:
    """Every logged training loss and evaluation metric, in order."""
    return [v for _, loss, metric in rec["metrics"]["curve"] for v in (loss, metric) if v is not None]


def _close(a, b) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=RTOL) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    if not TORCHRUN.exists():
        pytest.skip(f"no torchrun next to {sys.executable}")
    tmp = tmp_path_factory.mktemp("ddp")
    runs = [dict(kw, progress=False, checkpoint_dir=str(tmp / "ck")) for kw in RUNS.values()]
    out = tmp / "records.json"
    r = subprocess.run([str(TORCHRUN), "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                        "--master_port", str(_free_port()), str(SCRIPT), json.dumps(runs), str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return dict(zip(RUNS, json.loads(out.read_text()))), tmp


def _one_process(name, tmp):
    return train(Run(**RUNS[name], progress=False, checkpoint_dir=str(tmp / "ck1")))


def test_layernorm_two_ranks_match_one_process(two_ranks):
    recs, tmp = two_ranks
    two, one = recs["layernorm"], _one_process("layernorm", tmp)
    assert two["config"]["world_size"] == 2 and one["config"]["world_size"] == 1
    assert two["id"] != one["id"]  # world size is part of the cell
    assert _close(_series(two), _series(one)), (_series(two), _series(one))
    assert math.isclose(two["metrics"]["final"], one["metrics"]["final"], rel_tol=RTOL)


def test_sync_batchnorm_two_ranks_match_one_process_with_augmentation(two_ranks):
    recs, tmp = two_ranks
    two, one = recs["batchnorm_sync"], _one_process("batchnorm_sync", tmp)
    assert two["config"]["sync_bn"] is True
    assert _close(_series(two), _series(one)), (_series(two), _series(one))


def test_local_batchnorm_statistics_differ_from_one_process(two_ranks):
    # Documented behaviour without --sync-bn: each rank normalises its own 4 examples, not the global 8.
    recs, tmp = two_ranks
    two, one = recs["batchnorm_local"], _one_process("batchnorm_local", tmp)
    assert "sync_bn" not in two["config"]
    assert not _close(_series(two), _series(one))


def test_sync_bn_refuses_norms_it_cannot_synchronise(tmp_path):
    with pytest.raises(ValueError, match="no synchronised form"):
        train(Run(task="synth-shapes", model="resnet", norm="ghost_batchnorm", recipe_overrides=IMG, sync_bn=True,
                  progress=False, checkpoint_dir=str(tmp_path)))
