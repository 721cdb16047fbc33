"""The fused Triton kernels against float64 references written here from the formulas (not the eager modules).

Without a GPU the kernels run in Triton's CPU interpreter. Triton reads ``TRITON_INTERPRET`` when ``@triton.jit``
decorates a function, its own ``tl.sum`` & co. included, so the variable must be set before anything imports
Triton. This module does that while pytest collects it (before any test runs), imports Triton and the kernels, and
puts the variable back; the ``tb`` fixture sets it again only while these tests run, so other test modules still
see the backend as unavailable. If Triton was already imported without it, the whole file reruns in a fresh
process instead (``test_in_a_fresh_interpreter_process``); tests/triton_interp.py does both.
Shapes are small; widths are not powers of two; one case is a single row, one a row wider than the fused limit.

Tolerances, as max|got − ref| ≤ tol · max|ref| per tensor (inputs are rounded to the dtype first, so the reference
sees exactly what the kernel sees):
  float32:  y 1e-5, dx 1e-5, parameter gradients 1e-4   (float32 accumulation over rows)
  bfloat16: y 1e-2, dx 1e-2, parameter gradients 2e-3   (y and dx are stored with 8 mantissa bits)
  float16:  y 2e-3, dx 2e-3, parameter gradients 2e-3   (11 mantissa bits)
Parameter gradients are accumulated in float32 whatever the input dtype, hence their tighter 16-bit tolerances.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys

import pytest
import torch
import triton_interp

pytestmark = pytest.mark.triton


MODE = triton_interp.prepare("_rownorm", "_pointwise", "_groupnorm")

TOL = {
    torch.float32: {"y": 1e-5, "dx": 1e-5, "dp": 1e-4},
    torch.bfloat16: {"y": 1e-2, "dx": 1e-2, "dp": 2e-3},
    torch.float16: {"y": 2e-3, "dx": 2e-3, "dp": 2e-3},
}
DTYPES = list(TOL)


@pytest.fixture(scope="module")
def tb():
    """normbench.kernels.triton_backend, with the interpreter on when there is no GPU."""
    yield from triton_interp.backend(MODE, "triton_backend")


@pytest.fixture(scope="module")
def dev(tb):
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def _close(got, ref, tol, what):
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    scale = float(ref.abs().max())
    err = float((got - ref).abs().max())
    assert err <= tol * max(scale, 1e-12), f"{what}: max error {err:.3g} > {tol:g} x max|ref| {scale:.3g}"


def _inputs(shape, dtype, dev, seed=0, shift=0.5, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * scale + shift).to(dtype)
    dy = torch.randn(shape, generator=g).to(dtype)
    return x.to(dev), dy.to(dev)


def _params(C, dev, seed=1, bias=True):
    g = torch.Generator().manual_seed(seed)
    w = (1 + 0.5 * torch.randn(C, generator=g)).to(dev)
    b = (0.3 * torch.randn(C, generator=g)).to(dev) if bias else None
    return w, b


# --- float64 references straight from the formulas; ``axis`` is the channel axis -------------------------------
def _ref_layernorm(x, w, b, eps, axis):
    mu = x.mean(axis, keepdim=True)
    var = ((x - mu) ** 2).mean(axis, keepdim=True)
    return _affine((x - mu) / torch.sqrt(var + eps), w, b, axis)


def _ref_rmsnorm(x, w, b, eps, axis):
    return _affine(x / torch.sqrt((x * x).mean(axis, keepdim=True) + eps), w, None, axis)


def _ref_crmsnorm(x, w, b, eps, axis):
    d = x.shape[axis] + 1
    q = ((x * x).sum(axis, keepdim=True) + x.sum(axis, keepdim=True) ** 2) / d
    return _affine(x / torch.sqrt(q + eps), w, None, axis)


def _ref_scalenorm(x, g, b, eps, axis):
    return g * x / torch.sqrt((x * x).sum(axis, keepdim=True)).clamp_min(eps)


def _affine(y, w, b, axis):
    shape = [1] * y.dim()
    shape[axis] = -1
    if w is not None:
        y = y * w.view(shape)
    if b is not None:
        y = y + b.view(shape)
    return y


ROW_NORMS = {
    # name: (reference, functional call, has weight, has bias, default eps)
    "layernorm": (_ref_layernorm, lambda tb, x, w, b, eps, lay: tb.layer_norm(x, w, b, eps, lay), True, True, 1e-5),
    "rmsnorm": (_ref_rmsnorm, lambda tb, x, w, b, eps, lay: tb.rms_norm(x, w, eps, lay), True, False, 1e-6),
    "srmsnorm": (_ref_rmsnorm, lambda tb, x, w, b, eps, lay: tb.rms_norm(x, None, eps, lay), False, False, 1e-6),
    "crmsnorm": (_ref_crmsnorm, lambda tb, x, w, b, eps, lay: tb.crms_norm(x, w, eps, lay), True, False, 1e-6),
    "scalenorm": (_ref_scalenorm, lambda tb, x, w, b, eps, lay: tb.scale_norm(x, w, eps, lay), True, False, 1e-5),
}


def _run_row(tb, name, x, dy, layout, dtype, C):
    ref_fn, call, has_w, has_b, eps = ROW_NORMS[name]
    dev = x.device
    if name == "scalenorm":
        w, b = torch.tensor(math.sqrt(C) * 0.9, device=dev), None
    else:
        w, b = _params(C, dev, bias=has_b)
        w = w if has_w else None
    params = [p for p in (w, b) if p is not None]
    for p in params:
        p.requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    y = call(tb, xg, w, b, eps, layout)
    assert y.dtype == x.dtype and y.shape == x.shape
    y.backward(dy)

    axis = -1 if layout == "tokens" else 1
    xd = x.detach().double().requires_grad_(True)
    pd = [p.detach().double().requires_grad_(True) for p in params]
    wd = pd[0] if has_w else None
    bd = pd[1] if has_b else None
    yr = ref_fn(xd, wd, bd, eps, axis)
    yr.backward(dy.double())
    tol = TOL[dtype]
    _close(y, yr, tol["y"], f"{name} y")
    _close(xg.grad, xd.grad, tol["dx"], f"{name} dx")
    for p, r, n in zip(params, pd, ("dw", "db")):
        _close(p.grad, r.grad, tol["dp"], f"{name} {n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_tokens(tb, dev, name, dtype):
    x, dy = _inputs((3, 11, 100), dtype, dev)
    _run_row(tb, name, x, dy, "tokens", dtype, 100)


@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_single_row(tb, dev, name):
    x, dy = _inputs((1, 37), torch.float32, dev, seed=2)
    _run_row(tb, name, x, dy, "tokens", torch.float32, 37)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_wide_row(tb, dev, name, dtype):
    """C = 20000 is past both fused limits: looped statistics and column-blocked kernels."""
    x, dy = _inputs((2, 20000), dtype, dev, seed=3)
    _run_row(tb, name, x, dy, "tokens", dtype, 20000)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_row_norms_64k_row(tb, dev, name):
    x, dy = _inputs((1, 65536), torch.float32, dev, seed=14)
    _run_row(tb, name, x, dy, "tokens", torch.float32, 65536)


@pytest.mark.parametrize("wide_bwd", ["fused3", "split5"])
@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_wide_path_many_blocks(tb, dev, name, wide_bwd, monkeypatch):
    """The wide path with its limits shrunk: many rows, several column blocks and rows per program; both wide
    backwards (the one-kernel three-pass one and the two-kernel one)."""
    R = importlib.import_module("normbench.kernels._rownorm")
    monkeypatch.setattr(R, "WIDE_BWD", wide_bwd)
    monkeypatch.setattr(R, "MAX_FUSED_C", 64)
    monkeypatch.setattr(R, "MAX_FUSED_C_BWD", 64)
    monkeypatch.setattr(R, "WIDE_CHUNK", 32)
    x, dy = _inputs((9, 77), torch.float32, dev, seed=4)
    _run_row(tb, name, x, dy, "tokens", torch.float32, 77)


@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_fused_forward_wide_backward(tb, dev, name, monkeypatch):
    """Rows one forward block holds but the backward's tile does not: the wide backward computes the statistics the
    fused forward never kept from its own pass over x."""
    R = importlib.import_module("normbench.kernels._rownorm")
    monkeypatch.setattr(R, "MAX_FUSED_C_BWD", 64)
    monkeypatch.setattr(R, "WIDE_CHUNK", 32)
    x, dy = _inputs((9, 77), torch.float32, dev, seed=6)
    _run_row(tb, name, x, dy, "tokens", torch.float32, 77)


def _take_path(monkeypatch, path: str) -> None:
    """Rows of 77 through ``path``: "fused", "wide backward[ fused3| split5]" (fused forward, wide backward) or "wide
    forward" (both wide), by shrinking the row-norm module's limits (chunks of 32, so a row spans several)."""
    R = importlib.import_module("normbench.kernels._rownorm")
    if path != "fused":
        monkeypatch.setattr(R, "MAX_FUSED_C_BWD", 64)
        monkeypatch.setattr(R, "WIDE_CHUNK", 32)
    if path == "wide forward":
        monkeypatch.setattr(R, "MAX_FUSED_C", 64)
    if path.endswith("split5"):
        monkeypatch.setattr(R, "WIDE_BWD", "split5")


