"""Feature and point-wise norms against independent float64 references written from each paper's formula."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

import normbench

# Widths that are not powers of two, so no kernel path can rely on them.
C_TOKENS, C_IMAGES = 23, 13
TOKENS_SHAPE, IMAGES_SHAPE = (3, 4, C_TOKENS), (2, C_IMAGES, 3, 5)
SMALL_C = 7
SMALL_TOKENS, SMALL_IMAGES = (2, 3, SMALL_C), (2, SMALL_C, 2, 3)

# |module − float64 reference| ≤ atol + rtol·|reference|, per dtype of the module and its inputs.
# bfloat16 keeps 8 significant bits (relative step 2^-8 ≈ 0.4%); a few rounded operations stay within 2^-6.
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-6, rtol=1e-6),
    torch.bfloat16: dict(atol=2 ** -6, rtol=2 ** -6),
}
GRAD_TOL_FP32 = dict(atol=2e-4, rtol=2e-4)


# ---------------------------------------------------------------- references (float64, from the formulas)

def _axis(layout):
    return -1 if layout == "tokens" else 1


def _pc(p, layout):
    return p if layout == "tokens" else p.view(1, -1, 1, 1)


def ref_layernorm(x, p, layout, eps=1e-5):
    a = _axis(layout)
    mu = x.mean(a, keepdim=True)
    var = ((x - mu) ** 2).mean(a, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * _pc(p["weight"], layout) + _pc(p["bias"], layout)


def ref_rmsnorm(x, p, layout, eps=1e-6):
    a = _axis(layout)
    return x / torch.sqrt((x ** 2).mean(a, keepdim=True) + eps) * _pc(p["weight"], layout)


def ref_crmsnorm(x, p, layout, eps=1e-6):
    # x holds the first d−1 entries of a zero-mean d-vector; the missing entry is −Σx.
    a = _axis(layout)
    d = x.shape[a] + 1
    sq = (x ** 2).sum(a, keepdim=True) + x.sum(a, keepdim=True) ** 2
    return x / torch.sqrt(sq / d + eps) * _pc(p["weight"], layout)


def ref_srmsnorm(x, p, layout, eps=1e-6):
    a = _axis(layout)
    d = x.shape[a]
    return x / torch.sqrt((x ** 2).sum(a, keepdim=True) / d + eps)


def ref_scalenorm(x, p, layout, eps=1e-5):
    norm = torch.sqrt((x ** 2).sum(_axis(layout), keepdim=True))
    return p["g"] * x / torch.clamp(norm, min=eps)


def ref_layernorm_scaling(x, p, layout, depth=3):
    return ref_layernorm(x, p, layout) / math.sqrt(depth)


def ref_dyt(x, p, layout):
    return torch.tanh(p["alpha"] * x) * _pc(p["weight"], layout) + _pc(p["bias"], layout)


def ref_derf(x, p, layout):
    return torch.erf(p["alpha"] * x + p["shift"]) * _pc(p["weight"], layout) + _pc(p["bias"], layout)


def ref_none(x, p, layout):
    return x


def ref_add_layernorm(x, r, p, layout):
    s = x + r
    return ref_layernorm(s, p, layout), s


def ref_add_rmsnorm(x, r, p, layout):
    s = x + r
    return ref_rmsnorm(s, p, layout), s


REFS = {
    "layernorm": ref_layernorm, "rmsnorm": ref_rmsnorm, "crmsnorm": ref_crmsnorm, "srmsnorm": ref_srmsnorm,
    "scalenorm": ref_scalenorm, "layernorm_scaling": ref_layernorm_scaling, "dyt": ref_dyt, "derf": ref_derf,
    "none": ref_none, "add_layernorm": ref_add_layernorm, "add_rmsnorm": ref_add_rmsnorm,
}
KWARGS = {"layernorm_scaling": {"depth": 3}}
CASES = [(name, layout) for name in REFS for layout in normbench.get_norm(name).layouts]


# ---------------------------------------------------------------- helpers

def _build(name, c, layout, dtype=torch.float64, seed=0):
    """The module in ``dtype`` with every parameter moved off its initial value, so affine terms are exercised."""
    torch.manual_seed(seed)
    m = normbench.get_norm(name).create(c, layout=layout, **KWARGS.get(name, {})).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in m.parameters():
            p.add_((0.25 * torch.randn(p.shape, generator=g, dtype=torch.float64)).to(dtype))
    return m


def _inputs(name, shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.5  # a non-zero mean tells LN from RMSNorm
    xs = (x, torch.randn(shape, generator=g, dtype=torch.float64)) if normbench.get_norm(name).kind == "residual" \
        else (x,)
    return tuple(t.to(dtype) for t in xs)


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _reference(name, layout, inputs, params):
    return _tuple(REFS[name](*inputs, params, layout))


def _loss(outs, seed=5):
    g = torch.Generator().manual_seed(seed)
    return sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)).sum() for o in outs)


def _module_and_reference(name, layout, c, shape, dtype):
    """(module outputs, input grads, param grads) and the same from the float64 reference on the same values."""
    m = _build(name, c, layout, dtype)
    xs = tuple(t.requires_grad_() for t in _inputs(name, shape, dtype))
    names, params = zip(*m.named_parameters()) if list(m.parameters()) else ((), ())
    outs = _tuple(m(*xs))
    grads = torch.autograd.grad(_loss(outs), [*xs, *params], allow_unused=True)
    labels = [f"input{i}" for i in range(len(xs))] + list(names)
    missing = [label for label, g in zip(labels, grads) if g is None]
    assert not missing, f"{name}[{layout}]: no gradient reached {missing}"

    xs64 = tuple(t.detach().double().requires_grad_() for t in xs)
    p64 = {n: p.detach().double().requires_grad_() for n, p in zip(names, params)}
    ref = _reference(name, layout, xs64, p64)
    ref_grads = torch.autograd.grad(_loss(ref), [*xs64, *p64.values()])
    return (outs, grads), (ref, ref_grads), names


def _close(actual, expected, tol, what):
    torch.testing.assert_close(actual.detach().double(), expected.detach(), **tol, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------- exactness against the references

@pytest.mark.parametrize("name,layout", CASES)
def test_float64_output_and_every_gradient_match_reference(name, layout):
    shape = TOKENS_SHAPE if layout == "tokens" else IMAGES_SHAPE
    c = shape[-1] if layout == "tokens" else shape[1]
    (outs, grads), (ref, ref_grads), names = _module_and_reference(name, layout, c, shape, torch.float64)
    for i, (o, r) in enumerate(zip(outs, ref)):
        _close(o, r, TOL[torch.float64], f"{name}[{layout}] output {i}")
    labels = [f"d input{i}" for i in range(len(grads) - len(names))] + [f"d {n}" for n in names]
    for label, g, r in zip(labels, grads, ref_grads, strict=True):
        _close(g, r, TOL[torch.float64], f"{name}[{layout}] {label}")


@pytest.mark.parametrize("name,layout", CASES)
def test_gradcheck_float64(name, layout):
    shape = SMALL_TOKENS if layout == "tokens" else SMALL_IMAGES
    m = _build(name, SMALL_C, layout)
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in m.parameters())
    xs = tuple(t.requires_grad_() for t in _inputs(name, shape))

    def f(*args):
        inputs, ps = args[:len(xs)], args[len(xs):]
        return functional_call(m, dict(zip(names, ps)), inputs)

    assert torch.autograd.gradcheck(f, (*xs, *params), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name,layout", CASES)
def test_low_precision_matches_float64_reference(name, layout, dtype):
    """Outputs (and float32 gradients) against the float64 reference evaluated on the same rounded values."""
    shape = TOKENS_SHAPE if layout == "tokens" else IMAGES_SHAPE
    c = shape[-1] if layout == "tokens" else shape[1]
    (outs, grads), (ref, ref_grads), names = _module_and_reference(name, layout, c, shape, dtype)
    for i, (o, r) in enumerate(zip(outs, ref)):
        assert o.dtype == dtype, f"{name}: {dtype} input gave a {o.dtype} output"
        _close(o, r, TOL[dtype], f"{name}[{layout}] {dtype} output {i}")
    if dtype == torch.float32:
        for i, (g, r) in enumerate(zip(grads, ref_grads)):
            # parameter gradients are sums over every position: compare relative to their scale
            scale = 1.0 + float(r.abs().max())
            _close(g / scale, r / scale, GRAD_TOL_FP32, f"{name}[{layout}] float32 gradient {i}")


@pytest.mark.parametrize("name,layout", CASES)
def test_zero_input_stays_finite(name, layout):
    shape = SMALL_TOKENS if layout == "tokens" else SMALL_IMAGES
    m = _build(name, SMALL_C, layout, torch.float32)
    xs = tuple(torch.zeros(shape, requires_grad=True) for _ in _inputs(name, shape))
    outs = _tuple(m(*xs))
    sum(o.sum() for o in outs).backward()
    for t in (*outs, *(x.grad for x in xs)):
        assert torch.isfinite(t).all(), f"{name}[{layout}] gave non-finite values on an all-zero input"


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "dyt"])
def test_wrong_width_is_a_clear_error(name):
    m = normbench.get_norm(name).create(C_TOKENS)
    with pytest.raises(ValueError, match=str(C_TOKENS)):
        m(torch.randn(2, C_TOKENS + 1))


# ---------------------------------------------------------------- claims and initial values from the papers

def test_crmsnorm_of_compressed_vector_equals_rmsnorm_of_full_zero_mean_vector():
    """Jiang et al. 2023: a zero-mean d-vector is stored losslessly as its first d−1 entries, and CRMSNorm of those
    equals RMSNorm of the full vector restricted to them."""
    d = 19
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 6, d, generator=g, dtype=torch.float64) * 3 + 1
    z = z - z.mean(-1, keepdim=True)
    crms = normbench.get_norm("crmsnorm").create(d - 1).double()
    rms = normbench.get_norm("rmsnorm").create(d).double()
    y_full = rms(z)
    torch.testing.assert_close(crms(z[..., : d - 1]), y_full[..., : d - 1], atol=1e-12, rtol=1e-12)
    # and the dropped entry is recoverable: it is minus the sum of the others
    torch.testing.assert_close(-y_full[..., : d - 1].sum(-1), y_full[..., d - 1], atol=1e-12, rtol=1e-12)


def test_layernorm_equals_rmsnorm_of_the_centred_vector():
    """The step behind Pre-LN ≡ Pre-RMSNorm (Jiang et al. 2023): LN(x) = RMSNorm(x − mean(x)) with the same ε."""
    x = torch.randn(5, 31, dtype=torch.float64) * 2 + 3
    ln = normbench.get_norm("layernorm").create(31, eps=1e-6).double()
    rms = normbench.get_norm("rmsnorm").create(31).double()
    torch.testing.assert_close(ln(x), rms(x - x.mean(-1, keepdim=True)), atol=1e-12, rtol=1e-12)


def test_crmsnorm_images_layout_matches_tokens_layout_per_pixel():
    x = torch.randn(2, C_IMAGES, 3, 4, dtype=torch.float64)
    img = normbench.get_norm("crmsnorm").create(C_IMAGES, layout="images").double()
    tok = normbench.get_norm("crmsnorm").create(C_IMAGES).double()
    torch.testing.assert_close(img(x), tok(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("depth", [1, 2, 7, 12])
def test_layernorm_scaling_divides_by_sqrt_depth(depth):
    x = torch.randn(3, C_TOKENS, dtype=torch.float64) * 2 + 1
    lns = normbench.get_norm("layernorm_scaling").create(C_TOKENS, depth=depth).double()
    ln = normbench.get_norm("layernorm").create(C_TOKENS).double()
    torch.testing.assert_close(lns(x), ln(x) / math.sqrt(depth), atol=1e-12, rtol=1e-12)


def test_layernorm_scaling_default_depth_is_one():
    x = torch.randn(3, C_TOKENS)
    lns = normbench.get_norm("layernorm_scaling").create(C_TOKENS)
    torch.testing.assert_close(lns(x), torch.nn.functional.layer_norm(x, (C_TOKENS,), eps=1e-5))


@pytest.mark.parametrize("depth", [0, -1, -5])
def test_layernorm_scaling_rejects_depth_below_one(depth):
    with pytest.raises(ValueError, match="depth"):
        normbench.get_norm("layernorm_scaling").create(C_TOKENS, depth=depth)


@pytest.mark.parametrize("name", ["dyt", "derf"])
def test_pointwise_initial_values(name):
    m = normbench.get_norm(name).create(C_TOKENS)
    assert m.alpha.item() == 0.5
    assert torch.equal(m.weight, torch.ones(C_TOKENS)) and torch.equal(m.bias, torch.zeros(C_TOKENS))
    if name == "derf":
        assert m.shift.item() == 0.0


@pytest.mark.parametrize("c", [7, 23, 768])
def test_scalenorm_g_starts_at_sqrt_c_so_output_has_unit_rms(c):
    m = normbench.get_norm("scalenorm").create(c)
    assert m.g.item() == pytest.approx(math.sqrt(c), rel=1e-7)
    y = m(torch.randn(4, c) * 5)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "crmsnorm", "add_layernorm", "add_rmsnorm"])
def test_affine_parameters_start_at_one_and_zero(name):
    m = normbench.get_norm(name).create(C_TOKENS)
    assert torch.equal(m.weight, torch.ones(C_TOKENS))
    if getattr(m, "bias", None) is not None:
        assert torch.equal(m.bias, torch.zeros(C_TOKENS))


@pytest.mark.parametrize("name", ["srmsnorm", "none"])
def test_parameter_free_norms_have_no_parameters(name):
    assert list(normbench.get_norm(name).create(C_TOKENS).parameters()) == []


@pytest.mark.parametrize("name", ["add_layernorm", "add_rmsnorm"])
def test_residual_norms_return_the_exact_sum(name):
    x, r = torch.randn(2, 5, C_TOKENS), torch.randn(2, 5, C_TOKENS)
    _, s = normbench.get_norm(name).create(C_TOKENS)(x, r)
    assert torch.equal(s, x + r)
