"""``native``: rmsnorm by ``torch.nn.functional.rms_norm(x, (C,), weight, eps)`` (torch >= 2.4)."""

from __future__ import annotations

import torch

from normbench.measure.adapters._base import _Adapter


def rmsnorm(eager):
    f = torch.nn.functional.rms_norm
    return _Adapter(eager, lambda m, x: f(x, (m.num_features,), m.weight, m.eps))
