"""Baseline adapters against CPU stand-ins with the real libraries' call signatures (tests/fixtures/fake_baselines).

Each adapter must give the eager norm's output and gradients (the float64 error check through the real core),
record the library's version, and keep the harness honest about in-place kernels. ``native`` (``F.rms_norm``)
needs no fake: it runs here for real.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest
import torch

from normbench import results
from normbench.measure import baselines, group, planning
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings

FAKES = Path(__file__).parent / "fixtures" / "fake_baselines"
TOKENS = Shape("tiny-tokens", "tokens", (4, 8, 64), "quick")
IMAGES = Shape("tiny-images", "images", (2, 64, 3, 3), "quick")
FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
FAKE_PACKAGES = ("liger_kernel", "quack", "transformer_engine", "flashinfer", "apex")


@pytest.fixture
def fakes(monkeypatch, one_thread):
    """The stand-ins importable, and every baseline allowed on the CPU (the real kernels need CUDA)."""
    monkeypatch.syspath_prepend(str(FAKES))
    for name in list(sys.modules):
        if name.split(".")[0] in FAKE_PACKAGES:
            monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    for key, b in list(baselines.REGISTRY.items()):
        monkeypatch.setitem(baselines.REGISTRY, key, dataclasses.replace(b, requires_cuda=False))
    yield
    for name in list(sys.modules):
        if name.split(".")[0] in FAKE_PACKAGES:
            sys.modules.pop(name, None)


def _ctx():
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


# The norm baselines (the softmax baselines joined the registry from their own module and have their own tests).
PAIRS = [(b, n) for b, n in baselines.REGISTRY if "softmax" not in n]


@pytest.mark.parametrize("backend,norm", PAIRS, ids=[f"{b}-{n}" for b, n in PAIRS])
def test_adapter_computes_the_eager_norm(fakes, backend, norm):
    b = baselines.get(backend, norm)
    shape = IMAGES if "images" in b.layouts else TOKENS
    dtype = "float32" if "float32" in b.dtypes else "bfloat16"
    passes = ("fwd",) if b.inplace_inputs or backend == "flashinfer" else ("fwd", "fwd+bwd")
    cases = [planning.Case(norm, backend, shape, dtype, p, "cpu", "hot", 1) for p in passes]
    recs = group.measure_group(cases, _ctx())
    assert [r["config"]["pass"] for r in recs] == list(passes)
    tol = 1e-5 if dtype == "float32" else 2e-2
    for r in recs:
        err = r["metrics"]["err"]
        assert err["y"]["max_rel"] < tol, (backend, norm, err)
        if r["config"]["pass"] != "fwd":
            assert err["dx"]["max_rel"] < tol, (backend, norm, err)
            if err["dw"] is not None:
                assert err["dw"]["max_rel"] < tol, (backend, norm, err)
        expected = "torch " + torch.__version__ if backend == "native" else f"{b.dist} 9.9.9"
        assert r["config"]["baseline_version"] == expected
        assert r["provenance"]["baseline"]["version"] == expected.split(" ", 1)[1]
        assert r["provenance"]["baseline"]["call"] == b.call


def test_liger_rmsnorm_is_built_without_in_place_backward_and_the_cached_gradient_survives(fakes):
    import liger_kernel.transformers as lk

    lk.BUILT_IN_PLACE.clear()
    prep = group.Prepared(_spec("rmsnorm"), "liger", TOKENS, "float32", "cpu")
    assert lk.BUILT_IN_PLACE == [False]
    err = prep.errors()
    cached = [g.clone() for g in prep._gouts]
    fn, pre = prep.pass_fns("bwd")
    for _ in range(3):
        pre()
        fn()
    for a, b in zip(cached, prep._gouts, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert err["dx"]["max_rel"] < 1e-5


def test_in_place_backward_would_corrupt_the_gradient_and_the_error_check_guards_it(fakes, monkeypatch):
    """The stand-in really writes into dY when in_place=True; the core's error check still compares clean data."""
    import liger_kernel.transformers as lk

    m = lk.LigerRMSNorm(64, eps=1e-6)  # Liger's default: in_place=True
    x = torch.randn(8, 64, requires_grad=True)
    g = torch.randn(8, 64)
    g0 = g.clone()
    torch.autograd.grad(m(x), [x], g)
    assert not torch.equal(g, g0), "the stand-in's in-place backward did not overwrite dY"

    # an adapter that kept Liger's default: the error check hands the backward a copy of the cached gradient
    def in_place_build(eager):
        lib = lk.LigerRMSNorm(eager.num_features, eps=float(eager.eps))
        lib.weight = eager.weight
        return baselines._Adapter(eager, lambda mod, xx: mod.library(xx), lib)

    b = baselines.get("liger", "rmsnorm")
    monkeypatch.setitem(baselines.REGISTRY, ("liger", "rmsnorm"), dataclasses.replace(b, build=in_place_build))
    prep = group.Prepared(_spec("rmsnorm"), "liger", TOKENS, "float32", "cpu")
    err = prep.errors()
    assert err["dx"]["max_rel"] < 1e-5 and err["dw"]["max_rel"] < 1e-5


