"""QK-Norm, FixNorm, nGPT's hypersphere norm and residual update against float64 references from the papers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

import normbench
from normbench.norms.attention import FixNorm, HypersphereNorm, NGPTResidual, QKNorm, renormalize_

HEAD_DIM, C = 12, 21  # not powers of two
QK_SHAPE, TOKENS_SHAPE = (2, 3, 5, HEAD_DIM), (3, 4, C)

# |module − float64 reference| ≤ atol + rtol·|reference|, per dtype (bfloat16: 8 significant bits, 2^-8 relative
# per rounding; a handful of roundings stay within 2^-6).
TOL = {
    torch.float64: dict(atol=1e-12, rtol=1e-12),
    torch.float32: dict(atol=1e-6, rtol=1e-6),
    torch.bfloat16: dict(atol=2 ** -6, rtol=2 ** -6),
}


# ---------------------------------------------------------------- references (float64, from the formulas)

def _l2(x):
    return torch.sqrt((x ** 2).sum(-1, keepdim=True))


def ref_qk_norm(q, k, p):
    """Henry et al. 2020: logits = g·(q/‖q‖)·(k/‖k‖)ᵀ; the module returns the two factors (g·q̂, k̂)."""
    return p["g"] * q / _l2(q), k / _l2(k)


def ref_fixnorm(x, p, radius=1.0):
    return (radius * x / _l2(x),)


def ref_hypersphere(x, p):
    return (x / _l2(x),)


def ref_ngpt_residual(h, b, p, alpha_init=0.05, alpha_scale=None):
    """Loshchilov et al. 2024, eq. 10–11: h ← Norm(h + α ⊙ (Norm(b) − h)), α = stored·(α_init/α_scale)."""
    alpha_scale = alpha_scale or 1 / math.sqrt(h.shape[-1])
    alpha = p["alpha"] * (alpha_init / alpha_scale)
    t = h + alpha * (b / _l2(b) - h)
    return (t / _l2(t),)


CASES = {
    "qk_norm": (lambda: QKNorm(HEAD_DIM, seq_len=50), lambda xs, p: ref_qk_norm(*xs, p), QK_SHAPE, 2),
    "fixnorm": (lambda: FixNorm(C, radius=2.5), lambda xs, p: ref_fixnorm(*xs, p, radius=2.5), TOKENS_SHAPE, 1),
    "ngpt": (lambda: HypersphereNorm(C), lambda xs, p: ref_hypersphere(*xs, p), TOKENS_SHAPE, 1),
    "ngpt_residual": (lambda: NGPTResidual(C), lambda xs, p: ref_ngpt_residual(*xs, p), TOKENS_SHAPE, 2),
}


# ---------------------------------------------------------------- helpers

def _build(case, dtype=torch.float64, seed=0):
    m = CASES[case][0]().to(dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():  # off its initial value, with a per-dimension spread for α
            p.mul_((1 + 0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64)).to(dtype))
    return m


def _inputs(case, dtype=torch.float64, seed=1, shape=None):
    g = torch.Generator().manual_seed(seed)
    shape = shape or CASES[case][2]
    xs = [torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 0.5 for _ in range(CASES[case][3])]
    if case == "ngpt_residual":
        xs[0] = xs[0] / _l2(xs[0])  # h lives on the unit sphere
    return tuple(x.to(dtype) for x in xs)


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _loss(outs, seed=5):
    g = torch.Generator().manual_seed(seed)
    return sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)).sum() for o in outs)


def _module_vs_reference(case, dtype):
    m = _build(case, dtype)
    xs = tuple(x.requires_grad_() for x in _inputs(case, dtype))
    named = dict(m.named_parameters())
    outs = _tuple(m(*xs))
    grads = torch.autograd.grad(_loss(outs), [*xs, *named.values()], allow_unused=True)
    labels = [f"input{i}" for i in range(len(xs))] + list(named)
    missing = [label for label, g in zip(labels, grads) if g is None]
    assert not missing, f"{case}: no gradient reached {missing}"

    xs64 = tuple(x.detach().double().requires_grad_() for x in xs)
    p64 = {n: p.detach().double().requires_grad_() for n, p in named.items()}
    ref = CASES[case][1](xs64, p64)
    ref_grads = torch.autograd.grad(_loss(ref), [*xs64, *p64.values()])
    return (outs, grads), (ref, ref_grads), labels


def _close(actual, expected, tol, what):
    torch.testing.assert_close(actual.detach().double(), expected.detach(), **tol, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------- exactness against the references

@pytest.mark.parametrize("case", list(CASES))
def test_float64_output_and_every_gradient_match_reference(case):
    (outs, grads), (ref, ref_grads), labels = _module_vs_reference(case, torch.float64)
    for i, (o, r) in enumerate(zip(outs, ref)):
        _close(o, r, TOL[torch.float64], f"{case} output {i}")
    for label, g, r in zip(labels, grads, ref_grads, strict=True):
        _close(g, r, TOL[torch.float64], f"{case} d {label}")


@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_float64(case):
    m = _build(case)
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in m.parameters())
    small = (1, 2, 3, HEAD_DIM) if case == "qk_norm" else (2, 3, C)
    xs = tuple(x.requires_grad_() for x in _inputs(case, shape=small))

    def f(*args):
        return functional_call(m, dict(zip(names, args[len(xs):])), args[:len(xs)])

    assert torch.autograd.gradcheck(f, (*xs, *params), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_low_precision_output_matches_float64_reference(case, dtype):
    (outs, _), (ref, _), _ = _module_vs_reference(case, dtype)
    for i, (o, r) in enumerate(zip(outs, ref)):
        assert o.dtype == dtype
        scale = 1.0 + r.detach().abs().max().item()  # QK-Norm's g·q̂ is of size g: relative to the output scale
        _close(o / scale, r / scale, TOL[dtype], f"{case} {dtype} output {i}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_zero_vectors_stay_finite(case, dtype):
    m = _build(case, dtype)
    xs = tuple(torch.zeros(x.shape, dtype=dtype, requires_grad=True) for x in _inputs(case))
    outs = _tuple(m(*xs))
    sum(o.float().sum() for o in outs).backward()
    for t in (*outs, *(x.grad for x in xs)):
        assert torch.isfinite(t).all(), f"{case} gave non-finite values on all-zero {dtype} inputs"


# ---------------------------------------------------------------- QK-Norm

def test_qk_norm_g_starts_at_log2_of_the_number_of_off_diagonal_logits():
    """Henry et al. 2020: g₀ = log₂(L² − L) with L the 97.5th-percentile training length (72 for their en→vi)."""
    assert QKNorm(HEAD_DIM, seq_len=72).g.item() == pytest.approx(math.log2(72 ** 2 - 72), rel=1e-7)
    assert QKNorm(HEAD_DIM).g.item() == pytest.approx(math.log2(256 ** 2 - 256), rel=1e-7)  # documented default
    assert QKNorm(HEAD_DIM, g_init=3.0).g.item() == 3.0
    assert QKNorm(HEAD_DIM).g.shape == ()


@pytest.mark.parametrize("seq_len", [1, 0, -3])
def test_qk_norm_rejects_sequence_lengths_without_off_diagonal_logits(seq_len):
    with pytest.raises(ValueError, match="seq_len"):
        QKNorm(HEAD_DIM, seq_len=seq_len)


def test_qk_norm_logits_are_g_times_cosine_similarity():
    m = QKNorm(HEAD_DIM, seq_len=40).double()
    q, k = _inputs("qk_norm")
    qn, kn = m(q, k)
    logits = qn @ kn.transpose(-1, -2)
    cos = torch.nn.functional.cosine_similarity(q.unsqueeze(-2), k.unsqueeze(-3), dim=-1)
    torch.testing.assert_close(logits, m.g.detach() * cos, atol=1e-12, rtol=1e-12)
    assert logits.abs().max() <= m.g.item() + 1e-9


def test_qk_norm_through_the_registry():
    spec = normbench.get_norm("qk_norm")
    m = spec.create(HEAD_DIM, seq_len=72)
    assert isinstance(m, QKNorm) and m.g.item() == pytest.approx(math.log2(72 ** 2 - 72))
    with pytest.raises(ValueError, match=str(HEAD_DIM)):
        m(torch.randn(2, HEAD_DIM + 1), torch.randn(2, HEAD_DIM + 1))


# ---------------------------------------------------------------- FixNorm and the hypersphere norm

@pytest.mark.parametrize("radius", [1.0, 0.5, 7.0])
def test_fixnorm_scales_every_vector_to_the_radius(radius):
    m = normbench.get_norm("fixnorm").create(C, radius=radius).double()
    y = m(_inputs("fixnorm")[0])
    torch.testing.assert_close(_l2(y), torch.full(y.shape[:-1] + (1,), radius, dtype=torch.float64))
    assert list(m.parameters()) == []


def test_hypersphere_norm_is_fixnorm_with_radius_one_and_idempotent():
    x = _inputs("ngpt")[0]
    m = normbench.get_norm("ngpt").create(C).double()
    y = m(x)
    torch.testing.assert_close(y, FixNorm(C).double()(x), atol=0, rtol=0)
    torch.testing.assert_close(m(y), y, atol=1e-15, rtol=1e-15)
    assert list(m.parameters()) == []


# ---------------------------------------------------------------- nGPT residual update and weight renormalisation

def test_ngpt_alpha_starts_at_alpha_init_stored_at_alpha_scale():
    """nGPT's scaled parameters: the stored vector starts at α_scale = 1/√d_model, the effective α at α_init."""
    m = NGPTResidual(C)
    torch.testing.assert_close(m.alpha.detach(), torch.full((C,), 1 / math.sqrt(C)))
    torch.testing.assert_close(m.effective_alpha().detach(), torch.full((C,), 0.05))
    m2 = NGPTResidual(C, alpha_init=0.2, alpha_scale=0.5)
    torch.testing.assert_close(m2.alpha.detach(), torch.full((C,), 0.5))
    torch.testing.assert_close(m2.effective_alpha().detach(), torch.full((C,), 0.2))
    with pytest.raises(ValueError, match="alpha_scale"):
        NGPTResidual(C, alpha_scale=0.0)


