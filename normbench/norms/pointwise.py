"""Point-wise normalization replacements with no statistics: DyT, Derf, and the identity baseline."""

from __future__ import annotations

import torch
from torch import nn

from ._base import check_input, check_layout, per_channel


class _PointwiseNorm(nn.Module):
    def __init__(self, num_features: int, layout: str = "tokens", alpha_init: float = 0.5):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout)
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}"


class DyT(_PointwiseNorm):
    """Zhu et al. 2025 (Transformers without Normalization): y = γ·tanh(α·x) + β, scalar α init 0.5."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "DyT")
        w, b = per_channel(self.weight, self.layout), per_channel(self.bias, self.layout)
        return torch.tanh(self.alpha * x) * w + b


class Derf(_PointwiseNorm):
    """Chen et al. 2025 (Stronger Normalization-Free Transformers): y = γ·erf(α·x + s) + β.

    α (scalar, init 0.5) and the shift s (scalar, init 0) are learned.
    """

    def __init__(self, num_features: int, layout: str = "tokens", alpha_init: float = 0.5, shift_init: float = 0.0):
        super().__init__(num_features, layout, alpha_init)
        self.shift = nn.Parameter(torch.tensor(float(shift_init)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "Derf")
        w, b = per_channel(self.weight, self.layout), per_channel(self.bias, self.layout)
        return torch.erf(self.alpha * x + self.shift) * w + b


class NoNorm(nn.Module):
    """The no-normalization baseline: y = x (models add Fixup/SkipInit/NF machinery around it)."""

    def __init__(self, num_features: int, layout: str = "tokens"):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "NoNorm")
        return x
