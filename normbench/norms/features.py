"""Norms with statistics over the features of each token (or pixel): LayerNorm, RMSNorm and relatives.

For the ``images`` layout these normalise each pixel over its C channels (as ConvNeXt's LayerNorm2d),
so a model can use them as a drop-in ``norm_layer``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._base import channel_dim, check_input, check_layout, per_channel, upcast


class _FeatureNorm(nn.Module):
    """Base: per-channel weight (and bias) over the channel axis."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5,
                 affine: bool = True, bias: bool = True):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout)
        self.eps = eps
        self.dim = channel_dim(layout)
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def _affine(self, y: torch.Tensor) -> torch.Tensor:
        if self.weight is not None:
            y = y * per_channel(self.weight, self.layout)
        if self.bias is not None:
            y = y + per_channel(self.bias, self.layout)
        return y

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}, eps={self.eps}"


class LayerNorm(_FeatureNorm):
    """Ba et al. 2016: y = γ·(x−μ)/√(σ²+ε) + β, μ and σ² (biased) over the C features."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "LayerNorm")
        if self.layout == "tokens":
            return nn.functional.layer_norm(x, (self.num_features,), self.weight, self.bias, self.eps)
        xf = upcast(x)
        mu = xf.mean(self.dim, keepdim=True)
        var = (xf - mu).pow(2).mean(self.dim, keepdim=True)
        return self._affine(((xf - mu) * torch.rsqrt(var + self.eps)).to(x.dtype))


class RMSNorm(_FeatureNorm):
    """Zhang & Sennrich 2019: y = γ·x/√(mean(x²)+ε); no centring and no bias."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-6, affine: bool = True):
        super().__init__(num_features, layout, eps, affine=affine, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, type(self).__name__)
        xf = upcast(x)
        ms = xf.pow(2).mean(self.dim, keepdim=True)
        y = (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)
        return self._affine(y)


class SRMSNorm(RMSNorm):
    """Qin et al. 2023 (TransNormer): y = x/(‖x‖₂/√d), i.e. RMSNorm without the gain."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-6):
        super().__init__(num_features, layout, eps, affine=False)


class CRMSNorm(_FeatureNorm):
    """Jiang et al. 2023: RMSNorm of a zero-mean d-vector stored compressed as its first d−1 entries.

    With C = d−1 stored features x, the dropped entry is −Σx, so
    y = γ·x/√((Σx_i² + (Σx_i)²)/d + ε) with d = C+1.
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-6, affine: bool = True):
        super().__init__(num_features, layout, eps, affine=affine, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "CRMSNorm")
        xf = upcast(x)
        d = self.num_features + 1
        sq = xf.pow(2).sum(self.dim, keepdim=True) + xf.sum(self.dim, keepdim=True).pow(2)
        y = (xf * torch.rsqrt(sq / d + self.eps)).to(x.dtype)
        return self._affine(y)


class ScaleNorm(nn.Module):
    """Nguyen & Salazar 2019: y = g·x/‖x‖₂ with one learned scalar g, initialised to √C."""

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout)
        self.eps = eps
        self.dim = channel_dim(layout)
        self.g = nn.Parameter(torch.tensor(math.sqrt(num_features)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "ScaleNorm")
        xf = upcast(x)
        norm = torch.linalg.vector_norm(xf, dim=self.dim, keepdim=True).clamp_min(self.eps)
        return (self.g * xf / norm).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}, eps={self.eps}"


class LayerNormScaling(LayerNorm):
    """Sun et al. 2025 (Curse of Depth): y = LN(x)/√ℓ for the layer at depth ℓ (1-based)."""

    def __init__(self, num_features: int, layout: str = "tokens", depth: int = 1, eps: float = 1e-5):
        super().__init__(num_features, layout, eps)
        if int(depth) < 1:
            raise ValueError(f"LayerNorm Scaling needs the 1-based layer depth >= 1, got {depth}")
        self.depth = int(depth)
        self.scale = 1.0 / math.sqrt(self.depth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale

    def extra_repr(self) -> str:
        return super().extra_repr() + f", depth={self.depth}"


class AddLayerNorm(LayerNorm):
    """Residual add fused with LayerNorm: returns (LN(x + r), x + r), as a pre-norm block needs."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = x + residual
        return super().forward(s), s


class AddRMSNorm(RMSNorm):
    """Residual add fused with RMSNorm: returns (RMSNorm(x + r), x + r)."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = x + residual
        return super().forward(s), s