@pytest.mark.parametrize("path", ["fused", "wide forward", "wide backward fused3", "wide backward split5"])
def test_layernorm_far_from_zero(tb, dev, path, monkeypatch):
    """|mean| ≫ std (x = 100 + N(0, 1)): the looped statistics of the wide forward and of both wide backwards sum
    x − x₀, so the variance does not cancel in float32 (E[x²] − E[x]² loses about four digits at 100², and the
    tolerance allows one unit in the last place of x, ~8e-6, times the output's scale)."""
    _take_path(monkeypatch, path)
    x, dy = _inputs((6, 77), torch.float32, dev, seed=9)
    _run_row(tb, "layernorm", x + 100.0, dy, "tokens", torch.float32, 77)


@pytest.mark.parametrize("wide", ["fused", "wide forward", "wide backward"])
def test_forward_keeps_no_statistics(tb, dev, wide, monkeypatch):
    """What autograd keeps between the passes, at every width: x (or the residual sum s) and the weight, never the
    row statistics (every backward computes them again from x)."""
    _take_path(monkeypatch, wide)
    x, r = (torch.randn(4, 77, device=dev, requires_grad=True) for _ in range(2))
    w, b = (torch.ones(77, device=dev, requires_grad=True) for _ in range(2))
    saved = {n: [tuple(t.shape) for t in f().grad_fn.saved_tensors]
             for n, f in (("rms", lambda: tb.rms_norm(x, w)), ("ln", lambda: tb.layer_norm(x, w, b)),
                          ("add_rms", lambda: tb.add_rms_norm(x, r, w)[0]))}
    assert saved == {"rms": [(4, 77), (77,)], "ln": [(4, 77), (77,)], "add_rms": [(4, 77), (77,)]}


