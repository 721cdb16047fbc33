"""A small decoder-only GPT (nanoGPT-style, one file) whose normalization placement is a parameter.

Placements (``x`` is the residual stream, ``F`` a sub-layer: attention or MLP, ``N`` the norm under test; the
sources each follows, and every deviation, are in ``docs/accuracy.md``):

=====================  ==========================================================================================
``post_ln``            x = N(x + F(x)); no final N                            (Vaswani et al. 2017)
``pre_ln``             x = x + F(N(x)); a final N before the head            (Xiong et al. 2020)
``peri_ln``            x0 = N(embeddings); x = x + N_out(F(N_in(x))); final N (Kim et al. 2025, arXiv 2502.02732)
``mix_ln``             post_ln in the first floor(0.25 L) blocks, pre_ln after; final N (Li et al. 2024,
                       official pixeli99/MixLN)
``deepnorm``           x = N(alpha x + F(x)), alpha = (2L)^(1/4); value, output and MLP weights initialised with
                       Xavier gain beta = (8L)^(-1/4); no final N           (Wang et al. 2022, microsoft/torchscale)
``hybridnorm``         attention: x = x + Attn(N_q(q), N_k(k), N_v(v)) with no block-input norm and q, k, v each
                       normalised per head (one N over head_dim, shared by the heads); FFN: y = N(x), x = y + MLP(y)
                       (the stream is replaced by its normalised value); final N (Zhuo et al. 2025, official
                       BryceZhuo/HybridNorm)
``layernorm_scaling``  pre_ln with every block norm's output scaled by 1/sqrt(l) for block l = 1..L, final N
                       unscaled, and no 1/sqrt(2L) residual init (its authors warn against it) (Sun et al. 2025,
                       official lmsdss/LayerNorm-Scaling)
``ngpt``               nGPT (Loshchilov et al. 2024, official NVIDIA/ngpt): every hidden vector on the unit sphere,
                       h = N(h + |a| (N(F(h)) - h)) with N = the norm under test (``ngpt``: x/|x|), weights
                       renormalised after every optimizer step, scaled q/k/MLP/logits, no biases, untied head
=====================  ==========================================================================================

``embed_scale`` multiplies the summed token and position embeddings by a learnable scalar initialised to
sqrt(n_embd) (the DyT/Derf LLM recipe); ``alpha_attn``/``alpha_ffn``/``alpha_final`` set the ``alpha_init`` of the
norms before attention, before the MLP and before the head (DyT's and Derf's alpha0 per position).
``qk_norm=True`` normalises queries and keys per head with the registry's ``qk_norm`` spec (its learned scale
replaces 1/sqrt(d)). Any token-layout norm in the registry (plugins included) can be ``N``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

PLACEMENTS = ("pre_ln", "post_ln", "peri_ln", "mix_ln", "deepnorm", "hybridnorm", "layernorm_scaling", "ngpt")
#: nGPT's ``base_scale``: the official config's constant 1/sqrt(1024) (the stored value of alpha, s_qk and s_z,
#: whose effective value is stored * init / base_scale, so their Adam steps are 32x larger), kept at every width.
NGPT_BASE_SCALE = 1.0 / math.sqrt(1024.0)
#: Placements whose last operation is a norm, so they need no final norm before the head.
_ENDS_NORMALISED = ("post_ln", "deepnorm", "ngpt")


@dataclass
class GPTConfig:
    vocab_size: int = 256
    seq_len: int = 64
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    mlp_ratio: int = 4
    placement: str = "pre_ln"
    qk_norm: bool = False
    mix_ln_ratio: float = 0.25
    #: DyT/Derf LLM recipe: a learnable scalar, initialised to sqrt(n_embd), multiplies the embeddings.
    embed_scale: bool = False
    #: ``alpha_init`` of the norms before attention / before the MLP / before the head (None: the norm's default).
    alpha_attn: float | None = None
    alpha_ffn: float | None = None
    alpha_final: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class _Scaled(nn.Module):
    """A norm whose output is multiplied by a constant (LayerNorm Scaling applied to any norm)."""

    def __init__(self, norm: nn.Module, scale: float):
        super().__init__()
        self.norm = norm
        self.scale = scale

    def forward(self, x):
        return self.norm(x) * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"


class _ScaledParam(nn.Module):
    """nGPT's scaled parameter: stored at ``scale``, used as ``stored * init / scale`` (so its Adam step is larger)."""

    def __init__(self, shape, init: float, scale: float):
        super().__init__()
        self.init, self.scale = float(init), float(scale)
        self.param = nn.Parameter(torch.full(shape, self.scale))

    def forward(self) -> torch.Tensor:
        return self.param * (self.init / self.scale)


