"""The compile backend says whether it stayed compiled: a multi-width, two-dtype sweep stays compiled (or is flagged).

Assertions use Dynamo's counters and the compiled-graph call counts (normbench.kernels.compile_watch), never timings.
"""

from __future__ import annotations

import pytest
import torch

from normbench import results
from normbench.kernels import compile_watch
from normbench.measure import group, planning, suite
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
# Two widths x two dtypes = four compiled graphs of one forward: above the recompile limit the tests set (2), so a
# sweep sharing one Dynamo cache would fall back to eager from the third case on.
WIDTHS = (32, 48)
DTYPES = ("float32", "bfloat16")


def _ctx():
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


def _sweep(norm="rmsnorm", passes=("fwd", "fwd+bwd")):
    records, ctx = [], _ctx()
    for c in WIDTHS:
        shape = Shape(f"tiny-{c}", "tokens", (8, c), "quick")
        for dtype in DTYPES:
            cases = [planning.Case(norm, "compile", shape, dtype, p, "cpu", "hot", 1) for p in passes]
            records += group.measure_group(cases, ctx)
    return records


@pytest.fixture
def low_recompile_limit(monkeypatch, one_thread):
    import torch._dynamo.config as dconfig

    torch._dynamo.reset()
    with dconfig.patch(recompile_limit=2):
        yield
    torch._dynamo.reset()


def test_sweep_over_widths_and_dtypes_stays_compiled(low_recompile_limit):
    recs = _sweep()
    assert len(recs) == len(WIDTHS) * len(DTYPES) * 2
    for r in recs:
        comp = r["metrics"]["compile"]
        assert comp["stayed_compiled"], comp
        # every timed forward call ran compiled code, and no graph was (re)built while timing
        assert comp["forward_calls"] > 0 and comp["compiled_calls"] >= comp["forward_calls"]
        assert comp["frames_failed"] == 0 and comp["graph_breaks"] == 0
        assert "fell_back" not in r.get("flags", [])


def test_shared_cache_falls_back_and_is_flagged(low_recompile_limit, monkeypatch):
    # Without a fresh Dynamo cache per case the limit is hit: those records must say so.
    monkeypatch.setattr(compile_watch, "fresh_compile_state", lambda: None)
    recs = _sweep(passes=("fwd",))
    flagged = [r for r in recs if "fell_back" in r.get("flags", [])]
    assert flagged, "the third and fourth compiled cases ran eagerly but were not flagged"
    for r in flagged:
        comp = r["metrics"]["compile"]
        assert not comp["stayed_compiled"] and comp["compiled_calls"] < comp["forward_calls"]
        assert "fell back to eager" in r["flag_reasons"]["fell_back"]
    # the first cases (within the limit) stayed compiled and are not flagged
    assert recs[0]["metrics"]["compile"]["stayed_compiled"] and "fell_back" not in recs[0].get("flags", [])


def test_graph_break_is_reported(one_thread):
    from normbench.kernels.compile_watch import CompiledNorm

    class ItemBreak(torch.nn.Module):
        def forward(self, x):
            return x * x.sum().item()  # .item() breaks the graph

    torch._dynamo.reset()
    m = CompiledNorm(ItemBreak())
    m.watch.mark()
    for _ in range(2):
        m(torch.randn(4, 4))
    rep = m.watch.report()
    assert rep.graph_breaks >= 1 and not rep.stayed_compiled
    assert "graph break" in rep.reason()


def test_compiled_module_keeps_eager_state_dict_and_results(one_thread):
    import normbench

    spec = normbench.get_norm("layernorm")
    torch._dynamo.reset()
    eager, comp = spec.create(16), spec.create(16, backend="compile")
    comp.load_state_dict(eager.state_dict())
    assert set(comp.state_dict()) == set(eager.state_dict())
    x = torch.randn(4, 16)
    torch.testing.assert_close(comp(x), eager(x))
    assert comp.watch.graphs_built == 1 and comp.watch.compiled_calls == 1


def test_retained_compiled_backward_can_be_called_repeatedly(one_thread):
    import torch._functorch.config as fconfig

    # fconfig.patch, not monkeypatch: a config module keeps its values outside __dict__, and monkeypatch's
    # undo would delete the setting for every later test
    with fconfig.patch(donated_buffer=True):
        _retained_backward_twice(fconfig)


def _retained_backward_twice(fconfig):
    torch._dynamo.reset()
    case = suite.case_for("rmsnorm", "compile", "quick-8x128x512", "float32", "bwd", harness="asv")
    prep, fn, pre, _ = suite.prepare(case, retain_graph=True)
    assert pre is None
    assert fconfig.donated_buffer is False  # turned off before the module was compiled
    first = [g.clone() for g in fn() if g is not None]
    for _ in range(2):  # the same retained graph: identical gradients each call
        again = [g for g in fn() if g is not None]
        for a, b in zip(first, again, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
