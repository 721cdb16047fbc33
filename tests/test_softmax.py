"""Softmax and log-softmax: every backend against float64 references written here from the formulas.

Inputs include widths that are not powers of two, a single row, −inf entries, a row of all −inf (NaN, as
``torch.softmax`` gives in float64), large magnitudes (±1500, beyond the two-pass split's exact range at 3000, and
a spread that overflows ``compile_two_pass``'s anchored sum), and rows of +inf. The Triton kernels run in Triton's
CPU interpreter (tests/triton_interp.py switches it on while this module is collected); ``limit``/``block`` shrink
the on-chip width so the looped kernels walk several chunks.

Tolerances: max|got − ref| ≤ tol · max|ref| over the finite reference entries; NaN and ±inf must sit exactly where
the reference has them. float32: 1e-5 (y), 1e-5 (dx); bfloat16: 1e-2.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import triton_interp

from normbench.measure import bytes_model as bm

MODE = triton_interp.prepare("_softmax")
NINF, INF = float("-inf"), float("inf")


# --- float64 references from the formulas --------------------------------------------------------------------------
def ref_softmax(x: torch.Tensor, log: bool) -> torch.Tensor:
    x = x.double()
    m = x.max(-1, keepdim=True).values
    z = x - m                       # −inf − (−inf) = NaN: an all −inf row has no distribution
    s = torch.exp(z).sum(-1, keepdim=True)
    return z - torch.log(s) if log else torch.exp(z) / s


def ref_grad(y64: torch.Tensor, dy: torch.Tensor, log: bool) -> torch.Tensor:
    dy = dy.double()
    if log:
        return dy - torch.exp(y64) * dy.sum(-1, keepdim=True)
    return y64 * (dy - (dy * y64).sum(-1, keepdim=True))


def special_rows(C: int, seed: int = 0) -> torch.Tensor:
    """Rows: normal scores; some −inf; ±1500 (large, inside the two-pass range); 3000 (outside it); all −inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, C, generator=g) * 3
    x[1, ::3] = NINF
    x[2, 0], x[2, C // 2] = 1500.0, -1500.0
    x[2, C - 1] = 1499.25
    x[3, 1 % C] = 3000.0
    x[3, 0] = 2999.5
    x[4] = NINF
    x[5] = x[5] - 200.0
    return x


def assert_close(got, ref, tol, what):
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert got.shape == ref.shape, what
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{what}: NaN positions differ"
    assert torch.equal(torch.isinf(got) & ~fin, torch.isinf(ref)) and torch.equal(got[torch.isinf(ref)],
                                                                                 ref[torch.isinf(ref)]), \
        f"{what}: infinities differ"
    if fin.any():
        scale = float(ref[fin].abs().max())
        err = float((got[fin] - ref[fin]).abs().max())
        assert err <= tol * max(scale, 1e-30), f"{what}: max error {err:.3g} > {tol:g} x {scale:.3g}"


def _check_backend(fn, x, log, tol=1e-5):
    """fn(x) -> y against the float64 references, forward and backward (dy random)."""
    xg = x.clone().requires_grad_(True)
    y = fn(xg)
    ref = ref_softmax(x, log)
    assert_close(y, ref, tol, "y")
    dy = torch.randn_like(x)
    (dx,) = torch.autograd.grad(y, xg, dy)
    ok_rows = torch.isfinite(ref).any(-1) & ~torch.isnan(ref).any(-1)
    assert_close(dx[ok_rows], ref_grad(ref[ok_rows], dy[ok_rows], log), tol, "dx")


# --- eager and compiled formulations --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_eager_matches_reference(name):
    import normbench

    spec = normbench.get_norm(name)
    assert spec.kind == "softmax" and spec.family == "softmax"
    x = special_rows(37)
    _check_backend(spec.create(37), x, name == "log_softmax")


@pytest.mark.parametrize("algo", ["three_pass", "two_pass"])
def test_compiled_formulations_match_reference(algo, one_thread):
    """compile_three_pass / compile_two_pass (Inductor's C++), with a row beyond float64's range for the two-pass."""
    import normbench

    for name in ("softmax", "log_softmax"):
        x = special_rows(301)
        x[0, 7] = 900.0   # far above the first entry: the two-pass's sum overflows and the row falls back
        module = normbench.get_norm(name).create(301, backend=f"compile_{algo}")
        _check_backend(module, x, name == "log_softmax")
        assert module.row_passes("fwd") == (3 if algo == "three_pass" else 2)


def test_compiled_two_pass_bfloat16(one_thread):
    import normbench

    x = special_rows(96)[:3].to(torch.bfloat16)
    y = normbench.get_norm("softmax").create(96, backend="compile_two_pass")(x)
    assert y.dtype == torch.bfloat16
    assert_close(y, ref_softmax(x, False), 1e-2, "y bf16")


# --- Triton kernels under the interpreter ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kb():
    yield from triton_interp.backend(MODE, "softmax_backend")


@pytest.mark.triton
@pytest.mark.parametrize("algo", ["three_pass", "online", "two_pass"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("looped", [False, True], ids=["on_chip", "looped"])
def test_triton_kernels_match_reference(kb, algo, log, looped):
    dev = triton_interp.device(MODE)
    kw = {"limit": 16, "block": 16} if looped else {}
    for C in (1, 37, 100):
        x = special_rows(max(C, 4))[:, :C] if C >= 4 else torch.randn(1, C)
        if C == 1:
            x = torch.tensor([[2.5]])
        _check_backend(lambda t: kb.softmax(t, algo, log, **kw), x.to(dev), log)


@pytest.mark.triton
def test_triton_two_pass_has_no_max_pass_within_range(kb):
    """The two-pass kernel's answer does not depend on the row max being found first: rows at +1000 and −1000."""
    dev = triton_interp.device(MODE)
    x = torch.randn(2, 70) * 5
    x[0] += 1000.0
    x[1] -= 1000.0
    for log in (False, True):
        assert_close(kb.softmax(x.to(dev), "two_pass", log, limit=16, block=16), ref_softmax(x, log), 1e-5, "shifted")


@pytest.mark.triton
def test_triton_bfloat16_and_modules(kb):
    import normbench

    dev = triton_interp.device(MODE)
    x = special_rows(50)[:3].to(torch.bfloat16).to(dev)
    for algo in ("three_pass", "online", "two_pass"):
        y = kb.softmax(x, algo, False, limit=16, block=16)
        assert y.dtype == torch.bfloat16
        assert_close(y, ref_softmax(x.cpu(), False), 1e-2, f"{algo} bf16")
    m = normbench.get_norm("log_softmax").create(50, backend="triton_two_pass")
    assert m.row_passes("fwd") == 1 and m.row_passes("fwd+bwd") == 2  # 50 wide: one read each way
    _check_backend(m, special_rows(50).to(dev), True)
    k = importlib.import_module("normbench.kernels._softmax")
    assert [k.row_passes(a, 256000) for a in ("three_pass", "online", "two_pass")] == [3, 2, 2]
    assert k.row_passes("two_pass", 256000, backward=True) == 2


@pytest.mark.triton
def test_in_a_fresh_interpreter_process():
    """If Triton was imported in compiler mode before this module, rerun its kernel tests where it was not."""
    triton_interp.rerun_in_fresh_process(MODE, __file__, "-k", "triton_", timeout=600)


# --- bytes, shapes, sweeps ------------------------------------------------------------------------------------------
def test_bytes_are_the_same_minimum_for_every_algorithm():
    p = dict(n_elements=1000, inputs=1, elem_bytes=2, param_bytes=0, stat_rows=0, stats_per_row=0, running_values=0)
    assert bm.formula_for("softmax", "softmax") == "softmax"
    assert bm.bytes_moved("softmax", "fwd", p) == 2 * 2 * 1000       # read x, write y
    assert bm.bytes_moved("softmax", "bwd", p) == 3 * 2 * 1000       # read y and dy, write dx
    assert bm.bytes_moved("softmax", "fwd+bwd", p) == 5 * 2 * 1000


def test_softmax_stays_out_of_the_quick_and_default_sweeps():
    from normbench.measure.kernel_suite import grid
    from normbench.measure.planning import plan

    quick = plan(quick=True, device="cpu")
    assert not any(c.norm in ("softmax", "log_softmax") for c in quick)
    default = plan(device="cpu", backends=["eager"], dtypes=["float32"], passes=["fwd"])
    assert not any(c.norm in ("softmax", "log_softmax") for c in default)
    assert not any(c.shape.shape_class == "softmax" for c in default)
    soft = plan(shape_class="softmax", device="cpu", dtypes=["float32"], passes=["fwd"])
    assert {c.norm for c in soft} == {"softmax", "log_softmax"}
    assert {c.shape.shape_class for c in soft} == {"softmax"}
    assert {"compile_two_pass", "compile_three_pass", "triton_two_pass", "liger", "quack"} <= {c.backend for c in soft}
    named = plan(norms=["softmax"], device="cpu", dtypes=["float32"], passes=["fwd"], backends=["eager"])
    assert named and all(c.shape.shape_class == "softmax" for c in named)
    for kind in ("small", "quick", "full"):
        assert not {"softmax", "log_softmax"} & set(grid(kind, norms="")[0])
    g = grid("softmax", norms="")
    assert set(g[0]) == {"softmax", "log_softmax"} and "vocab-4096x256000" in g[2] and "attn-1024" in g[2]


def test_training_sweeps_skip_softmax():
    from normbench.train.matrix import norm_names as _norm_names

    assert not {"softmax", "log_softmax"} & set(_norm_names(["all"]))


def test_record_reports_row_passes_and_same_bytes(tmp_path, one_thread):
    """A real measurement of a tiny softmax shape: bytes from the softmax formula, passes beside the GB/s."""
    from normbench.measure.group import Context, measure_group
    from normbench.measure.planning import Case
    from normbench.measure.shapes import Shape
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance

    shape = Shape("tiny", "tokens", (1, 6, 301), "softmax")  # the compiled formulations test's rows: no recompile
    # A stated ceiling (measuring one copies 512 MiB five times); this test checks bytes and passes, not speed.
    ctx = Context(1e3, "test ceiling", provenance(command="pytest", device="cpu"), TimerSettings.quick())
    recs = {}
    for backend in ("eager", "compile_two_pass"):
        cases = [Case("softmax", backend, shape, "float32", p, "cpu", "hot", 1) for p in ("fwd", "bwd")]
        for r in measure_group(cases, ctx):
            recs[(backend, r["config"]["pass"])] = r
    assert recs[("eager", "fwd")]["metrics"]["row_passes"] is None
    assert recs[("compile_two_pass", "fwd")]["metrics"]["row_passes"] == 2
    assert recs[("compile_two_pass", "bwd")]["metrics"]["row_passes"] == 2
    for (backend, p), r in recs.items():
        assert r["config"]["bytes_model"]["formula"] == "softmax"
        assert r["metrics"]["bytes_moved"] == (2 if p == "fwd" else 3) * 4 * 6 * 301
        assert r["metrics"]["err"]["y"]["max_rel"] < 1e-5


# --- the claim evidence ---------------------------------------------------------------------------------------------
def _rec(backend, t, shape=(1, 32, 4194304), dtype="float32", commit="abc", hw="cpu-x", q=0.01, flags=()):
    return {"norm": {"name": "softmax"}, "flags": list(flags),
            "config": {"backend": backend, "pass": "fwd", "dtype": dtype, "device": "cpu", "timing": "hot",
                       "shape": list(shape)},
            "metrics": {"time_median_s": t, "time_iqr_s": 2 * q * t, "time_q25_s": t * (1 - q),
                        "time_q75_s": t * (1 + q), "suspect": False},
            "provenance": {"hardware_id": hw, "git_commit": commit}}


def test_two_pass_claim_evidence_pairs_out_of_cache_records():
    import pandas as pd

    from normbench.records.store import flatten
    from normbench.softmax import two_pass_claim_evidence

    recs = [_rec("compile_two_pass", 0.8), _rec("compile_three_pass", 1.0),
            _rec("compile_two_pass", 0.1, shape=(1, 512, 1000)), _rec("compile_three_pass", 0.1, shape=(1, 512, 1000)),
            _rec("compile_three_pass", 1.0, commit="other"),                       # another run: no partner
            _rec("triton_two_pass", 0.5, flags=("noisy",)), _rec("triton_three_pass", 0.6)]  # flagged: left out
    rows = [{**flatten({**r, "id": str(i), "kind": "kernel"}), "flags": r["flags"]} for i, r in enumerate(recs)]
    for raw in (recs, pd.DataFrame(rows)):
        ev = two_pass_claim_evidence(raw)
        assert len(ev) == 1
        row = ev.iloc[0]
        assert row["pair"] == "compile_two_pass vs compile_three_pass" and row["speedup"] == pytest.approx(1.25)
        assert bool(row["separated"])
    assert two_pass_claim_evidence([]).empty
    assert two_pass_claim_evidence([_rec("compile_two_pass", 1.0, flags=("noisy",))]).empty  # nothing left


# --- external baselines ---------------------------------------------------------------------------------------------
def test_softmax_baselines_are_registered_for_softmax_only():
    """Liger's and quack's softmax join the baselines registry (their adapters run against the fakes with the
    libraries' signatures in tests/fixtures/fake_baselines, through the real core, in tests/test_baselines.py)."""
    from normbench.measure import baselines as bl

    assert {"liger", "quack"} <= set(bl.backends_for("softmax")) and not bl.backends_for("log_softmax")
    assert bl.get("quack", "softmax").dist == "quack-kernels" and bl.get("liger", "softmax").dist == "liger-kernel"
    assert bl.unavailable("liger", "softmax", "tokens", "cpu") is not None
    assert "no implementation" in bl.unavailable("liger", "log_softmax", "tokens", "cuda")


def test_docs_softmax_block_is_generated_from_the_committed_records(committed_results):
    from pathlib import Path

    from normbench import claims, gendocs
    from normbench.softmax import softmax_markdown

    repo = Path(__file__).resolve().parents[1]
    text = (repo / "docs" / "softmax.md").read_text(encoding="utf-8")
    bodies = {m.group("name"): m.group("body") for m in gendocs._BLOCK.finditer(text)}
    want = softmax_markdown(claims.load_records(str(committed_results)))
    assert bodies["softmax"].rstrip("\n") == want.rstrip("\n"), "run `normbench docs --doc docs/softmax.md`"