def _heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    b, t, c = x.shape
    return x.view(b, t, n_head, c // n_head).transpose(1, 2)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, qkv_norms=None, qk_norm: nn.Module | None = None, bias: bool = True):
        super().__init__()
        c = cfg.n_embd
        self.n_head = cfg.n_head
        self.q = nn.Linear(c, c, bias=bias)
        self.k = nn.Linear(c, c, bias=bias)
        self.v = nn.Linear(c, c, bias=bias)
        self.proj = nn.Linear(c, c, bias=bias)
        # HybridNorm's QKV-Norm: one norm each for q, k, v over head_dim, shared by the heads.
        self.qkv_norms = nn.ModuleList(qkv_norms) if qkv_norms is not None else None
        self.qk_norm = qk_norm
        # An explicit causal mask: on CPU this path is faster than is_causal=True at these sizes.
        self.register_buffer("mask", torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool).tril(), persistent=False)

    def qkv(self, x: torch.Tensor):
        b, t, c = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.qkv_norms is not None:
            hd = c // self.n_head
            q, k, v = (n(z.reshape(b, t * self.n_head, hd)).reshape(b, t, c) for n, z in zip(self.qkv_norms, (q, k, v),
                                                                                              strict=True))
        return tuple(_heads(z, self.n_head) for z in (q, k, v))

    def attend(self, q, k, v, scale=None) -> torch.Tensor:
        b, h, t, d = q.shape
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:t, :t], scale=scale)
        return self.proj(y.transpose(1, 2).reshape(b, t, h * d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x)
        scale = None
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)
            scale = 1.0  # the QK-norm's learned gain replaces 1/sqrt(d)
        return self.attend(q, k, v, scale)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig, bias: bool = True):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd, bias=bias)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd, bias=bias)

    def forward(self, x, pre_scale=None):
        h = self.fc(x)
        if pre_scale is not None:
            h = h * pre_scale
        return self.out(F.gelu(h))


