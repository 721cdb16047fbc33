"""A small decoder-only GPT (nanoGPT-style, one file) whose normalization placement is a parameter.

Placements (``x`` is the residual stream, ``F`` a sub-layer: attention or MLP, ``N`` the norm under test):

=====================  ==========================================================================================
``post_ln``            x = N(x + F(x))                                        (Vaswani et al. 2017)
``pre_ln``             x = x + F(N(x)); a final N before the head            (Xiong et al. 2020)
``peri_ln``            x = x + N_out(F(N_in(x))); final N                    (Kim et al. 2025, arXiv 2502.02732)
``mix_ln``             post_ln in the first floor(0.25 L) blocks, pre_ln after; final N (Li et al. 2024, 2412.13795)
``deepnorm``           x = N(alpha x + F(x)), alpha = (2L)^(1/4); value, output and MLP weights initialised with
                       Xavier gain beta = (8L)^(-1/4)                        (Wang et al. 2022, arXiv 2203.00555)
``hybridnorm``         attention: x = x + Attn(N_q(q), N_k(k), N_v(v)) (QKV-Norm over the model width), MLP:
                       x = N(x + MLP(x)) (post-norm)                         (Zhuo et al. 2025, arXiv 2503.04598)
``layernorm_scaling``  pre_ln with every block norm's output scaled by 1/sqrt(l) for block l = 1..L
                       (Sun et al. 2025, arXiv 2502.05795); final N unscaled
=====================  ==========================================================================================

``qk_norm=True`` normalises queries and keys per head with the registry's ``qk_norm`` spec (its learned scale
replaces 1/sqrt(d)). Any token-layout norm in the registry (plugins included) can be ``N``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

PLACEMENTS = ("pre_ln", "post_ln", "peri_ln", "mix_ln", "deepnorm", "hybridnorm", "layernorm_scaling")
#: Placements whose last operation is a norm, so they need no final norm before the head.
_ENDS_NORMALISED = ("post_ln", "deepnorm", "hybridnorm")


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


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, qkv_norms=None, qk_norm: nn.Module | None = None):
        super().__init__()
        c = cfg.n_embd
        self.n_head = cfg.n_head
        self.q = nn.Linear(c, c)
        self.k = nn.Linear(c, c)
        self.v = nn.Linear(c, c)
        self.proj = nn.Linear(c, c)
        # HybridNorm's QKV-Norm: one norm each for q, k, v over the model width.
        self.qkv_norms = nn.ModuleList(qkv_norms) if qkv_norms is not None else None
        self.qk_norm = qk_norm
        # An explicit causal mask: on CPU this path is faster than is_causal=True at these sizes.
        self.register_buffer("mask", torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        if self.qkv_norms is not None:
            q, k, v = (n(z) for n, z in zip(self.qkv_norms, (q, k, v)))
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        scale = None
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)
            scale = 1.0  # the QK-norm's learned gain replaces 1/sqrt(d)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:t, :t], scale=scale)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    """One transformer block; ``mode`` is this block's placement (mix_ln resolves to post_ln or pre_ln)."""

    def __init__(self, cfg: GPTConfig, index: int, norm, mode: str, qk_norm_factory=None):
        super().__init__()
        self.mode = mode
        depth = index + 1
        c = cfg.n_embd

        def make():
            n = norm(c, depth=depth)
            if mode == "layernorm_scaling" and not getattr(norm, "wants_depth", False):
                n = _Scaled(n, 1.0 / math.sqrt(depth))
            return n

        qk = qk_norm_factory(c // cfg.n_head) if qk_norm_factory is not None else None
        qkv = [make() for _ in range(3)] if mode == "hybridnorm" else None
        self.attn = CausalSelfAttention(cfg, qkv_norms=qkv, qk_norm=qk)
        self.mlp = MLP(cfg)
        self.alpha = (2 * cfg.n_layer) ** 0.25 if mode == "deepnorm" else 1.0
        if mode != "hybridnorm":
            self.norm1 = make()
        self.norm2 = make()
        if mode == "peri_ln":
            self.norm1_out = make()
            self.norm2_out = make()

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
            return self.norm2(x + self.mlp(x))
        raise ValueError(f"unknown block mode {m!r}")


class GPT(nn.Module):
    """Token + learned position embeddings, ``n_layer`` blocks, an (optional) final norm, a tied LM head."""

    def __init__(self, cfg: GPTConfig, norm, qk_norm_factory=None):
        super().__init__()
        if cfg.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {cfg.placement!r}; choose one of {', '.join(PLACEMENTS)}")
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"n_embd {cfg.n_embd} must be divisible by n_head {cfg.n_head}")
        if cfg.qk_norm and qk_norm_factory is None:
            raise ValueError("qk_norm=True needs a qk_norm_factory (the registry's 'qk_norm' spec)")
        self.cfg = cfg
        n_post = math.floor(cfg.mix_ln_ratio * cfg.n_layer)
        modes = [("post_ln" if i < n_post else "pre_ln") if cfg.placement == "mix_ln" else cfg.placement
                 for i in range(cfg.n_layer)]
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.n_embd)
        self.blocks = nn.ModuleList(
            Block(cfg, i, norm, m, qk_norm_factory if cfg.qk_norm else None) for i, m in enumerate(modes))
        self.norm_f = nn.Identity() if modes[-1] in _ENDS_NORMALISED else norm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
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
        for block in self.blocks:
            lin = [block.attn.q, block.attn.k, block.attn.v, block.attn.proj, block.mlp.fc, block.mlp.out]
            if block.mode == "deepnorm":
                beta = (8 * cfg.n_layer) ** -0.25
                for layer in lin:
                    gain = 1.0 if layer in (block.attn.q, block.attn.k) else beta
                    nn.init.xavier_normal_(layer.weight, gain=gain)
            else:
                for layer in lin:
                    nn.init.normal_(layer.weight, std=0.02)
                # GPT-2: residual projections scaled by 1/sqrt(2L) so the stream's variance stays O(1).
                for layer in (block.attn.proj, block.mlp.out):
                    nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence length {t} exceeds the model's seq_len {self.cfg.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm_f(x))