@pytest.mark.parametrize("memory", ["nchw", "channels_last", "nchw_wide_c"])
@pytest.mark.parametrize("name", list(ROW_NORMS))
def test_row_norms_images(tb, dev, name, memory, monkeypatch):
    """Per-pixel over C: in place on NCHW, as rows on channels_last, and via a channels-last copy for wide C."""
    if memory == "nchw_wide_c":
        monkeypatch.setattr(importlib.import_module("normbench.kernels._rownorm"), "MAX_IMAGES_C", 16)
    x, dy = _inputs((2, 24, 5, 3), torch.float32, dev, seed=5)
    if memory == "channels_last":
        x, dy = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    _run_row(tb, name, x, dy, "images", torch.float32, 24)


@pytest.mark.parametrize("affine", ["none", "bias_only", "weight_only"])
def test_layernorm_partial_affine(tb, dev, affine):
    x, dy = _inputs((5, 30), torch.float32, dev, seed=13)
    w, b = _params(30, dev)
    w = None if affine in ("none", "bias_only") else w.requires_grad_(True)
    b = None if affine in ("none", "weight_only") else b.requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    tb.layer_norm(xg, w, b).backward(dy)
    xd = x.double().requires_grad_(True)
    wd = None if w is None else w.detach().double().requires_grad_(True)
    bd = None if b is None else b.detach().double().requires_grad_(True)
    _ref_layernorm(xd, wd, bd, 1e-5, -1).backward(dy.double())
    _close(xg.grad, xd.grad, 1e-5, "dx")
    for p, q in ((w, wd), (b, bd)):
        if p is not None:
            _close(p.grad, q.grad, 1e-4, "affine grad")


def test_images_bfloat16_layernorm(tb, dev):
    x, dy = _inputs((2, 40, 3, 7), torch.bfloat16, dev, seed=6)
    _run_row(tb, "layernorm", x, dy, "images", torch.bfloat16, 40)


