"""GroupNorm, InstanceNorm, EvoNorm-S0 and EvoNorm-B0 against float64 references written from the papers' formulas.

Each reference is plain float64 tensor code (no normbench code); outputs and the gradients of a random projection
(input and every parameter) must match. Tolerances: a float64 module vs the float64 reference differ only by
operation order (rtol 1e-9); a float32 module vs the float64 reference within float32 rounding (rtol 1e-4).
"""

from __future__ import annotations

import pytest
import torch

from normbench.norms.groups import EvoNormB0, EvoNormS0, GroupNorm, InstanceNorm, default_num_groups

F64 = {"rtol": 1e-9, "atol": 1e-10}
F32 = {"rtol": 1e-4, "atol": 2e-5}
C = 8


def _x(n, c=C, h=3, w=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, c, h, w, generator=g, dtype=torch.float64) * 1.5 + 0.3).to(dtype)


def _randomize(module, seed=1):
    """Move parameters off their init so γ, β and v are all exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_((1.0 if name != "bias" else 0.0) + 0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return module


def _check(module, ref, x, tol, seed=2):
    """module(x) vs ref(x64, params64): output, ∂/∂x and ∂/∂(every parameter) of Σ y·P for a random P."""
    names = [n for n, _ in module.named_parameters()]
    xm = x.clone().requires_grad_(True)
    ym = module(xm)
    proj = torch.randn(ym.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    gm = torch.autograd.grad((ym.double() * proj).sum(), [xm, *module.parameters()])
    xr = x.detach().double().requires_grad_(True)
    params = {n: p.detach().double().requires_grad_(True) for n, p in module.named_parameters()}
    yr = ref(xr, params)
    gr = torch.autograd.grad((yr * proj).sum(), [xr, *params.values()])
    assert ym.dtype == x.dtype
    torch.testing.assert_close(ym.double(), yr, **tol)
    for name, a, b in zip(["input", *names], gm, gr, strict=True):
        torch.testing.assert_close(a.double(), b, **tol, msg=lambda m: f"grad of {name}: {m}")


def _c(p):
    return p.view(1, -1, 1, 1)


# --- references, from the papers' definitions ---------------------------------------------------------------------

def ref_group_norm(x, p, groups, eps=1e-5):
    n, c, h, w = x.shape
    xg = x.reshape(n, groups, c // groups, h, w)
    mu = xg.mean(dim=(2, 3, 4), keepdim=True)
    var = ((xg - mu) ** 2).mean(dim=(2, 3, 4), keepdim=True)
    return ((xg - mu) / torch.sqrt(var + eps)).reshape(n, c, h, w) * _c(p["weight"]) + _c(p["bias"])


def ref_instance_norm(x, p, eps=1e-5):
    mu = x.mean(dim=(2, 3), keepdim=True)
    var = ((x - mu) ** 2).mean(dim=(2, 3), keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * _c(p["weight"]) + _c(p["bias"])


def ref_evonorm_s0(x, p, groups, eps=1e-5):
    n, c, h, w = x.shape
    xg = x.reshape(n, groups, c // groups, h, w)
    mu = xg.mean(dim=(2, 3, 4), keepdim=True)
    std = torch.sqrt(((xg - mu) ** 2).mean(dim=(2, 3, 4), keepdim=True) + eps)
    std = std.expand_as(xg).reshape(n, c, h, w)
    return x * torch.sigmoid(_c(p["v"]) * x) / std * _c(p["weight"]) + _c(p["bias"])


def ref_evonorm_b0(x, p, state, training, eps=1e-5, momentum=0.1):
    """``state["var"]`` is the running variance; updated in place when training."""
    if training:
        mu = x.mean(dim=(0, 2, 3), keepdim=True)
        batch_var = ((x - mu) ** 2).mean(dim=(0, 2, 3), keepdim=True)
        state["var"] = (1 - momentum) * state["var"] + momentum * batch_var.detach().flatten()
    else:
        batch_var = _c(state["var"])
    inst_mu = x.mean(dim=(2, 3), keepdim=True)
    inst_var = ((x - inst_mu) ** 2).mean(dim=(2, 3), keepdim=True)
    den = torch.maximum(torch.sqrt(batch_var + eps), _c(p["v"]) * x + torch.sqrt(inst_var + eps))
    return x / den * _c(p["weight"]) + _c(p["bias"])


# --- group counts ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("channels,groups", [(32, 32), (64, 32), (96, 32), (48, 24), (40, 20), (20, 20), (7, 7),
                                             (1, 1), (50, 25)])
def test_default_groups_is_largest_divisor_up_to_32(channels, groups):
    assert default_num_groups(channels) == groups
    assert GroupNorm(channels).num_groups == groups
    assert EvoNormS0(channels).num_groups == groups


def test_num_groups_must_divide_channels():
    with pytest.raises(ValueError, match="divisor"):
        GroupNorm(12, num_groups=5)
    with pytest.raises(ValueError, match="layout"):
        GroupNorm(12, layout="tokens")


# --- GroupNorm and InstanceNorm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 2, 8])
@pytest.mark.parametrize("groups", [None, 2])
def test_group_norm_matches_reference(batch, groups):
    m = _randomize(GroupNorm(C, num_groups=groups)).double()
    g = m.num_groups
    assert g == (C if groups is None else groups)
    for train in (True, False):
        m.train(train)
        _check(m, lambda x, p: ref_group_norm(x, p, g), _x(batch), F64)


def test_group_norm_float32_and_bfloat16():
    m = _randomize(GroupNorm(C, num_groups=4))
    _check(m, lambda x, p: ref_group_norm(x, p, 4), _x(3, dtype=torch.float32), F32)
    x = _x(3)
    y16 = m(x.to(torch.bfloat16))
    assert y16.dtype == torch.bfloat16
    ref = ref_group_norm(x, {k: v.double() for k, v in m.named_parameters()}, 4)
    torch.testing.assert_close(y16.double(), ref, rtol=0.02, atol=0.05)


@pytest.mark.parametrize("batch", [1, 2, 8])
def test_instance_norm_matches_reference(batch):
    m = _randomize(InstanceNorm(C)).double()
    _check(m, ref_instance_norm, _x(batch), F64)
    _check(_randomize(InstanceNorm(C)), ref_instance_norm, _x(batch, dtype=torch.float32), F32)


def test_single_value_per_group_raises():
    with pytest.raises(ValueError, match="more than one value per group"):
        GroupNorm(C)(_x(2, h=1, w=1))
    with pytest.raises(ValueError, match="more than one pixel"):
        InstanceNorm(C)(_x(2, h=1, w=1))
    # two channels per group: a 1x1 image is fine, even at batch size 1
    m = _randomize(GroupNorm(C, num_groups=4)).double()
    _check(m, lambda x, p: ref_group_norm(x, p, 4), _x(1, h=1, w=1), F64)


def test_group_and_instance_norm_gradcheck():
    x = _x(2, c=4, h=2, w=3).requires_grad_(True)
    for m in (_randomize(GroupNorm(4, num_groups=2)).double(), _randomize(InstanceNorm(4)).double()):
        params = dict(m.named_parameters())

        def f(x, w, b, m=m):
            return torch.func.functional_call(m, {"weight": w, "bias": b}, (x,))

        assert torch.autograd.gradcheck(f, (x, params["weight"], params["bias"]))


# --- EvoNorm-S0 -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 2, 8])
@pytest.mark.parametrize("groups", [None, 2])
def test_evonorm_s0_matches_reference(batch, groups):
    m = _randomize(EvoNormS0(C, num_groups=groups)).double()
    g = m.num_groups
    for train in (True, False):
        m.train(train)
        _check(m, lambda x, p: ref_evonorm_s0(x, p, g), _x(batch), F64)
    _check(_randomize(EvoNormS0(C, num_groups=groups)), lambda x, p: ref_evonorm_s0(x, p, g),
           _x(batch, dtype=torch.float32), F32)


def test_evonorm_s0_init_and_gradcheck():
    m = EvoNormS0(C)
    assert torch.equal(m.v, torch.ones(C)) and torch.equal(m.weight, torch.ones(C)) and m.eps == 1e-5
    m = _randomize(EvoNormS0(4, num_groups=2)).double()
    x = _x(2, c=4, h=2, w=3).requires_grad_(True)
    p = dict(m.named_parameters())

    def f(x, w, b, v):
        return torch.func.functional_call(m, {"weight": w, "bias": b, "v": v}, (x,))

    assert torch.autograd.gradcheck(f, (x, p["weight"], p["bias"], p["v"]))


# --- EvoNorm-B0 -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [1, 2, 8])
def test_evonorm_b0_train_then_eval_matches_reference(batch):
    m = _randomize(EvoNormB0(C)).double()
    state = {"var": torch.ones(C, dtype=torch.float64)}
    m.train()
    for step in range(3):
        _check(m, lambda x, p: ref_evonorm_b0(x, p, state, True), _x(batch, seed=10 + step), F64, seed=step)
        torch.testing.assert_close(m.running_var, state["var"], **F64)
    m.eval()
    before = m.running_var.clone()
    _check(m, lambda x, p: ref_evonorm_b0(x, p, state, False), _x(batch, seed=20), F64)
    assert torch.equal(m.running_var, before)


def test_evonorm_b0_float32_and_running_var_is_biased():
    m = _randomize(EvoNormB0(C))
    state = {"var": torch.ones(C, dtype=torch.float64)}
    _check(m, lambda x, p: ref_evonorm_b0(x, p, state, True), _x(4, dtype=torch.float32), F32)
    x = _x(4)
    biased = x.var(dim=(0, 2, 3), unbiased=False)
    m2 = EvoNormB0(C).double()
    with torch.no_grad():
        m2(x)
    torch.testing.assert_close(m2.running_var, 0.9 + 0.1 * biased, **F64)


def test_evonorm_b0_batch_of_one_value_per_channel():
    m = EvoNormB0(C).double()
    with pytest.raises(ValueError, match="more than one value per channel"):
        m(_x(1, h=1, w=1))
    # batch size 1 with several pixels trains; eval needs no batch at all
    state = {"var": torch.ones(C, dtype=torch.float64)}
    _check(m, lambda x, p: ref_evonorm_b0(x, p, state, True), _x(1, h=2, w=1), F64)
    m.eval()
    _check(m, lambda x, p: ref_evonorm_b0(x, p, state, False), _x(1, h=1, w=1), F64)


def test_evonorm_b0_gradcheck_train_and_eval():
    m = _randomize(EvoNormB0(4)).double()
    x = _x(3, c=4, h=2, w=2).requires_grad_(True)
    p = dict(m.named_parameters())

    def f(x, w, b, v):
        return torch.func.functional_call(m, {"weight": w, "bias": b, "v": v}, (x,))

    for train in (True, False):
        m.train(train)
        assert torch.autograd.gradcheck(f, (x, p["weight"], p["bias"], p["v"]))


def test_evonorms_agree_with_timm():
    """An outside cross-check of the definitions (timm's B0 differs only in its running variance and ε).

    timm takes the group/instance variance in float32 even for float64 inputs, hence the float32 tolerance.
    """
    from normbench._compat import import_timm

    evo = import_timm().layers.evo_norm
    x = _x(4, c=64, seed=5)
    ours, theirs = _randomize(EvoNormS0(64)).double(), evo.EvoNorm2dS0(64).double()
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), theirs(x), **F32)
    ours, theirs = _randomize(EvoNormB0(64)).double(), evo.EvoNorm2dB0(64, eps=1e-5).double()
    theirs.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), theirs(x), **F32)


def test_evonorms_without_activation_are_their_affine_part_as_in_timm():
    """``apply_act=False`` (the norms a ResNet has no activation after): γ·x + β, no v, no statistics, as the
    authors' ``nonlinearity=False`` and timm's ``apply_act=False``."""
    from normbench._compat import import_timm

    evo = import_timm().layers.evo_norm
    x = _x(4, c=64, seed=6)
    for ours, theirs in ((EvoNormS0(64, apply_act=False), evo.EvoNorm2dS0(64, apply_act=False)),
                         (EvoNormB0(64, apply_act=False), evo.EvoNorm2dB0(64, apply_act=False, eps=1e-5))):
        ours, theirs = _randomize(ours).double(), theirs.double()
        assert ours.v is None and set(ours.state_dict()) == {"weight", "bias"}
        theirs.load_state_dict(ours.state_dict(), strict=False)
        want = x * ours.weight.view(1, -1, 1, 1) + ours.bias.view(1, -1, 1, 1)
        torch.testing.assert_close(ours(x), want)
        torch.testing.assert_close(ours(x), theirs(x), **F32)
        assert ours.norm_act is True and "apply_act=False" in repr(ours)
