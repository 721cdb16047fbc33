"""Numerical error of y and of the gradients against a float64 reference.

The reference is the *eager* module of the same norm, given the tested module's parameters and state, cast to
float64 and run on the tested input cast up to float64 (with the same output gradients, cast up). The error
thus measures the precision lost by the tested dtype and backend relative to the eager definition evaluated
in float64; it is not an error against an exact mathematical result.

``max_abs`` is max |a − r| over all elements; ``max_rel`` is that divided by max |r| (a norm-wise relative error,
which stays meaningful where individual reference values are near zero).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch


def compare(tested: Sequence[torch.Tensor | None], reference: Sequence[torch.Tensor | None]) -> dict | None:
    """``{"max_abs", "max_rel"}`` over pairs of tensors (pairs with a ``None`` are skipped); ``None`` if no pairs."""
    max_abs, max_ref, n = 0.0, 0.0, 0
    for a, r in zip(tested, reference):
        if a is None or r is None:
            continue
        n += 1
        a64, r64 = a.detach().to(torch.float64), r.detach().to(torch.float64)
        if not bool(torch.isfinite(a64).all()):
            return {"max_abs": None, "max_rel": None, "nonfinite": True}
        if a64.numel():
            max_abs = max(max_abs, float((a64 - r64).abs().max()))
            max_ref = max(max_ref, float(r64.abs().max()))
    if n == 0:
        return None
    rel = max_abs / max_ref if max_ref > 0 else (0.0 if max_abs == 0 else math.inf)
    return {"max_abs": max_abs, "max_rel": rel if math.isfinite(rel) else None}