def test_scalenorm_clamped_row(tb, dev):
    """A row whose norm is below ε: y = g·x/ε and dx = g·dy/ε, no gradient through the clamped norm."""
    x = torch.zeros(2, 10, device=dev)
    x[1] = torch.linspace(-1, 1, 10, device=dev)
    x[0, 3] = 1e-7
    g = torch.tensor(2.0, device=dev, requires_grad=True)
    xg = x.clone().requires_grad_(True)
    dy = torch.ones_like(x)
    y = tb.scale_norm(xg, g, 1e-5)
    y.backward(dy)
    assert torch.allclose(y[0], 2.0 * x[0] / 1e-5)
    assert torch.allclose(xg.grad[0], torch.full_like(x[0], 2.0 / 1e-5))


# --- residual add + norm -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", ["add_layernorm", "add_rmsnorm"])
@pytest.mark.parametrize("shape", [(2, 5, 96), (1, 3000), (2, 20000)], ids=["tokens", "single_row", "wide"])
def test_residual_norms(tb, dev, name, dtype, shape):
    if shape[-1] == 20000 and dtype == torch.float16:
        pytest.skip("the wide case runs in float32 and bfloat16 only, to keep the interpreter time down")
    C = shape[-1]
    x, dy = _inputs(shape, dtype, dev, seed=7)
    r, ds = _inputs(shape, dtype, dev, seed=8, shift=-0.2)
    w, b = _params(C, dev, bias=name == "add_layernorm")
    params = [p.requires_grad_(True) for p in (w, b) if p is not None]
    xg, rg = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    if name == "add_layernorm":
        y, s = tb.add_layer_norm(xg, rg, w, b, 1e-5)
    else:
        y, s = tb.add_rms_norm(xg, rg, w, 1e-6)
    (y.float() * dy.float()).sum().add((s.float() * ds.float()).sum()).backward()

    # s is x + r rounded once to the dtype (as the eager module's x + residual is). Triton's interpreter truncates
    # float32 -> bfloat16 casts where the GPU rounds to nearest, hence one unit in the last place of slack.
    exact = (x.double() + r.double()).to(dtype).double()
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 0.0
    assert s.dtype == dtype and bool(((s.double() - exact).abs() <= ulp * exact.abs()).all()), f"{name} s"
    # The norm must be of s as stored: the reference normalises the s the kernel returned.
    sd = s.detach().double().requires_grad_(True)
    pd = [p.detach().double().requires_grad_(True) for p in params]
    if name == "add_layernorm":
        yr = _ref_layernorm(sd, pd[0], pd[1], 1e-5, -1)
    else:
        yr = _ref_rmsnorm(sd, pd[0], None, 1e-6, -1)
    ((yr * dy.double()).sum() + (sd * ds.double()).sum()).backward()
    tol = TOL[dtype]
    _close(y, yr, tol["y"], f"{name} y")
    _close(xg.grad, sd.grad, tol["dx"], f"{name} dx")
    _close(rg.grad, sd.grad, tol["dx"], f"{name} dresidual")
    for p, q, n in zip(params, pd, ("dw", "db")):
        _close(p.grad, q.grad, tol["dp"], f"{name} {n}")


@pytest.mark.parametrize("used", ["y_only", "s_only"])
def test_residual_one_output_used(tb, dev, used):
    x, dy = _inputs((4, 33), torch.float32, dev, seed=9)
    r, _ = _inputs((4, 33), torch.float32, dev, seed=10)
    w, _ = _params(33, dev, bias=False)
    w.requires_grad_(True)
    xg, rg = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    y, s = tb.add_rms_norm(xg, rg, w, 1e-6)
    (y if used == "y_only" else s).mul(dy).sum().backward()
    sd = (x.double() + r.double()).requires_grad_(True)
    wd = w.detach().double().requires_grad_(True)
    yr = _ref_rmsnorm(sd, wd, None, 1e-6, -1)
    (yr if used == "y_only" else sd).mul(dy.double()).sum().backward()
    _close(xg.grad, sd.grad, 1e-5, "dx")
    _close(rg.grad, sd.grad, 1e-5, "dresidual")
    if used == "y_only":
        _close(w.grad, wd.grad, 1e-4, "dw")
    else:
        assert w.grad is None or float(w.grad.abs().max()) == 0.0


# --- point-wise ----------------------------------------------------------------------------------------------------
def _ref_pointwise(name, x, a, s, w, b, axis):
    z = a * x + (s if name == "derf" else 0.0)
    f = torch.tanh(z) if name == "dyt" else torch.erf(z)
    return _affine(f, w, b, axis)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", ["dyt", "derf"])
