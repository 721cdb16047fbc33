"""Softmax and log-softmax over the last axis as normalization layers (the eager definitions and float64 references).

Both are parameter-free ``nn.Module`` s over ``[..., C]``: ``y = exp(x − max x) / Σ exp(x − max x)`` and
``y = x − max x − log Σ exp(x − max x)``, computed by ``torch.softmax``/``torch.log_softmax`` (which compute half
types in float32 and round once). A row whose entries are all −inf has no distribution: like ``torch.softmax`` in
float64, every backend returns NaN for it (0/0), and NaN for a row holding +inf or NaN. Other −inf entries give
probability 0 (log-probability −inf).
"""

from __future__ import annotations

import torch
from torch import nn

from normbench.norms._base import check_input, check_layout


class Softmax(nn.Module):
    """y = exp(x − max x) / Σ exp(x − max x) over the last axis (C features)."""

    log = False

    def __init__(self, num_features: int, layout: str = "tokens"):
        super().__init__()
        self.num_features, self.layout = num_features, check_layout(layout, ("tokens",))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, "tokens", type(self).__name__)
        return torch.log_softmax(x, dim=-1) if self.log else torch.softmax(x, dim=-1)

    def extra_repr(self) -> str:
        return f"{self.num_features}"


class LogSoftmax(Softmax):
    """y = x − max x − log Σ exp(x − max x) over the last axis (the log-probabilities of cross-entropy)."""

    log = True
