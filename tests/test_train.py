"""Training harness: determinism, divergence as a result, resume, records, DDP (gloo, world size 1), CLI, stats."""

from __future__ import annotations

import math
import socket

import pytest

from normbench.records.store import record_files
from normbench.results import existing_ids, iter_records, validate_record, write_records
from normbench.stats import aggregate
from normbench.train.loop import Run, lr_factor, record_id_for, train
from normbench.train.recipes import get_recipe

LM_TINY = {"steps": 6, "eval_every": 3, "batch_size": 4, "eval_limit": 8, "warmup_steps": 2,
           "model_options": {"n_layer": 2, "n_embd": 16, "n_head": 2}}
SHAPES_TINY = {"steps": 6, "eval_every": 3, "batch_size": 4, "eval_limit": 16, "warmup_steps": 0,
               "model_options": {"channels": [8, 8, 8]}}


pytestmark = pytest.mark.usefixtures("one_thread")


def _run(tmp_path, **kw):
    base = dict(task="synth-lm", model="gpt", norm="layernorm", progress=False, recipe_overrides=LM_TINY,
                checkpoint_dir=str(tmp_path / "ckpt"))
    base.update(kw)
    return Run(**base)


def _key_metrics(rec):
    m = rec["metrics"]
    return m["final"], m["best"], m["steps"], m["curve"], m["diverged"]


def test_same_seed_gives_identical_metrics(tmp_path):
    a = train(_run(tmp_path, seed=3))
    b = train(_run(tmp_path, seed=3))
    assert _key_metrics(a) == _key_metrics(b)
    c = train(_run(tmp_path, seed=4))
    assert c["metrics"]["curve"] != a["metrics"]["curve"]
    assert a["id"] == b["id"] != c["id"]


def test_image_run_is_deterministic_and_batch_norm_state_is_used(tmp_path):
    runs = [train(_run(tmp_path, task="synth-shapes", model="resnet", norm="batchnorm",
                       recipe_overrides=SHAPES_TINY)) for _ in range(2)]
    assert _key_metrics(runs[0]) == _key_metrics(runs[1])
    assert runs[0]["config"]["layout"] == "images" and runs[0]["config"]["placement"] is None


def test_record_is_valid_offline_labelled_and_stored(tmp_path):
    run = _run(tmp_path, seed=1)
    rec = train(run)
    assert validate_record(rec) == []
    cfg, met = rec["config"], rec["metrics"]
    assert cfg["task"] == "synth-lm" and cfg["task_offline"] is True and cfg["placement"] == "pre_ln"
    assert cfg["recipe"]["steps"] == 6 and cfg["batch_size"] == 4 and cfg["seed"] == 1
    assert met["metric"] == "perplexity" and met["higher_is_better"] is False
    assert met["steps"] == 6 and not met["diverged"] and met["diverged_step"] is None
    assert math.isfinite(met["final"]) and met["final"] > 1
    evals = [p for p in met["curve"] if p[2] is not None]
    assert [p[0] for p in evals] == [3, 6] and evals[-1][2] == met["final"]
    assert rec["provenance"]["hardware"]["threads"] == 1
    paths = write_records([rec], tmp_path / "results")
    assert paths[0].is_file()
    assert rec["id"] in existing_ids(tmp_path / "results")
    assert record_id_for(run) == rec["id"]


@pytest.mark.parametrize("task,model,norm,overrides", [
    ("synth-lm", "gpt", "layernorm", LM_TINY),
    ("synth-shapes", "resnet", "none", {**SHAPES_TINY, "grad_clip": None}),
])
def test_divergence_is_recorded_with_its_step(tmp_path, task, model, norm, overrides):
    rec = train(_run(tmp_path, task=task, model=model, norm=norm, recipe_overrides={**overrides, "lr": 1e6}))
    met = rec["metrics"]
    # A diverged run is a record, flagged (never ranked), with the step in the reason.
    assert "diverged" in rec["flags"] and str(met["diverged_step"]) in rec["flag_reasons"]["diverged"]
    assert met["diverged"] is True and isinstance(met["diverged_step"], int) and 1 <= met["diverged_step"] <= 6
    assert met["final"] is None and met["steps"] < met["diverged_step"] + 1
    assert met["curve"][-1][0] == met["diverged_step"]
    assert validate_record(rec) == []


