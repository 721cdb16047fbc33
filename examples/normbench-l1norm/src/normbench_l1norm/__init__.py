"""Example normbench plugin: L1 LayerNorm, a LayerNorm whose scale is the mean absolute deviation."""

from __future__ import annotations

import torch
from torch import nn

from normbench import NormSpec, Paper


class L1LayerNorm(nn.Module):
    """Hoffer et al. 2018: y = γ·(x − μ) / (c·mean|x − μ| + ε) + β, c = √(π/2), statistics over the C features.

    c makes the L1 scale match the standard deviation for Gaussian inputs, so the layer
    behaves like LayerNorm at initialisation while avoiding squares (cheap in low precision).
    """

    def __init__(self, num_features: int, layout: str = "tokens", eps: float = 1e-5):
        super().__init__()
        if layout not in ("tokens", "images"):
            raise ValueError(f"layout must be 'tokens' or 'images', got {layout!r}")
        self.num_features, self.layout, self.eps = num_features, layout, eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = -1 if self.layout == "tokens" else 1
        shape = [1] * x.dim()
        shape[dim] = self.num_features
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        centred = xf - xf.mean(dim, keepdim=True)
        scale = (torch.pi / 2) ** 0.5 * centred.abs().mean(dim, keepdim=True) + self.eps
        y = (centred / scale).to(x.dtype)
        return y * self.weight.view(shape) + self.bias.view(shape)


def _create(num_features: int, layout: str = "tokens", **kwargs) -> nn.Module:
    return L1LayerNorm(num_features, layout=layout, **kwargs)


L1_LAYERNORM = NormSpec(
    name="l1_layernorm",
    title="L1 LayerNorm",
    paper=Paper(
        title="Norm matters: efficient and accurate normalization schemes in deep networks",
        authors="Hoffer, Banner, Golan, Soudry",
        year=2018,
        url="https://arxiv.org/abs/1803.01814",
    ),
    family="features",
    kind="activation",
    layouts=("tokens", "images"),
    formula="y = γ·(x − μ) / (√(π/2)·mean|x − μ| + ε) + β, statistics over the C features",
    factory=_create,
)
