"""Aggregation over seeds: mean, sample standard deviation and a Student-t confidence interval (no SciPy needed)."""

from __future__ import annotations

import math


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction for the regularised incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t (bisection on the CDF; exact to ~1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def summarize(values, confidence: float = 0.95) -> dict:
    """Mean, sample std (ddof 1), and the two-sided Student-t ``confidence`` interval of the mean.

    ``None`` entries (diverged runs) are excluded and counted in ``n_missing``. With one value the std and
    interval are ``None``.
    """
    vals = [float(v) for v in values if v is not None]
    out = {"n": len(vals), "n_missing": sum(v is None for v in values), "mean": None, "std": None,
           "ci_low": None, "ci_high": None, "confidence": confidence}
    if not vals:
        return out
    mean = sum(vals) / len(vals)
    out["mean"] = mean
    if len(vals) > 1:
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        half = t_ppf(0.5 + confidence / 2.0, len(vals) - 1) * std / math.sqrt(len(vals))
        out.update(std=std, ci_low=mean - half, ci_high=mean + half)
    return out


def aggregate(records, confidence: float = 0.95) -> list[dict]:
    """Group accuracy records by cell (everything in the config but the seed) and summarise each over seeds.

    Returns one dict per cell: norm, task, model, placement, recipe name, seeds, the summary of ``final``
    and of ``steps_to_target``, and how many seeds diverged.
    """
    cells: dict[str, list[dict]] = {}
    for rec in records:
        cfg = {k: v for k, v in rec["config"].items() if k != "seed"}
        key = repr((rec["norm"]["name"], sorted((k, repr(v)) for k, v in cfg.items())))
        cells.setdefault(key, []).append(rec)
    out = []
    for recs in cells.values():
        cfg, met = recs[0]["config"], recs[0]["metrics"]
        out.append({
            "norm": recs[0]["norm"]["name"],
            "task": cfg["task"],
            "model": cfg["model"],
            "placement": cfg.get("placement"),
            "recipe": (cfg.get("recipe") or {}).get("name"),
            "batch_size": cfg.get("batch_size"),
            "metric": met["metric"],
            "higher_is_better": met["higher_is_better"],
            "seeds": sorted(r["config"]["seed"] for r in recs),
            "final": summarize([r["metrics"]["final"] for r in recs], confidence),
            "steps_to_target": summarize([r["metrics"]["steps_to_target"] for r in recs], confidence),
            "diverged": sum(bool(r["metrics"]["diverged"]) for r in recs),
        })
    return out