def test_resume_from_checkpoint_reproduces_the_uninterrupted_run(tmp_path):
    full = train(_run(tmp_path, seed=5, checkpoint_dir=str(tmp_path / "a")))
    stopped = train(_run(tmp_path, seed=5, checkpoint_dir=str(tmp_path / "b"), stop_after=4))
    assert stopped is None
    assert list((tmp_path / "b").glob("*.pt")), "no checkpoint was written at the interruption"
    resumed = train(_run(tmp_path, seed=5, checkpoint_dir=str(tmp_path / "b")))
    assert _key_metrics(resumed) == _key_metrics(full)
    assert not list((tmp_path / "b").glob("*.pt")), "the checkpoint should be removed after a completed run"
    fresh = train(_run(tmp_path, seed=5, checkpoint_dir=str(tmp_path / "b"), resume=False))
    assert _key_metrics(fresh) == _key_metrics(full)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_gloo_world_size_one_matches_single_process(tmp_path, monkeypatch):
    import torch.distributed as dist

    single = train(_run(tmp_path, seed=2))
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(k, v)
    try:
        rec = train(_run(tmp_path, seed=2))
        assert dist.is_initialized() and dist.get_backend() == "gloo"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert rec["config"]["world_size"] == 1
    assert rec["metrics"]["final"] == pytest.approx(single["metrics"]["final"], rel=1e-6)


def test_lr_schedule_warmup_then_cosine():
    r = get_recipe("synth-lm", "gpt")
    assert lr_factor(0, r) == pytest.approx(1 / r.warmup_steps)
    assert lr_factor(r.warmup_steps - 1, r) == pytest.approx(1.0)
    mid = r.warmup_steps + (r.steps - r.warmup_steps) // 2
    assert lr_factor(mid, r) == pytest.approx(0.5, abs=0.02)
    assert lr_factor(r.steps - 1, r) < 0.01


def test_aggregate_groups_seeds_of_a_cell(tmp_path):
    recs = [train(_run(tmp_path, seed=s)) for s in (0, 1)]
    cells = aggregate(recs)
    assert len(cells) == 1 and cells[0]["seeds"] == [0, 1] and cells[0]["final"]["n"] == 2
    finals = [r["metrics"]["final"] for r in recs]
    # Perplexity: the geometric mean over seeds.
    assert cells[0]["final"]["scale"] == "log"
    assert cells[0]["final"]["mean"] == pytest.approx(math.sqrt(finals[0] * finals[1]))