class Block(nn.Module):
    """One transformer block; ``mode`` is this block's placement (mix_ln resolves to post_ln or pre_ln)."""

    def __init__(self, cfg: GPTConfig, index: int, norm, mode: str, qk_norm_factory=None):
        super().__init__()
        self.mode = mode
        depth = index + 1
        c = cfg.n_embd

        def make(alpha=None, size=c):
            kwargs = {"alpha_init": alpha} if alpha is not None else {}
            n = norm(size, depth=depth, **kwargs)
            if mode == "layernorm_scaling" and not getattr(norm, "wants_depth", False):
                n = _Scaled(n, 1.0 / math.sqrt(depth))
            return n

        qk = qk_norm_factory(c // cfg.n_head) if qk_norm_factory is not None else None
        if mode == "ngpt":
            self._init_ngpt(cfg, make)
            return
        qkv = [make(cfg.alpha_attn, size=c // cfg.n_head) for _ in range(3)] if mode == "hybridnorm" else None
        self.attn = CausalSelfAttention(cfg, qkv_norms=qkv, qk_norm=qk)
        self.mlp = MLP(cfg)
        self.alpha = (2 * cfg.n_layer) ** 0.25 if mode == "deepnorm" else 1.0
        if mode != "hybridnorm":
            self.norm1 = make(cfg.alpha_attn)
        self.norm2 = make(cfg.alpha_ffn)
        if mode == "peri_ln":
            self.norm1_out = make(cfg.alpha_attn)
            self.norm2_out = make(cfg.alpha_ffn)

    def _init_ngpt(self, cfg: GPTConfig, make) -> None:
        c, hd = cfg.n_embd, cfg.n_embd // cfg.n_head
        base = NGPT_BASE_SCALE
        self.attn = CausalSelfAttention(cfg, bias=False)
        self.mlp = MLP(cfg, bias=False)
        # Norm(.) of nGPT: the norm under test (x/|x| for the `ngpt` spec); one module per use.
        self.n_attn_out, self.n_attn_res = make(), make()
        self.n_mlp_out, self.n_mlp_res = make(), make()
        self.n_q, self.n_k = make(size=hd), make(size=hd)
        self.alpha_a = _ScaledParam((c,), 0.05, base)
        self.alpha_m = _ScaledParam((c,), 0.05, base)
        self.s_qk = _ScaledParam((hd,), 1.0, base)
        self.s_u = _ScaledParam((cfg.mlp_ratio * c,), 1.0, 1.0)  # suv_init_scaling = 1 in the official code
        self.sqrt_d = math.sqrt(c)

    def _ngpt(self, h: torch.Tensor) -> torch.Tensor:
        at = self.attn
        q, k, v = at.qkv(h)
        s = self.s_qk()
        q, k = self.n_q(q) * s, self.n_k(k) * s
        h_a = self.n_attn_out(at.attend(q, k, v, scale=math.sqrt(q.shape[-1])))
        h = self.n_attn_res(h + self.alpha_a().abs() * (h_a - h))
        h_m = self.n_mlp_out(self.mlp(h, pre_scale=self.s_u() * self.sqrt_d))
        return self.n_mlp_res(h + self.alpha_m().abs() * (h_m - h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mode
        if m in ("pre_ln", "layernorm_scaling"):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        if m == "post_ln":
            x = self.norm1(x + self.attn(x))
            return self.norm2(x + self.mlp(x))
        if m == "peri_ln":
            x = x + self.norm1_out(self.attn(self.norm1(x)))
            return x + self.norm2_out(self.mlp(self.norm2(x)))
        if m == "deepnorm":
            x = self.norm1(self.alpha * x + self.attn(x))
            return self.norm2(self.alpha * x + self.mlp(x))
        if m == "hybridnorm":
            x = x + self.attn(x)
            y = self.norm2(x)
            return y + self.mlp(y)
        if m == "ngpt":
            return self._ngpt(x)
        raise ValueError(f"unknown block mode {m!r}")


class GPT(nn.Module):
    """Token + learned position embeddings, ``n_layer`` blocks, an (optional) final norm, an LM head (tied except
    in nGPT)."""

    def __init__(self, cfg: GPTConfig, norm, qk_norm_factory=None):
        super().__init__()
        if cfg.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {cfg.placement!r}; choose one of {', '.join(PLACEMENTS)}")
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd {cfg.n_embd} must be divisible by n_head {cfg.n_head}")
        if cfg.qk_norm and qk_norm_factory is None:
            raise ValueError("qk_norm=True needs a qk_norm_factory (the registry's 'qk_norm' spec)")
        if cfg.placement == "ngpt" and cfg.qk_norm:
            raise ValueError("the ngpt placement normalises queries and keys itself; drop qk_norm")
        self.cfg = cfg
        n_post = math.floor(cfg.mix_ln_ratio * cfg.n_layer)
        modes = [("post_ln" if i < n_post else "pre_ln") if cfg.placement == "mix_ln" else cfg.placement
                 for i in range(cfg.n_layer)]
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.n_embd)
        self.embed_scale = nn.Parameter(torch.tensor(math.sqrt(cfg.n_embd))) if cfg.embed_scale else None
        # Peri-LN normalises the embedding output; nGPT puts it on the unit sphere.
        self.norm_embed = norm(cfg.n_embd) if cfg.placement in ("peri_ln", "ngpt") else None
        self.blocks = nn.ModuleList(
            Block(cfg, i, norm, m, qk_norm_factory if cfg.qk_norm else None) for i, m in enumerate(modes))
        kwargs = {"alpha_init": cfg.alpha_final} if cfg.alpha_final is not None else {}
        self.norm_f = nn.Identity() if modes[-1] in _ENDS_NORMALISED else norm(cfg.n_embd, **kwargs)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.placement == "ngpt":
            self.s_z = _ScaledParam((cfg.vocab_size,), 1.0, NGPT_BASE_SCALE)
        else:
            self.s_z = None
            self.lm_head.weight = self.wte.weight
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self):
        cfg = self.cfg
        for name, p in self.named_parameters():
            if name.endswith(".bias") and p.dim() == 1 and (".attn." in name or ".mlp." in name):
                p.zero_()
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
        if cfg.placement == "ngpt":
            nn.init.normal_(self.lm_head.weight, std=0.02)
        for block in self.blocks:
            lin = [block.attn.q, block.attn.k, block.attn.v, block.attn.proj, block.mlp.fc, block.mlp.out]
            if block.mode == "deepnorm":
                beta = (8 * cfg.n_layer) ** -0.25
                for layer in lin:
                    gain = 1.0 if layer in (block.attn.q, block.attn.k) else beta
                    nn.init.xavier_normal_(layer.weight, gain=gain)
                continue
            for layer in lin:
                nn.init.normal_(layer.weight, std=0.02)
            if block.mode not in ("layernorm_scaling", "ngpt"):
                # GPT-2: residual projections scaled by 1/sqrt(2L) so the stream's variance stays O(1).
                # LayerNorm Scaling's authors warn against combining it with this; nGPT renormalises anyway.
                for layer in (block.attn.proj, block.mlp.out):
                    nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
        self.after_step()

    @torch.no_grad()
    def after_step(self) -> None:
        """nGPT: project the weights back onto the unit sphere (called after every optimizer step); else nothing."""
        if self.cfg.placement != "ngpt":
            return
        from normbench.norms.attention import renormalize_

        # Along the embedding dimension for matrices that read the stream, along the output for those writing it.
        for m in (self.wte, self.wpe, self.lm_head):
            renormalize_(m, dim=1)
        for block in self.blocks:
            for m in (block.attn.q, block.attn.k, block.attn.v, block.mlp.fc):
                renormalize_(m, dim=1)
            for m in (block.attn.proj, block.mlp.out):
                renormalize_(m, dim=0)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence length {t} exceeds the model's seq_len {self.cfg.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        if self.embed_scale is not None:
            x = x * self.embed_scale
        if self.norm_embed is not None:
            x = self.norm_embed(x)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        return logits * self.s_z() if self.s_z is not None else logits
