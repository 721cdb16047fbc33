"""Norms on the unit sphere for attention, embeddings and nGPT: QK-Norm, FixNorm, hypersphere norm and nGPT's residual.

All of them divide by an ℓ2 norm over the last axis; the norm is computed in at least float32 and clamped below by
``eps`` so bfloat16 inputs and all-zero vectors stay finite (a zero vector maps to zero).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._base import check_input, check_layout, upcast


def _unit(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x/max(‖x‖₂, ε) over the last axis, computed in at least float32 (never downcasting float64)."""
    xf = upcast(x)
    return xf / torch.linalg.vector_norm(xf, dim=-1, keepdim=True).clamp_min(eps)


class QKNorm(nn.Module):
    """Henry et al. 2020 (Query-Key Normalization): q̂ = q/‖q‖, k̂ = k/‖k‖ over the head dimension.

    ``forward(q, k)`` returns ``(g·q̂, k̂)``, so the attention logits are g·q̂k̂ᵀ (a scaled cosine similarity):
    the caller must not divide by √d again (use ``scale=1.0`` in ``scaled_dot_product_attention``).
    The learned scalar g replaces 1/√d. The paper initialises it to g₀ = log₂(L² − L), with L the 97.5th
    percentile of the training sequence lengths; ``seq_len`` is that L (default 256, a small GPT's context:
    g₀ ≈ 16.0); ``g_init`` sets g₀ directly instead.
    """

    def __init__(self, head_dim: int, layout: str = "tokens", seq_len: int = 256, g_init: float | None = None,
                 eps: float = 1e-6):
        super().__init__()
        self.num_features = head_dim
        self.layout = check_layout(layout, ("tokens",))
        self.eps = eps
        if g_init is None:
            if int(seq_len) < 2:
                raise ValueError(f"QKNorm initialises g from log2(L² − L), which needs seq_len >= 2; got {seq_len}. "
                                 "Pass the typical training sequence length, or g_init= directly")
            g_init = math.log2(int(seq_len) ** 2 - int(seq_len))
        self.seq_len = int(seq_len)
        self.g = nn.Parameter(torch.tensor(float(g_init)))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_input(q, self.num_features, self.layout, "QKNorm (q)")
        check_input(k, self.num_features, self.layout, "QKNorm (k)")
        return (self.g * _unit(q, self.eps)).to(q.dtype), _unit(k, self.eps).to(k.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, seq_len={self.seq_len}, eps={self.eps}"


class FixNorm(nn.Module):
    """Nguyen & Salazar 2019 (Transformers without Tears), FixNorm: y = r·x/‖x‖₂, every vector scaled to length r.

    No learned parameters; ``radius`` r is fixed (default 1).
    """

    def __init__(self, num_features: int, layout: str = "tokens", radius: float = 1.0, eps: float = 1e-6):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout, ("tokens",))
        self.radius = float(radius)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "FixNorm")
        return (self.radius * _unit(x, self.eps)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, radius={self.radius}, eps={self.eps}"


class HypersphereNorm(nn.Module):
    """Loshchilov et al. 2024 (nGPT): y = x/‖x‖₂, every hidden vector projected onto the unit hypersphere."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-6):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout, ("tokens",))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "HypersphereNorm")
        return _unit(x, self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}"


class NGPTResidual(nn.Module):
    """nGPT's residual update (Loshchilov et al. 2024, eqs. 10–11): h ← Norm(h + α ⊙ (Norm(block_out) − h)).

    α is a learned vector of per-dimension "eigen learning rates". As in the paper's parameter scaling, the stored
    parameter starts at ``alpha_scale`` (default 1/√C) and is multiplied by ``alpha_init/alpha_scale`` in the
    forward, so α starts at ``alpha_init`` (default 0.05, of the order 1/n_layers) while its effective learning rate
    is scaled by ``alpha_init/alpha_scale``. Use one module per attention and per MLP sub-layer.

    ``h`` is expected on the unit sphere already (the previous update's output, or a normalized embedding). The
    authors' code additionally re-normalizes ``h`` and takes |α|; this follows the paper's equation instead.
    """

    def __init__(self, num_features: int, alpha_init: float = 0.05, alpha_scale: float | None = None,
                 eps: float = 1e-6):
        super().__init__()
        self.num_features = num_features
        self.alpha_init = float(alpha_init)
        self.alpha_scale = float(alpha_scale) if alpha_scale is not None else 1.0 / math.sqrt(num_features)
        if self.alpha_scale <= 0:
            raise ValueError(f"alpha_scale must be > 0, got {alpha_scale}")
        self.eps = eps
        self.alpha = nn.Parameter(torch.full((num_features,), self.alpha_scale))

    def effective_alpha(self) -> torch.Tensor:
        return self.alpha * (self.alpha_init / self.alpha_scale)

    def forward(self, h: torch.Tensor, block_out: torch.Tensor) -> torch.Tensor:
        check_input(h, self.num_features, "tokens", "NGPTResidual (h)")
        check_input(block_out, self.num_features, "tokens", "NGPTResidual (block_out)")
        hf = upcast(h)
        step = _unit(block_out, self.eps).to(hf.dtype) - hf
        return _unit(hf + self.effective_alpha().to(hf.dtype) * step, self.eps).to(h.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, alpha_init={self.alpha_init}, alpha_scale={self.alpha_scale:.4g}"


@torch.no_grad()
def renormalize_(module_or_weight: nn.Module | torch.Tensor, dim: int, eps: float = 1e-6):
    """Project a weight back onto the unit sphere along ``dim``, in place (nGPT does this after every optimizer step).

    ``module_or_weight`` is an ``nn.Linear``/``nn.Embedding`` (its ``.weight``) or a weight tensor. ``dim`` is the
    axis of length d_model: for an ``nn.Embedding`` ``[vocab, d]`` and for Linear layers that read the residual
    stream ``[out, d]`` it is 1 (each row unit-norm); for Linear layers that write to it ``[d, in]`` it is 0.
    Returns its argument.
    """
    w = getattr(module_or_weight, "weight", None) if isinstance(module_or_weight, nn.Module) else module_or_weight
    if not isinstance(w, torch.Tensor):
        raise TypeError("renormalize_ needs a module with a .weight tensor (nn.Linear, nn.Embedding) or a tensor, "
                        f"got {type(module_or_weight).__name__}")
    wf = upcast(w)
    w.copy_(wf / torch.linalg.vector_norm(wf, dim=dim, keepdim=True).clamp_min(eps))
    return module_or_weight


__all__ = ["QKNorm", "FixNorm", "HypersphereNorm", "NGPTResidual", "renormalize_"]