@pytest.mark.parametrize("case", ["tokens", "single_row", "images", "channels_last"])
def test_pointwise(tb, dev, name, dtype, case):
    shapes = {"tokens": (3, 9, 100), "single_row": (1, 77), "images": (3, 10, 9, 7), "channels_last": (2, 12, 5, 3)}
    shape = shapes[case]
    layout = "images" if len(shape) == 4 else "tokens"
    C = shape[1] if layout == "images" else shape[-1]
    x, dy = _inputs(shape, dtype, dev, seed=11, shift=0.3, scale=1.5)
    if case == "channels_last":
        x, dy = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    w, b = _params(C, dev)
    a = torch.tensor(0.7, device=dev)
    s = torch.tensor(-0.2, device=dev)
    params = [a, s, w, b] if name == "derf" else [a, w, b]
    for p in params:
        p.requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    y = tb.dyt(xg, a, w, b, layout) if name == "dyt" else tb.derf(xg, a, s, w, b, layout)
    assert y.dtype == dtype
    y.backward(dy)
    xd = x.detach().double().requires_grad_(True)
    pd = {id(p): p.detach().double().requires_grad_(True) for p in params}
    yr = _ref_pointwise(name, xd, pd[id(a)], pd[id(s)] if name == "derf" else None, pd[id(w)], pd[id(b)],
                        1 if layout == "images" else -1)
    yr.backward(dy.double())
    tol = TOL[dtype]
    _close(y, yr, tol["y"], f"{name} y")
    _close(xg.grad, xd.grad, tol["dx"], f"{name} dx")
    for p, n in zip(params, ("dalpha", "dshift", "dw", "db") if name == "derf" else ("dalpha", "dw", "db")):
        _close(p.grad, pd[id(p)].grad, tol["dp"], f"{name} {n}")


