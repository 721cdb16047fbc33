"""Issue #48, item 5: no host sync in a timed call, or the record says so. Every tier-1 and tier-2 case kind's timed
callable (norm x backend x pass x mode x layout of the GPU campaign's first two tiers, at tiny shapes on the CPU) runs
once under the dispatch-mode probe (``normbench.measure.syncs``), which catches ``aten._local_scalar_dense``
(``.item()``, ``bool()``, ``int()`` of a tensor) and the other synchronising operators. The kinds that synchronise
are listed here (the probe's findings, reviewed); a new one turns the test red. Records of such a call are flagged
``host_sync`` through the real head-to-head path on the rehearsal's device.

Covered: the eager kinds (all of them), the compile kinds of the syncing norms and of one clean norm (torch.compile
graph-breaks on a scalar read, so the compiled call keeps the eager one's syncs), softmax's ``compile_two_pass`` (its
overflow check, ``bool(bad.any())``), and the Triton kinds in Triton's interpreter (a subprocess with
``TRITON_INTERPRET=1``). Not covered: the remaining compile kinds (seconds of compilation each on a CPU).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.measure import syncs
from normbench.measure.group import Prepared
from normbench.measure.shapes import parse_shape

ROOT = Path(__file__).resolve().parents[1]

#: The tier-1/tier-2 kinds whose timed call synchronises (norm, pass, mode): PowerNorm and the unified norm read
#: their ``num_batches_tracked`` counter as a Python int in training (``norms/batch.py``, hashed: left as is and
#: flagged); a backward timed apart runs no forward, so it does not.
SYNCING = {("powernorm", "fwd", "train"), ("powernorm", "fwd+bwd", "train"),
           ("unified_norm", "fwd", "train"), ("unified_norm", "fwd+bwd", "train")}


def _kinds(backend: str) -> dict:
    from normbench.campaign import plan_tiers

    kinds = {}
    for tier in plan_tiers("cuda")[:2]:
        for c in tier.cases:
            if c.backend == backend:
                kinds.setdefault((c.norm, c.pass_, c.mode, c.shape.layout), c)
    return kinds


def _probe(norm: str, backend: str, pass_: str, mode: str, layout: str) -> dict:
    from normbench.discovery import REGISTRY

    shape = parse_shape("2x16" if layout == "tokens" else "images:2x16x4x4")
    prep = Prepared(REGISTRY.get(norm), backend, shape, "float32", "cpu", mode=mode)
    fn, pre = prep.pass_fns(pass_)
    return syncs.probe(fn, pre)


def test_every_eager_kind_of_tiers_1_and_2_is_probed_and_only_the_known_ones_sync():
    kinds = _kinds("eager")
    assert len(kinds) > 150
    found = {}
    for (norm, pass_, mode, layout) in sorted(kinds):
        f = _probe(norm, "eager", pass_, mode, layout)
        if f:
            found[(norm, pass_, mode)] = f
    assert set(found) == SYNCING, found
    assert all(f == {"_local_scalar_dense": 1} for f in found.values())


@pytest.mark.parametrize("norm,backend,syncing", [
    ("powernorm", "compile", True), ("unified_norm", "compile", True), ("rmsnorm", "compile", False),
    ("softmax", "compile_two_pass", True)])
def test_compiled_calls_are_probed_too(norm, backend, syncing):
    found = _probe(norm, backend, "fwd", "train", "tokens")
    assert found is not None and bool(found) == syncing, found
    if syncing:
        assert "_local_scalar_dense" in found


def test_triton_kinds_in_the_interpreter():
    """The Triton kinds, in a process that imported Triton with its interpreter on."""
    code = ("import sys; sys.path.insert(0, 'tests'); import test_host_sync as t; kinds = t._kinds('triton'); "
            "bad = {k: f for k in sorted(kinds) if (f := t._probe(k[0], 'triton', *k[1:]))}; "
            "print(len(kinds), bad)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    n, bad = run.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(n) > 30 and bad == "{}"


def test_the_probe_catches_the_usual_syncs():
    import torch

    x = torch.randn(8)
    assert syncs.probe(lambda: x.sum().item()) == {"_local_scalar_dense": 1}
    assert syncs.probe(lambda: bool((x > 0).any())) == {"_local_scalar_dense": 1}
    assert syncs.probe(lambda: x[x > 0]) == {"index": 1}           # a boolean mask: a nonzero inside the kernel
    assert syncs.probe(lambda: torch.nn.functional.layer_norm(x, (8,))) == {}
    assert syncs.host_sync_reason({}) is None and "_local_scalar_dense" in syncs.host_sync_reason(
        {"_local_scalar_dense": 1})


def test_records_of_a_syncing_call_are_flagged_host_sync(monkeypatch):
    """The real head-to-head path on the rehearsal's device: PowerNorm's training forward (a sync) is flagged
    host_sync with the operator in its metrics; RMSNorm's eager and native backends are not."""
    from normbench import device as seam
    from normbench.measure.group import Context
    from normbench.measure.headtohead import measure_set
    from normbench.measure.planning import Case
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance

    monkeypatch.setenv(seam.REHEARSE_ENV, "normal")
    seam.reset()
    try:
        ctx = Context(1000.0, "stated for the test", provenance(device="cuda"),
                      TimerSettings(warmup=1, min_reps=5, max_reps=10, min_time=0.0, max_time=1.0))
        shape = parse_shape("4x32")
        recs = measure_set([Case("powernorm", "eager", shape, "float32", "fwd", "cuda", "cold", 1)], ctx)
        assert recs and all("host_sync" in r["flags"] for r in recs)
        assert recs[0]["metrics"]["host_syncs"] == {"_local_scalar_dense": 1}
        clean = measure_set([Case("rmsnorm", b, shape, "float32", "fwd", "cuda", "cold", 1)
                             for b in ("eager", "native")], ctx)
        assert clean and not any("host_sync" in r["flags"] for r in clean)
        assert all(r["metrics"]["host_syncs"] == {} for r in clean)
    finally:
        seam.reset()
