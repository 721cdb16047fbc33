"""Weight reparameterizations and NFNets' AGC against independent float64 references written from each paper."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

import normbench
from normbench.norms.weights import adaptive_grad_clip

NAMES = ["weight_norm", "weight_std", "scaled_ws", "spectral_norm", "sigma_reparam"]
POWER_ITERATED = ["spectral_norm", "sigma_reparam"]
C_TOKENS, C_IMAGES = 11, 6  # not powers of two
TOKENS_SHAPE, IMAGES_SHAPE = (3, 4, C_TOKENS), (2, C_IMAGES, 5, 7)

# |module − float64 reference| ≤ atol + rtol·|reference|, per dtype (bfloat16: 8 significant bits, so outputs of a
# fan-in-wide sum carry about 2^-8 relative error per rounding; the bound is relative to the output scale).
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.bfloat16: dict(atol=2 ** -5, rtol=2 ** -5),
}


# ---------------------------------------------------------------- references (float64, from the formulas)

def _unit_view(p, w):
    return p.view(-1, *([1] * (w.dim() - 1)))


def _normalize(a):
    return a / torch.sqrt((a ** 2).sum())


def ref_weight(name, w, p, u, v, training):
    """Ŵ from the raw weight ``w`` [out, ...], extra parameters ``p`` and power-iteration vectors ``u``, ``v``.

    Returns (Ŵ, updated u, updated v)."""
    rows = w.reshape(w.shape[0], -1)
    n = rows.shape[1]
    if name == "weight_norm":  # Salimans & Kingma: w = g·v/‖v‖ per output unit
        return _unit_view(p["g"] / torch.sqrt((rows ** 2).sum(1)), w) * w, u, v
    mean = rows.sum(1) / n
    var = ((rows - mean[:, None]) ** 2).sum(1) / n
    if name == "weight_std":  # Qiao et al.: (W − μ)/sqrt(σ² + ε), ε = 1e-5
        return (w - _unit_view(mean, w)) / _unit_view(torch.sqrt(var + 1e-5), w), u, v
    if name == "scaled_ws":  # Brock et al.: gain·(W − μ)/sqrt(max(N·σ², ε)), ε = 1e-4
        return _unit_view(p["gain"], w) * (w - _unit_view(mean, w)) / _unit_view(torch.sqrt(
            torch.clamp(n * var, min=1e-4)), w), u, v
    # Miyato et al. Algorithm 1: one power iteration per training step, u and v held constant in the gradient
    if training:
        with torch.no_grad():
            v = _normalize(rows.t() @ u)
            u = _normalize(rows @ v)
    sigma = u @ rows @ v
    if name == "spectral_norm":
        return w / sigma, u, v
    return p["gamma"] * w / sigma, u, v  # Zhai et al.: (γ/σ(W))·W


def ref_forward(layer, w_hat, bias, x):
    if isinstance(layer, nn.Linear):
        return x @ w_hat.t() + (bias if bias is not None else 0.0)
    return F.conv2d(x, w_hat, bias, stride=layer.stride, padding=layer.padding, dilation=layer.dilation,
                    groups=layer.groups)


# ---------------------------------------------------------------- helpers

def _build(name, layout, dtype=torch.float64, seed=0, layer=None, c=None):
    """The module with every parameter moved off its initial value and, where there are power-iteration vectors,
    vectors that are NOT the top singular pair, so that one iteration visibly changes σ."""
    torch.manual_seed(seed)
    c = c or (C_TOKENS if layout == "tokens" else C_IMAGES)
    m = normbench.get_norm(name).create(c, layout=layout, layer=layer).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            scale = 0.25 * p.abs().mean() if n != "layer.bias" else 0.3
            p.add_((scale * torch.randn(p.shape, generator=g, dtype=torch.float64)).to(dtype))
        if name in POWER_ITERATED:
            # a random v and u = Wv/‖Wv‖: a state training can reach (σ = uᵀWv > 0), far from converged
            v = _normalize(torch.randn(m.v.shape, generator=g, dtype=torch.float64))
            m.v.copy_(v.to(dtype))
            m.u.copy_(_normalize(m.layer.weight.detach().double().flatten(1) @ v).to(dtype))
    return m


def _input(layout, dtype=torch.float64, seed=2, shape=None):
    g = torch.Generator().manual_seed(seed)
    shape = shape or (TOKENS_SHAPE if layout == "tokens" else IMAGES_SHAPE)
    return (torch.randn(shape, generator=g, dtype=torch.float64) + 0.3).to(dtype)


def _loss(out, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (out * torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)).sum()


def _extra_params(m):
    return {n: p for n, p in m.named_parameters() if not n.startswith("layer.")}


def _module_vs_reference(name, layout, training, dtype=torch.float64, m=None, x=None):
    m = m if m is not None else _build(name, layout, dtype)
    m.train(training)
    u0 = m.u.detach().double().clone() if name in POWER_ITERATED else None
    v0 = m.v.detach().double().clone() if name in POWER_ITERATED else None
    x = (x if x is not None else _input(layout, dtype)).requires_grad_()
    named = dict(m.named_parameters())
    out = m(x)
    grads = torch.autograd.grad(_loss(out), [x, *named.values()], allow_unused=True)
    missing = [n for n, g in zip(["input", *named], grads) if g is None]
    assert not missing, f"{name}[{layout}]: no gradient reached {missing}"

    x64 = x.detach().double().requires_grad_()
    p64 = {n: p.detach().double().requires_grad_() for n, p in named.items()}
    extra = {n: p for n, p in p64.items() if not n.startswith("layer.")}
    w_hat, u1, v1 = ref_weight(name, p64["layer.weight"], extra, u0, v0, training)
    ref = ref_forward(m.layer, w_hat, p64.get("layer.bias"), x64)
    ref_grads = torch.autograd.grad(_loss(ref), [x64, *p64.values()])
    return m, (out, grads), (ref, ref_grads, u1, v1), ["input", *named]


def _close(actual, expected, tol, what):
    torch.testing.assert_close(actual.detach().double(), expected.detach(), **tol, msg=lambda m: f"{what}: {m}")


CASES = [(n, lay, t) for n in NAMES for lay in ("tokens", "images")
         for t in ((True, False) if n in POWER_ITERATED else (True,))]


# ---------------------------------------------------------------- exactness against the references

@pytest.mark.parametrize("name,layout,training", CASES)
def test_float64_output_and_every_gradient_match_reference(name, layout, training):
    m, (out, grads), (ref, ref_grads, u1, v1), labels = _module_vs_reference(name, layout, training)
    _close(out, ref, TOL[torch.float64], f"{name}[{layout}] output")
    for label, g, r in zip(labels, grads, ref_grads, strict=True):
        _close(g, r, TOL[torch.float64], f"{name}[{layout}] d {label}")
    if name in POWER_ITERATED:  # the buffers hold the iterated vectors after training, the old ones after eval
        _close(m.u, u1, TOL[torch.float64], f"{name} u after forward")
        _close(m.v, v1, TOL[torch.float64], f"{name} v after forward")


@pytest.mark.parametrize("name,layout,training", CASES)
def test_gradcheck_float64(name, layout, training):
    c = 5 if layout == "tokens" else 3  # finite differences cost two forwards per weight: keep the layer small
    m = _build(name, layout, c=c).train(training)
    x = _input(layout, shape=(2, 2, c) if layout == "tokens" else (1, c, 3, 4)).requires_grad_()
    # In training the power iteration reads W without gradient (u and v are constants of the step, as in Miyato
    # et al.), so the function of W that finite differences see is not the one differentiated: W is held fixed there;
    # its gradient is checked against the reference above.
    frozen = {"layer.weight"} if training and name in POWER_ITERATED else set()
    names = [n for n, _ in m.named_parameters() if n not in frozen]
    params = tuple(p.detach().clone().requires_grad_() for n, p in m.named_parameters() if n not in frozen)
    fixed = {n: p.detach().clone() for n, p in m.named_parameters() if n in frozen}
    buffers = {n: b.detach().clone() for n, b in m.named_buffers()}

    def f(x, *ps):
        # fresh copies of u and v each call: the power iteration then starts from the same state every time
        state = {**dict(zip(names, ps)), **fixed, **{n: b.clone() for n, b in buffers.items()}}
        return functional_call(m, state, (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name,layout,training", CASES)
def test_low_precision_output_matches_float64_reference(name, layout, training, dtype):
    m, (out, _), (ref, *_), _ = _module_vs_reference(name, layout, training, dtype)
    assert out.dtype == dtype
    scale = 1.0 + ref.detach().abs().max().item()  # outputs are fan-in-wide sums: bound the error by their scale
    _close(out / scale, ref / scale, TOL[dtype], f"{name}[{layout}] {dtype} output")


# ---------------------------------------------------------------- wrapping existing layers

def _existing_layers():
    torch.manual_seed(3)
    return [
        ("linear", nn.Linear(7, 5), (4, 7)),
        ("linear_nobias", nn.Linear(9, 3, bias=False), (2, 6, 9)),
        ("conv", nn.Conv2d(3, 5, 3, stride=2, padding=1), (2, 3, 9, 7)),
        ("conv_grouped", nn.Conv2d(4, 6, (3, 1), padding=(1, 0), groups=2, dilation=(2, 1)), (1, 4, 8, 5)),
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", ["linear", "linear_nobias", "conv", "conv_grouped"])
def test_wraps_an_existing_layer(name, which):
    _, layer, shape = next(t for t in _existing_layers() if t[0] == which)
    layer = layer.double()
    m = normbench.get_norm(name).create(1, layer=layer)
    assert m.layer is layer
    assert {n for n, _ in m.named_parameters()} >= {"layer.weight"} | ({"layer.bias"} if layer.bias is not None
                                                                        else set())
    for training in (True, False) if name in POWER_ITERATED else (True,):
        x = torch.randn(shape, dtype=torch.float64)
        _, (out, grads), (ref, ref_grads, _, _), labels = _module_vs_reference(name, "tokens", training, m=m, x=x)
        assert out.shape == layer(x).shape
        _close(out, ref, TOL[torch.float64], f"{name} around {which}")
        for label, g, r in zip(labels, grads, ref_grads, strict=True):
            _close(g, r, TOL[torch.float64], f"{name} around {which}: d {label}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [nn.Conv1d(3, 3, 3), nn.Embedding(5, 3), nn.LayerNorm(3)],
                         ids=lambda b: type(b).__name__)
def test_rejects_layers_it_cannot_wrap(name, bad):
    with pytest.raises(TypeError, match="Linear or nn.Conv2d"):
        normbench.get_norm(name).create(3, layer=bad)


@pytest.mark.parametrize("layout", ["tokens", "images"])
@pytest.mark.parametrize("name", NAMES)
def test_default_layer_is_linear_or_3x3_conv(name, layout):
    m = normbench.get_norm(name).create(C_IMAGES, layout=layout)
    if layout == "tokens":
        assert isinstance(m.layer, nn.Linear) and m.layer.weight.shape == (C_IMAGES, C_IMAGES)
    else:
        assert isinstance(m.layer, nn.Conv2d) and m.layer.weight.shape == (C_IMAGES, C_IMAGES, 3, 3)
        assert m(torch.randn(2, C_IMAGES, 4, 5)).shape == (2, C_IMAGES, 4, 5)


# ---------------------------------------------------------------- initial values and properties from the papers

@pytest.mark.parametrize("name", ["weight_norm", "sigma_reparam"])
@pytest.mark.parametrize("which", ["linear", "conv"])
def test_initially_computes_the_wrapped_layer(name, which):
    """Weight norm with g = ‖v‖, and σReparam with γ = σ(W) (the authors' PyTorch reference), start as the layer."""
    _, layer, shape = next(t for t in _existing_layers() if t[0] == which)
    x = torch.randn(shape)
    with torch.no_grad():
        before = layer(x)
        m = normbench.get_norm(name).create(1, layer=layer)
        torch.testing.assert_close(m.train()(x), before, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(m.eval()(x), before, atol=1e-5, rtol=1e-5)


def _spectral(w):
    return torch.linalg.matrix_norm(w.detach().double().flatten(1), ord=2)


def test_sigma_reparam_gamma_init_one_gives_unit_spectral_norm():
    m = normbench.get_norm("sigma_reparam").create(C_TOKENS, gamma_init=1.0)
    assert m.gamma.item() == 1.0
    assert _spectral(m.effective_weight()).item() == pytest.approx(1.0, abs=1e-5)


def test_sigma_reparam_gamma_starts_at_sigma_of_the_weight():
    m = normbench.get_norm("sigma_reparam").create(C_TOKENS)
    assert m.gamma.item() == pytest.approx(_spectral(m.layer.weight).item(), rel=1e-5)
    assert m.gamma.shape == ()


@pytest.mark.parametrize("layout", ["tokens", "images"])
def test_spectral_norm_starts_with_unit_spectral_norm(layout):
    m = normbench.get_norm("spectral_norm").create(C_IMAGES, layout=layout).eval()
    assert _spectral(m.effective_weight()).item() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("name", POWER_ITERATED)
def test_power_iteration_converges_in_training_and_is_frozen_in_eval(name):
    m = _build(name, "images", torch.float32)  # u, v start random
    x = _input("images", torch.float32)
    with torch.no_grad():
        m.eval()
        u, v = m.u.clone(), m.v.clone()
        m(x)
        assert torch.equal(m.u, u) and torch.equal(m.v, v), "eval must not run the power iteration"
        m.train()
        for _ in range(60):
            m(x)
        sigma = torch.dot(m.u, m.layer.weight.flatten(1) @ m.v)
    assert sigma.item() == pytest.approx(_spectral(m.layer.weight).item(), rel=1e-4)


@pytest.mark.parametrize("layout", ["tokens", "images"])
def test_weight_standardization_gives_zero_mean_unit_variance_per_output_unit(layout):
    m = normbench.get_norm("weight_std").create(C_IMAGES, layout=layout).double()
    rows = m.effective_weight().flatten(1)
    torch.testing.assert_close(rows.mean(1), torch.zeros(C_IMAGES, dtype=torch.float64), atol=1e-12, rtol=0)
    var = rows.var(1, unbiased=False)
    raw_var = m.layer.weight.flatten(1).var(1, unbiased=False)
    torch.testing.assert_close(var, raw_var / (raw_var + 1e-5), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("layout", ["tokens", "images"])
def test_scaled_ws_gives_variance_one_over_fan_in_and_gain_starts_at_one(layout):
    m = normbench.get_norm("scaled_ws").create(C_IMAGES, layout=layout).double()
    assert torch.equal(m.gain, torch.ones(C_IMAGES, dtype=torch.float64))
    rows = m.effective_weight().flatten(1)
    fan_in = rows.shape[1]
    torch.testing.assert_close(rows.mean(1), torch.zeros(C_IMAGES, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(rows.var(1, unbiased=False) * fan_in, torch.ones(C_IMAGES, dtype=torch.float64),
                               atol=1e-9, rtol=1e-9)


def test_weight_norm_g_starts_at_the_norm_of_each_output_unit():
    layer = nn.Conv2d(3, 5, 3)
    m = normbench.get_norm("weight_norm").create(1, layer=layer)
    torch.testing.assert_close(m.g, layer.weight.detach().flatten(1).norm(dim=1))


@pytest.mark.parametrize("name", ["weight_norm", "sigma_reparam", "spectral_norm"])
def test_reset_from_layer_follows_a_reinitialised_weight(name):
    layer = nn.Linear(8, 6)
    m = normbench.get_norm(name).create(1, layer=layer).eval()
    with torch.no_grad():
        layer.weight.normal_(0, 3.0)
        m.reset_from_layer()
        w_hat = m.effective_weight()
    if name == "spectral_norm":
        assert _spectral(w_hat).item() == pytest.approx(1.0, abs=1e-5)
    else:
        torch.testing.assert_close(w_hat, layer.weight.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", POWER_ITERATED)
def test_spec_declares_running_state(name):
    assert normbench.get_norm(name).running_state


@pytest.mark.parametrize("name", ["weight_norm", "weight_std", "scaled_ws"])
def test_stateless_reparameterizations_declare_no_running_state(name):
    spec = normbench.get_norm(name)
    assert not spec.running_state
    assert dict(spec.create(4).named_buffers()) == {}


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_zero_weight_stays_finite(name):
    m = normbench.get_norm(name).create(C_TOKENS).to(torch.bfloat16)
    with torch.no_grad():
        m.layer.weight.zero_()
        if name in POWER_ITERATED:
            m.train()
    y = m(torch.randn(2, C_TOKENS, dtype=torch.bfloat16))
    assert torch.isfinite(y).all()


# ---------------------------------------------------------------- adaptive gradient clipping (NFNets)

def ref_agc(w, g, clipping, eps):
    """Brock et al. 2021, eq. 3, per output unit i: if ‖G_i‖/max(‖W_i‖, ε) > λ, G_i ← λ·max(‖W_i‖, ε)/‖G_i‖·G_i.
    Units are rows (Linear) / filters (conv); a vector or scalar is one unit."""
    w, g = w.double(), g.double()
    if w.dim() <= 1:
        wn, gn = torch.sqrt((w ** 2).sum()), torch.sqrt((g ** 2).sum())
        return g * (clipping * max(wn, eps) / gn) if gn / max(wn, eps) > clipping else g.clone()
    out = g.clone()
    for i in range(w.shape[0]):
        wn, gn = torch.sqrt((w[i] ** 2).sum()), torch.sqrt((g[i] ** 2).sum())
        if gn / max(wn, eps) > clipping:
            out[i] = g[i] * (clipping * max(wn, eps) / gn)
    return out


def _params_with_grads(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 7), (4, 3, 3, 3), (5,), ()]
    params = []
    for s in shapes:
        p = nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64).to(dtype))
        # gradient norms spread around 1% of the weight norms, so some units clip and some do not
        p.grad = (torch.randn(s, generator=g, dtype=torch.float64) * 10 ** torch.empty(s).uniform_(
            -3.5, -0.5, generator=g).double()).to(dtype)
        params.append(p)
    return params


def test_agc_matches_nfnets_definition_unit_by_unit():
    params = _params_with_grads()
    expected = [ref_agc(p.detach(), p.grad, 0.01, 1e-3) for p in params]
    clipped_units = sum(int((~torch.isclose(e, p.grad)).flatten(1).any(1).sum()) if p.dim() > 1 else
                        int(not torch.allclose(e, p.grad)) for e, p in zip(expected, params))
    assert clipped_units > 0 and clipped_units < sum(p.shape[0] if p.dim() > 1 else 1 for p in params), \
        "the test data must have both clipped and unclipped units"
    adaptive_grad_clip(params, clipping=0.01, eps=1e-3)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.grad, e, atol=1e-14, rtol=1e-12)


def test_agc_clipped_units_sit_exactly_at_the_ratio():
    w = nn.Parameter(torch.randn(6, 10, dtype=torch.float64))
    w.grad = torch.randn(6, 10, dtype=torch.float64)  # ratio ≈ 1 ≫ λ: every row clips
    adaptive_grad_clip(w, clipping=0.05)
    ratio = w.grad.norm(dim=1) / w.detach().norm(dim=1)
    torch.testing.assert_close(ratio, torch.full((6,), 0.05, dtype=torch.float64))


def test_agc_eps_floors_the_weight_norm_of_zero_initialised_units():
    w = nn.Parameter(torch.zeros(3, 4))
    w.grad = torch.ones(3, 4)
    adaptive_grad_clip([w], clipping=0.1, eps=1e-3)
    torch.testing.assert_close(w.grad.norm(dim=1), torch.full((3,), 0.1 * 1e-3))


def test_agc_leaves_small_gradients_and_missing_gradients_alone():
    w = nn.Parameter(torch.randn(4, 4))
    small = 1e-5 * torch.randn(4, 4)
    w.grad = small.clone()
    untouched = nn.Parameter(torch.randn(3))
    adaptive_grad_clip([w, untouched])
    assert torch.equal(w.grad, small) and untouched.grad is None


def test_agc_bfloat16_gradients():
    params = _params_with_grads(torch.bfloat16)
    expected = [ref_agc(p.detach(), p.grad, 0.01, 1e-3) for p in params]
    adaptive_grad_clip(params)
    for p, e in zip(params, expected):
        assert p.grad.dtype == torch.bfloat16
        torch.testing.assert_close(p.grad.double(), e, atol=1e-6, rtol=2 ** -7)


@pytest.mark.parametrize("clipping", [0.0, -0.1])
def test_agc_rejects_non_positive_clipping(clipping):
    w = nn.Parameter(torch.randn(2, 2))
    w.grad = torch.randn(2, 2)
    with pytest.raises(ValueError, match="clipping"):
        adaptive_grad_clip(w, clipping=clipping)