# --- GroupNorm -----------------------------------------------------------------------------------------------------
def _ref_groupnorm(x, G, w, b, eps):
    N, C = x.shape[:2]
    xg = x.reshape(N, G, -1)
    mu = xg.mean(-1, keepdim=True)
    var = ((xg - mu) ** 2).mean(-1, keepdim=True)
    y = ((xg - mu) / torch.sqrt(var + eps)).reshape(x.shape)
    return _affine(y, w, b, 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("case", ["fused", "looped", "single_sample"])
def test_groupnorm(tb, dev, dtype, case, monkeypatch):
    shape, G = {"fused": ((2, 12, 5, 7), 4), "looped": ((2, 12, 9, 11), 3), "single_sample": ((1, 6, 4, 5), 2)}[case]
    if case == "looped":
        GN = importlib.import_module("normbench.kernels._groupnorm")
        monkeypatch.setattr(GN, "MAX_FUSED", 16)  # force the split statistics and the two-pass backward
        monkeypatch.setattr(GN, "MAX_FUSED_BWD", 16)
        monkeypatch.setattr(GN, "TILE", 64)
    x, dy = _inputs(shape, dtype, dev, seed=12, shift=3.0)
    w, b = _params(shape[1], dev)
    w.requires_grad_(True)
    b.requires_grad_(True)
    xg = x.clone().requires_grad_(True)
    y = tb.group_norm(xg, G, w, b, 1e-5)
    y.backward(dy)
    xd = x.detach().double().requires_grad_(True)
    wd, bd = w.detach().double().requires_grad_(True), b.detach().double().requires_grad_(True)
    _ref_groupnorm(xd, G, wd, bd, 1e-5).backward(dy.double())
    tol = TOL[dtype]
    _close(y, _ref_groupnorm(x.double(), G, w.double(), b.double(), 1e-5), tol["y"], "groupnorm y")
    _close(xg.grad, xd.grad, tol["dx"], "groupnorm dx")
    _close(w.grad, wd.grad, tol["dp"], "groupnorm dw")
    _close(b.grad, bd.grad, tol["dp"], "groupnorm db")


# --- modules built through the registry ------------------------------------------------------------------------------
TRITON_NORMS = ["layernorm", "rmsnorm", "srmsnorm", "crmsnorm", "scalenorm", "add_layernorm", "add_rmsnorm", "dyt",
                "derf", "groupnorm"]


@pytest.mark.parametrize("name", TRITON_NORMS)
def test_module_shares_parameters_with_eager(tb, dev, name):
    import normbench

    spec = normbench.get_norm(name)
    layout = spec.layouts[0]
    C = 16
    torch.manual_seed(0)
    eager = spec.create(C, layout=layout).to(dev)
    fast = tb.TritonNorm(eager, name) if name != "srmsnorm" else tb.build_srmsnorm(eager, spec)
    assert list(fast.state_dict()) == list(eager.state_dict())
    for (n1, p1), (n2, p2) in zip(fast.named_parameters(), eager.named_parameters()):
        assert n1 == n2 and p1 is p2
    with torch.no_grad():
        for p in eager.parameters():
            p.add_(0.1 * torch.randn_like(p))
    shape = (2, 3, C) if layout == "tokens" else (2, C, 3, 4)
    inputs = [torch.randn(shape, device=dev, requires_grad=True) for _ in range(2 if spec.kind == "residual" else 1)]
    out_e, out_f = eager(*inputs), fast(*inputs)
    out_e = out_e if isinstance(out_e, tuple) else (out_e,)
    out_f = out_f if isinstance(out_f, tuple) else (out_f,)
    for a, b in zip(out_f, out_e):
        _close(a, b, 1e-5, f"{name} vs eager")
    sum(o.sum() for o in out_f).backward()
    assert all(t.grad is not None for t in inputs)
    for n, p in fast.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"no gradient reached {n}"
    fresh = spec.create(C, layout=layout, backend="triton").to(dev)
    fresh.load_state_dict(eager.state_dict())
    with torch.no_grad():
        out_g = fresh(*inputs)
    out_g = out_g if isinstance(out_g, tuple) else (out_g,)
    for a, b in zip(out_g, out_f):
        _close(a, b, 0.0, f"{name} after load_state_dict")


def test_module_in_bfloat16(tb, dev):
    import normbench

    m = normbench.get_norm("layernorm").create(48, backend="triton").to(dev).to(torch.bfloat16)
    x = torch.randn(4, 48, device=dev, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and m.weight.grad.dtype == torch.bfloat16 and x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["rmsnorm", "dyt"])
def test_second_order_gradient_is_a_clear_error(tb, dev, name):
    """A first-order backward skips ``once_differentiable`` (host time); under ``create_graph=True`` it still runs
    through it, so differentiating the gradient raises instead of silently treating it as a constant."""
    import normbench

    m = normbench.get_norm(name).create(32, backend="triton").to(dev)
    x = torch.randn(3, 32, device=dev, requires_grad=True)
    (gx,) = torch.autograd.grad(m(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gx.sum().backward()


def test_unsupported_dtype_is_a_clear_error(tb, dev):
    with pytest.raises(TypeError, match="backend='eager'"):
        tb.rms_norm(torch.randn(2, 8, device=dev, dtype=torch.float64), None)


def test_backward_grid_follows_occupancy(tb):
    """Persistent grids launch as many programs per SM as the compiled kernel fits (threads, registers, shared)."""
    from normbench.kernels._common import programs_per_sm

    assert programs_per_sm(8, 0) == 8                  # 256 threads: 2048 / 256, registers unknown
    assert programs_per_sm(8, 64) == 4                 # 64 regs x 256 threads = 16384 of 65536
    assert programs_per_sm(8, 128) == 2                # the old fixed 2 per SM is the 128-register case
    assert programs_per_sm(4, 40) == 12                # 40 regs round up to 48 per thread (256 per warp)
    assert programs_per_sm(4, 32, shared_bytes=100 * 1024) == 2   # shared memory limits
    assert programs_per_sm(32, 255) == 1               # never below one


def test_without_gpu_or_triton_the_backend_says_why():
    """In a fresh process: no TRITON_INTERPRET and no GPU, then no triton at all. Neither may crash an import."""
    code = r"""
import sys, torch
import normbench
from normbench.registry import BackendUnavailable
from normbench.kernels import triton_backend as tb
spec = normbench.get_norm("layernorm")
if torch.cuda.is_available():
    print("GPU")
else:
    print(tb.unavailable())
    try:
        spec.create(8, backend="triton")
    except BackendUnavailable as exc:
        print("raised", "TRITON_INTERPRET=1" in str(exc))
sys.modules["triton"] = None  # what an environment without triton looks like to an import
for name in [m for m in sys.modules if m.startswith("normbench.kernels")]:
    del sys.modules[name]
from normbench.kernels import triton_backend as tb2
print(tb2.unavailable())
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    if lines[0] != "GPU":
        assert lines[0].startswith("no CUDA GPU") and "TRITON_INTERPRET=1" in lines[0]
        assert lines[1] == "raised True"
    assert lines[-1] == "triton is not installed: pip install normbench[triton]"


def test_in_a_fresh_interpreter_process():
    """Fallback when something imported Triton before this module could switch on the interpreter."""
    triton_interp.rerun_in_fresh_process(MODE, __file__)