def test_cli_quick_default_writes_a_valid_offline_record(tmp_path, capsys):
    from normbench.cli import main

    out = tmp_path / "results"
    code = main(["train", "--norm", "layernorm", "--quick", "--out", str(out), "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "ck")])
    assert code == 0
    files = record_files(out)
    assert len(files) == 1
    recs = [r for _, r in iter_records(out)]
    assert len(recs) == 1 and validate_record(recs[0]) == []
    cfg = recs[0]["config"]
    assert cfg["task"] == "synth-lm" and cfg["task_offline"] and cfg["quick"] and cfg["model"] == "gpt"
    assert "perplexity" in capsys.readouterr().out


def test_cli_sweep_skips_cells_already_in_results(tmp_path, capsys):
    from normbench.cli import main

    out = str(tmp_path / "results")
    args = ["sweep", "--norms", "rmsnorm", "dyt", "--tasks", "synth-lm", "--seeds", "1", "--steps", "3",
            "--out", out, "--no-progress", "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(args) == 0
    first = capsys.readouterr()
    assert first.err.count("perplexity") == 2
    assert main(args) == 0
    second = capsys.readouterr()
    assert second.err.count(", skipped") == 2 and "perplexity" not in second.err
    assert len(existing_ids(out)) == 2
    assert main(args[:1] + ["--dry-run"] + args[1:]) == 0
    assert capsys.readouterr().out.count("norm=") == 2


def test_cli_errors_are_clear(capsys):
    from normbench.cli import main

    assert main(["train", "--norm", "groupnorm", "--task", "synth-lm"]) == 2
    assert "layouts" in capsys.readouterr().err
    assert main(["train", "--norm", "no_such_norm"]) == 2
    assert main(["train", "--norm", "layernorm", "--task", "synth-lm", "--model", "resnet"]) == 2


@pytest.mark.parametrize("name", [n for n in __import__("normbench.train.recipes", fromlist=["x"]).recipe_names()
                                  if "/gpt" in n])
def test_gpt_recipes_build_the_model_at_their_sequence_length(name):
    # The batches are recipe.seq_len tokens long; the model must accept them (wikitext recipes used to stop with
    # "sequence length 256 exceeds the model's seq_len 64").
    import torch

    from normbench.models import build_model
    from normbench.tasks import get_task
    from normbench.train.loop import model_options
    from normbench.train.recipes import RECIPES

    recipe = RECIPES[name]
    opts = {**model_options("gpt", recipe), "n_layer": 1, "n_head": 2, "n_embd": 16}  # small, same context
    built = build_model("gpt", get_task(recipe.task), "layernorm", **opts)
    assert built.config["seq_len"] == recipe.seq_len
    out = built.module(torch.zeros(1, recipe.seq_len, dtype=torch.long))
    assert out.shape == (1, recipe.seq_len, get_task(recipe.task).vocab_size)


def test_model_options_refuse_a_context_that_differs_from_the_batches():
    from dataclasses import replace

    from normbench.train.loop import model_options
    from normbench.train.recipes import RECIPES

    r = RECIPES["wikitext-2/gpt"]
    with pytest.raises(ValueError, match="seq_len 128 differs from the recipe's seq_len 256"):
        model_options("gpt", replace(r, model_options={**r.model_options, "seq_len": 128}))


def test_powernorm_warmup_is_the_recipes_learning_rate_warmup(tmp_path, monkeypatch):
    # The authors' fairseq code builds MaskPowerNorm(..., warmup_iters=warmup_updates): PowerNorm divides by the
    # batch's own statistic for as many steps as the learning rate warms up (sIncerass/powernorm, norm_select.py).
    from normbench.norms.batch import PowerNorm
    from normbench.train import loop
    from normbench.train.recipes import cell_recipe

    r = cell_recipe("synth-lm", "gpt", "powernorm")
    assert r.warmup_steps == 30 and r.norm_kwargs == {"warmup_iters": 30}
    assert cell_recipe("synth-shapes", "resnet", "powernorm", variant="bs2").norm_kwargs == {"warmup_iters": 60}
    # It follows the warm-up the run really has (command-line overrides, --quick); an explicit option wins.
    assert cell_recipe("synth-lm", "gpt", "powernorm", overrides={"warmup_steps": 7}).norm_kwargs == {
        "warmup_iters": 7}
    assert cell_recipe("synth-lm", "gpt", "powernorm", variant="deep_stress").norm_kwargs == {"warmup_iters": 0}
    assert cell_recipe("synth-lm", "gpt", "powernorm",
                       overrides={"norm_kwargs": {"warmup_iters": 3}}).norm_kwargs == {"warmup_iters": 3}
    # Other norms get nothing, and their recorded recipe has no such field: their records keep their ids.
    ln = cell_recipe("synth-lm", "gpt", "layernorm")
    assert ln.norm_kwargs == {} and "norm_kwargs" not in ln.to_dict()

    built = []
    real_build = loop.build_model
    monkeypatch.setattr(loop, "build_model", lambda *a, **k: built.append(real_build(*a, **k)) or built[-1])
    rec = train(_run(tmp_path, norm="powernorm"))
    assert rec["config"]["recipe"]["norm_kwargs"] == {"warmup_iters": 2}  # LM_TINY's warm-up
    norms = [m for m in built[-1].module.modules() if isinstance(m, PowerNorm)]
    assert len(norms) == 2 * 2 + 1  # two per block (2 blocks) and the final one
    assert all(m.warmup_iters == 2 for m in norms)
    assert all(int(m.num_batches_tracked) == LM_TINY["steps"] for m in norms)  # these are the modules trained
    # The site's reproduce command rebuilds the same recipe; one made before the option says its recipe differs.
    from normbench.site.repro import command

    rec["config"]["recipe"] = r.to_dict()  # the cell's own recipe (this run's tiny overrides are not options)
    assert "differs" not in command(rec)
    rec["config"]["recipe"].pop("norm_kwargs")
    assert "recipe differs from this normbench's in norm_kwargs:" in command(rec)
