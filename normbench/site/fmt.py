"""Number formatting with units and link vetting, used as Jinja filters (the templates autoescape every value).

Records come from third parties: only absolute http(s) links pass ``safe_url``; nothing here returns HTML.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def safe_url(url) -> str | None:
    """``url`` if it is an absolute http(s) link with a host, else ``None`` (javascript:, data:, relative, ...)."""
    if not isinstance(url, str):
        return None
    url = url.strip()
    # Browsers drop tabs/newlines inside schemes ("java\tscript:"), so a URL containing any is refused.
    if not url or _CONTROL.search(url) or any(c in url for c in "\t\n\r ") or len(url) > 2000:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url


def num(x) -> float | None:
    """``x`` as a finite float, or ``None`` (bools, strings, NaN and inf are not numbers here)."""
    t = type(x)
    if t is float:   # the common cases first (a kernel row reads a dozen numbers of each record)
        return x if math.isfinite(x) else None
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def sig(x: float, digits: int = 3) -> str:
    """``x`` to ``digits`` significant figures without exponent for ordinary magnitudes."""
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    s = f"{x:,.{decimals}f}"
    return s


def _in_units(value, units: tuple[tuple[str, float], ...], smallest) -> str:
    """``value`` in the first of ``units`` (largest first) it reaches, else ``smallest(value)``; "–" when missing."""
    v = num(value)
    if v is None:
        return "–"
    for unit, scale in units:
        if abs(v) >= scale:
            return f"{sig(v / scale)} {unit}"
    return smallest(v)


def fmt_time(seconds) -> str:
    return _in_units(seconds, (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)), lambda s: f"{sig(s / 1e-9)} ns")


def fmt_gbps(gbps) -> str:
    g = num(gbps)
    if g is None:
        return "–"
    if g >= 1000:
        return f"{sig(g / 1000)} TB/s"
    return f"{sig(g)} GB/s"


def fmt_pct(p) -> str:
    p = num(p)
    return "–" if p is None else f"{p:.1f} %"


def fmt_bytes(b) -> str:
    return _in_units(b, (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)), lambda v: f"{int(v)} B")


def fmt_err(e) -> str:
    e = num(e)
    if e is None:
        return "–"
    if e == 0:
        return "0"
    return f"{e:.1e}"


def fmt_x(ratio) -> str:
    r = num(ratio)
    return "–" if r is None else f"{r:.2f}×"


def fmt_metric(v, metric: str | None = None) -> str:
    v = num(v)
    if v is None:
        return "–"
    if metric and metric.lower() in ("top1", "top5", "accuracy", "acc"):
        # Accuracies may be stored as fractions or percentages; show percent either way.
        return f"{v * 100:.2f} %" if abs(v) <= 1.0 else f"{v:.2f} %"
    return sig(v, 4)


def fmt_seconds_human(s) -> str:
    s = num(s)
    if s is None:
        return "–"
    if s < 120:
        return f"{sig(s)} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def fmt_shape(shape) -> str:
    if isinstance(shape, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return "×".join(str(d) for d in shape)
    return str(shape) if shape is not None else "–"