def test_flashinfer_fused_add_rmsnorm_inputs_restored_and_forward_only(fakes):
    import flashinfer.norm as fnorm

    prep = group.Prepared(_spec("add_rmsnorm"), "flashinfer", TOKENS, "bfloat16", "cpu")
    originals = [x.detach().clone() for x in prep.inputs]
    err = prep.errors()
    assert err["y"]["max_rel"] < 2e-2 and err["dx"] is None
    for x, o in zip(prep.inputs, originals, strict=True):  # the check ran the kernel on copies
        torch.testing.assert_close(x.detach(), o, rtol=0, atol=0)
    fn, pre = prep.pass_fns("fwd")
    assert pre is not None
    fnorm.CALLS.clear()
    outs = []
    for _ in range(3):
        pre()
        outs.append([t.detach().clone() for t in fn()])
    assert len(fnorm.CALLS) == 3
    for later in outs[1:]:  # every repetition normalised the same data
        for a, b in zip(outs[0], later, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(group.Unsupported, match="forward-only"):
        prep.pass_fns("bwd")


def test_forward_only_baseline_refuses_backward_cases_and_keeps_forward(fakes):
    cases = [planning.Case("add_rmsnorm", "flashinfer", TOKENS, "bfloat16", p, "cpu", "hot", 1) for p in ("fwd", "bwd")]
    refused: list = []
    recs = group.measure_group(cases, _ctx(), refused)
    assert [r["config"]["pass"] for r in recs] == ["fwd"]
    assert len(refused) == 1 and "forward-only" in refused[0][1]


def test_plan_offers_baselines_on_their_layouts_only():
    cases = planning.plan(norms=["groupnorm", "rmsnorm", "add_rmsnorm"], device="cpu", quick=True)
    got = {(c.norm, c.backend, c.shape.layout) for c in cases}
    assert ("groupnorm", "liger", "images") in got
    assert ("rmsnorm", "native", "tokens") in got and ("rmsnorm", "quack", "tokens") in got
    assert ("add_rmsnorm", "flashinfer", "tokens") in got
    assert not any(b == "liger" and n == "rmsnorm" and lay == "images" for n, b, lay in got)


def test_missing_library_is_a_skip_with_its_reason():
    assert "not importable" in baselines.unavailable("te", "rmsnorm", "tokens", "cuda")
    assert "CUDA" in baselines.unavailable("liger", "rmsnorm", "tokens", "cpu") or \
        "not importable" in baselines.unavailable("liger", "rmsnorm", "tokens", "cpu")
    assert baselines.unavailable("native", "rmsnorm", "tokens", "cpu") is None
    assert "float32" in baselines.unavailable("flashinfer", "rmsnorm", "tokens", "cuda", "float32")


def _spec(name):
    from normbench.discovery import REGISTRY

    return REGISTRY.get(name)
