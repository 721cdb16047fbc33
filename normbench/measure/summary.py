"""Summary statistics of timing samples: median, quartiles and interquartile range."""

from __future__ import annotations

import math
from typing import Sequence


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q``-quantile of ``samples`` with linear interpolation between order statistics (numpy's default)."""
    if not samples:
        raise ValueError("quantile of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    xs = sorted(samples)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> dict:
    """Median, quartiles, IQR, min, max, mean and count of ``samples`` (seconds, or any unit)."""
    samples = [float(s) for s in samples]
    if not samples:
        raise ValueError("cannot summarize zero samples: a measurement needs at least one repetition")
    if any(not math.isfinite(s) or s < 0 for s in samples):
        raise ValueError(f"timing samples must be finite and non-negative, got {samples}")
    q25, q75 = quantile(samples, 0.25), quantile(samples, 0.75)
    return {
        "median": quantile(samples, 0.5),
        "q25": q25,
        "q75": q75,
        "iqr": q75 - q25,
        "min": min(samples),
        "max": max(samples),
        "mean": sum(samples) / len(samples),
        "reps": len(samples),
    }