def test_ngpt_residual_interpolates_on_the_sphere():
    h, b = _inputs("ngpt_residual")
    out = NGPTResidual(C).double()(h, b)
    torch.testing.assert_close(_l2(out), torch.ones_like(_l2(out)))
    # α = 0 keeps h; α = 1 moves all the way to Norm(block_out)
    keep = NGPTResidual(C, alpha_init=0.0).double()(h, b)
    torch.testing.assert_close(keep, h, atol=1e-15, rtol=1e-15)
    jump = NGPTResidual(C, alpha_init=1.0).double()(h, b)
    # α's stored parameter was rounded to float32 when built, so α = 1 only to float32 precision
    torch.testing.assert_close(jump, b / _l2(b), atol=1e-7, rtol=1e-7)


def test_renormalize_linear_rows_and_columns_embeddings_and_tensors():
    torch.manual_seed(0)
    lin = nn.Linear(7, 5)
    assert renormalize_(lin, dim=1) is lin
    torch.testing.assert_close(lin.weight.detach().norm(dim=1), torch.ones(5))
    lin2 = nn.Linear(7, 5, bias=False)
    renormalize_(lin2, dim=0)
    torch.testing.assert_close(lin2.weight.detach().norm(dim=0), torch.ones(7))
    emb = nn.Embedding(9, 6)
    renormalize_(emb, dim=1)
    torch.testing.assert_close(emb.weight.detach().norm(dim=1), torch.ones(9))
    w = torch.randn(4, 3, dtype=torch.bfloat16)
    expected = (w.double() / w.double().norm(dim=1, keepdim=True)).to(torch.bfloat16)
    renormalize_(w, dim=1)
    assert w.dtype == torch.bfloat16 and torch.equal(w, expected)


def test_renormalize_keeps_a_zero_row_finite_and_rejects_non_tensors():
    w = torch.randn(3, 4)
    w[1] = 0
    renormalize_(w, dim=1)
    assert torch.isfinite(w).all() and torch.equal(w[1], torch.zeros(4))
    with pytest.raises(TypeError, match="weight"):
        renormalize_(nn.ReLU(), dim=0)
