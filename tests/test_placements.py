"""GPT placements and the LLM recipe pieces, each checked against its forward written out by hand (functional ops)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normbench.models import build_model
from normbench.tasks import get_task
from normbench.train.recipes import dyt_alpha0, get_recipe

LM = get_task("synth-lm")
C, H, T, B = 8, 2, 5, 3
pytestmark = pytest.mark.usefixtures("one_thread")


def _model(placement, norm="layernorm", n_layer=1, **kw):
    torch.manual_seed(0)
    m = build_model("gpt", LM, norm, placement=placement, n_layer=n_layer, n_embd=C, n_head=H, seq_len=T, **kw).module
    with torch.no_grad():  # non-trivial gains and biases, so a swapped or missing one shows
        for name, p in m.named_parameters():
            if p.dim() == 1 and ("norm" in name or name.endswith("bias")):
                p.add_(0.3 * torch.randn_like(p))
    return m.eval()


def _idx():
    return torch.randint(0, LM.vocab_size, (B, T), generator=torch.Generator().manual_seed(1))


def ln(x, mod, scale=1.0):
    return F.layer_norm(x, (x.shape[-1],), mod.weight, mod.bias, mod.eps) * scale


def lin(x, layer):
    y = x @ layer.weight.T
    return y if layer.bias is None else y + layer.bias


def attention(a, x, qkv_norm=None, qk=None, scale=None):
    """Causal multi-head attention by hand; ``qkv_norm(z, i)`` normalises q (0), k (1), v (2) per head."""
    b, t, c = x.shape
    hd = c // H
    q, k, v = (lin(x, layer).view(b, t, H, hd) for layer in (a.q, a.k, a.v))
    if qkv_norm is not None:
        q, k, v = (qkv_norm(z, i) for i, z in enumerate((q, k, v)))
    if qk is not None:
        q, k = qk(q, k)
    q, k, v = (z.permute(0, 2, 1, 3) for z in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(hd))
    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    y = (s.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, t, c)
    return lin(y, a.proj)


def mlp(m, x, pre_scale=None):
    h = lin(x, m.fc)
    if pre_scale is not None:
        h = h * pre_scale
    return lin(F.gelu(h), m.out)


def embed(m, idx):
    return m.wte.weight[idx] + m.wpe.weight[: idx.shape[1]]


def head(m, h):
    return h @ m.wte.weight.T


def test_pre_ln_and_post_ln_by_hand():
    idx = _idx()
    m = _model("pre_ln")
    b = m.blocks[0]
    h = embed(m, idx)
    h = h + attention(b.attn, ln(h, b.norm1))
    h = h + mlp(b.mlp, ln(h, b.norm2))
    torch.testing.assert_close(m(idx), head(m, ln(h, m.norm_f)))
    m = _model("post_ln")
    b = m.blocks[0]
    h = embed(m, idx)
    h = ln(h + attention(b.attn, h), b.norm1)
    h = ln(h + mlp(b.mlp, h), b.norm2)
    torch.testing.assert_close(m(idx), head(m, h))  # no final norm


def test_peri_ln_normalises_the_embedding_and_each_sublayer_output():
    idx = _idx()
    m = _model("peri_ln")
    b = m.blocks[0]
    h = ln(embed(m, idx), m.norm_embed)
    h = h + ln(attention(b.attn, ln(h, b.norm1)), b.norm1_out)
    h = h + ln(mlp(b.mlp, ln(h, b.norm2)), b.norm2_out)
    torch.testing.assert_close(m(idx), head(m, ln(h, m.norm_f)))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_hybridnorm_as_its_official_code(norm):
    """No block-input norm; q, k, v each normalised per head (one norm over head_dim shared by the heads); the FFN
    step replaces the stream by its normalised value: y = N(x), x = y + FFN(y); a final norm."""
    idx = _idx()
    m = _model("hybridnorm", norm)
    b = m.blocks[0]
    assert not hasattr(b, "norm1") and b.attn.qkv_norms[0].weight.shape == (C // H,)

    def n(x, mod):
        if norm == "layernorm":
            return ln(x, mod)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + mod.eps) * mod.weight

    h = embed(m, idx)
    h = h + attention(b.attn, h, qkv_norm=lambda z, i: n(z, b.attn.qkv_norms[i]))
    y = n(h, b.norm2)
    h = y + mlp(b.mlp, y)
    torch.testing.assert_close(m(idx), head(m, n(h, m.norm_f)))


def test_deepnorm_by_hand_and_its_init():
    idx = _idx()
    m = _model("deepnorm", n_layer=2)
    alpha = (2 * 2) ** 0.25
    h = embed(m, idx)
    for b in m.blocks:
        h = ln(alpha * h + attention(b.attn, h), b.norm1)
        h = ln(alpha * h + mlp(b.mlp, h), b.norm2)
    torch.testing.assert_close(m(idx), head(m, h))
    # Xavier-normal with gain beta = (8L)^(-1/4) on v, out, fc1, fc2; gain 1 on q, k (a wide model, so the sample
    # standard deviation is close to the intended one).
    torch.manual_seed(0)
    big = build_model("gpt", LM, "layernorm", placement="deepnorm", n_layer=4, n_embd=256, n_head=4).module
    blk = big.blocks[0]
    beta = (8 * 4) ** -0.25
    for layer, gain in ((blk.attn.q, 1.0), (blk.attn.v, beta), (blk.attn.proj, beta), (blk.mlp.fc, beta)):
        fan_out, fan_in = layer.weight.shape
        want = gain * math.sqrt(2.0 / (fan_in + fan_out))
        assert layer.weight.std().item() == pytest.approx(want, rel=0.05)


def test_layernorm_scaling_scales_block_norms_and_keeps_plain_init():
    idx = _idx()
    m = _model("layernorm_scaling", n_layer=2)
    h = embed(m, idx)
    for depth, b in enumerate(m.blocks, 1):
        s = 1 / math.sqrt(depth)
        h = h + attention(b.attn, ln(h, b.norm1.norm, s))
        h = h + mlp(b.mlp, ln(h, b.norm2.norm, s))
    torch.testing.assert_close(m(idx), head(m, ln(h, m.norm_f)))  # the final norm is not scaled
    torch.manual_seed(0)
    wide = dict(n_layer=8, n_embd=256, n_head=4)
    lns = build_model("gpt", LM, "layernorm", placement="layernorm_scaling", **wide).module
    pre = build_model("gpt", LM, "layernorm", placement="pre_ln", **wide).module
    # No 1/sqrt(2L) residual init with LayerNorm Scaling (its authors' warning); Pre-LN keeps GPT-2's.
    assert lns.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert pre.blocks[0].attn.proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)


def test_mix_ln_is_post_ln_in_the_first_quarter_then_pre_ln():
    idx = _idx()
    m = _model("mix_ln", n_layer=4)
    assert [b.mode for b in m.blocks] == ["post_ln", "pre_ln", "pre_ln", "pre_ln"]
    h = embed(m, idx)
    b = m.blocks[0]
    h = ln(h + attention(b.attn, h), b.norm1)
    h = ln(h + mlp(b.mlp, h), b.norm2)
    for b in m.blocks[1:]:
        h = h + attention(b.attn, ln(h, b.norm1))
        h = h + mlp(b.mlp, ln(h, b.norm2))
    torch.testing.assert_close(m(idx), head(m, ln(h, m.norm_f)))


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def test_ngpt_placement_by_hand():
    """nGPT: h on the unit sphere, h <- Norm(h + |a| (Norm(F(h)) - h)); q, k unit per head times s_qk; softmax
    scale sqrt(d_head); MLP input scaled by s_u sqrt(d); logits times s_z; untied head; no biases."""
    idx = _idx()
    m = _model("ngpt", norm="ngpt", n_layer=2)
    with torch.no_grad():  # move the scaled parameters off their init so the scalings are exercised
        for name, p in m.named_parameters():
            if name.endswith(".param"):
                p.mul_(1 + 0.2 * torch.rand_like(p))
    assert m.lm_head.weight.data_ptr() != m.wte.weight.data_ptr()
    assert all(layer.bias is None for b in m.blocks for layer in (b.attn.q, b.attn.proj, b.mlp.fc, b.mlp.out))
    hd = C // H
    base = 1 / math.sqrt(1024)  # the official config's base_scale

    def eff(sp, init, scale=base):
        return sp.param * (init / scale)

    h = _unit(embed(m, idx))
    for b in m.blocks:
        s_qk = eff(b.s_qk, 1.0)
        y = attention(b.attn, h, qk=lambda q, k: (_unit(q) * s_qk, _unit(k) * s_qk), scale=math.sqrt(hd))
        h = _unit(h + eff(b.alpha_a, 0.05).abs() * (_unit(y) - h))
        y = mlp(b.mlp, h, pre_scale=eff(b.s_u, 1.0, 1.0) * math.sqrt(C))
        h = _unit(h + eff(b.alpha_m, 0.05).abs() * (_unit(y) - h))
    want = (h @ m.lm_head.weight.T) * eff(m.s_z, 1.0)
    torch.testing.assert_close(m(idx), want)


def test_ngpt_weights_stay_on_the_sphere_after_each_step():
    m = _model("ngpt", norm="ngpt", n_layer=1)
    b = m.blocks[0]

    def on_sphere():
        rows = [m.wte.weight, m.lm_head.weight, b.attn.q.weight, b.attn.k.weight, b.attn.v.weight, b.mlp.fc.weight]
        cols = [b.attn.proj.weight, b.mlp.out.weight]
        return all(torch.allclose(w.norm(dim=1), torch.ones(w.shape[0]), atol=1e-5) for w in rows) and all(
            torch.allclose(w.norm(dim=0), torch.ones(w.shape[1]), atol=1e-5) for w in cols)

    assert on_sphere()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    out = m.train()(_idx())
    out.square().mean().backward()
    opt.step()
    assert not on_sphere()
    m.after_step()
    assert on_sphere()


def test_dyt_and_derf_llm_recipe_embedding_scalar_and_alpha_per_position():
    r = get_recipe("synth-lm", "gpt").adapted("dyt", "pre_ln")
    width = r.model_options["n_embd"]
    attn, other = dyt_alpha0(width)
    assert r.adapted_for == ("norm:dyt",)
    assert r.model_options["embed_scale"] is True
    assert (r.model_options["alpha_attn"], r.model_options["alpha_ffn"], r.model_options["alpha_final"]) == (
        attn, other, other)
    assert get_recipe("synth-lm", "gpt").adapted("layernorm", "pre_ln").model_options.get("embed_scale") is None
    # The paper's Table 11 (width -> attn/other alpha0).
    assert dyt_alpha0(1024) == (1.0, 1.0) and dyt_alpha0(2048) == (1.0, 0.5) and dyt_alpha0(8192) == (0.2, 0.05)
    idx = _idx()
    m = _model("pre_ln", "dyt", embed_scale=True, alpha_attn=0.8, alpha_ffn=0.2, alpha_final=0.3)
    assert m.embed_scale.item() == pytest.approx(math.sqrt(C)) and m.embed_scale.requires_grad
    b = m.blocks[0]
    assert (b.norm1.alpha.item(), b.norm2.alpha.item(), m.norm_f.alpha.item()) == pytest.approx((0.8, 0.2, 0.3))

    def dyt(x, mod):
        return mod.weight * torch.tanh(mod.alpha * x) + mod.bias

    h = embed(m, idx) * m.embed_scale  # the scalar multiplies token + position embeddings
    h = h + attention(b.attn, dyt(h, b.norm1))
    h = h + mlp(b.mlp, dyt(h, b.norm2))
    torch.testing.assert_close(m(idx), head(m, dyt(h, m.norm_f)))
