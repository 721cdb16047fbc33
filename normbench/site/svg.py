"""Inline SVG charts drawn in Python: line plots, horizontal bars and a Pareto scatter.

Styling is by presentation attributes and CSS classes only (no ``style=``), so a strict
Content-Security-Policy holds. Every label is escaped; every point links to its record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from normbench.site.markup import esc

# Okabe-Ito, then Tableau: distinguishable for common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
           "#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#9C755F", "#76B7B2", "#EDC948", "#FF9DA7")
DASHES = ("", "6 3", "2 3", "8 3 2 3")
MARKERS = ("circle", "square", "diamond", "triangle")


def style(i: int) -> tuple[str, str, str]:
    """(colour, dash pattern, marker) of series ``i``; combinations repeat only after 64 series."""
    return PALETTE[i % len(PALETTE)], DASHES[(i // len(PALETTE)) % len(DASHES)], MARKERS[(i // 4) % len(MARKERS)]


@dataclass
class Point:
    x: float
    y: float
    href: str | None = None
    tip: str = ""
    err: float | None = None   # symmetric error bar on y
    label: str | None = None


@dataclass
class Series:
    name: str
    points: list[Point] = field(default_factory=list)
    line: bool = True


def _nice(step: float) -> float:
    mag = 10 ** math.floor(math.log10(step))
    for m in (1, 2, 2.5, 5, 10):
        if step <= m * mag:
            return m * mag
    return 10 * mag


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = _nice((hi - lo) / max(1, n))
    start = math.floor(lo / step + 1e-9) * step
    out, k = [], 0
    # The last tick is the first at or above hi, so the axis always covers the data.
    while True:
        v = round(start + k * step, 12)
        out.append(v)
        if v >= hi - step * 1e-9 or k > 100:
            return out
        k += 1


def tick_label(v: float) -> str:
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e6 or a < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if a >= 1000:
        return f"{v:,.0f}"
    return f"{v:.6g}"


def _log2_label(v: float) -> str:
    iv = int(round(v))
    if iv >= 1024 and iv % 1024 == 0:
        return f"{iv // 1024}k"
    return str(iv)


def _marker(kind: str, x: float, y: float, color: str, r: float = 3.5) -> str:
    if kind == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" fill="{color}"/>'
    if kind == "diamond":
        return (f'<path d="M{x:.1f},{y - r * 1.3:.1f} L{x + r * 1.3:.1f},{y:.1f} L{x:.1f},{y + r * 1.3:.1f} '
                f'L{x - r * 1.3:.1f},{y:.1f} Z" fill="{color}"/>')
    if kind == "triangle":
        return (f'<path d="M{x:.1f},{y - r * 1.3:.1f} L{x + r * 1.2:.1f},{y + r:.1f} L{x - r * 1.2:.1f},{y + r:.1f} Z"'
                f' fill="{color}"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{color}"/>'


def _wrap_link(inner: str, href: str | None, tip: str) -> str:
    title = f"<title>{esc(tip)}</title>" if tip else ""
    if href:
        return f'<a href="{esc(href)}">{title}{inner}</a>'
    return f"<g>{title}{inner}</g>"


class _Frame:
    """Axes, scales and the plot area of one chart."""

    def __init__(self, width, height, xlo, xhi, ylo, yhi, xlog=False, left=64, right=16, top=16, bottom=48):
        self.w, self.h = width, height
        self.l, self.r, self.t, self.b = left, right, top, bottom
        self.xlog = xlog
        if xlog:
            xlo, xhi = math.log2(xlo), math.log2(xhi)
            if xhi - xlo < 1:
                xlo, xhi = xlo - 0.5, xhi + 0.5
        elif xhi <= xlo:
            xlo, xhi = xlo - 1, xhi + 1
        if yhi <= ylo:
            ylo, yhi = ylo - 1, yhi + 1
        self.xlo, self.xhi, self.ylo, self.yhi = xlo, xhi, ylo, yhi

    def X(self, x: float) -> float:
        v = math.log2(x) if self.xlog else x
        return self.l + (v - self.xlo) / (self.xhi - self.xlo) * (self.w - self.l - self.r)

    def Y(self, y: float) -> float:
        return self.h - self.b - (y - self.ylo) / (self.yhi - self.ylo) * (self.h - self.t - self.b)

    def axes(self, xlabel: str, ylabel: str, yticks: list[float], xticks: list[float] | None = None) -> list[str]:
        out = [f'<rect class="plot-bg" x="{self.l}" y="{self.t}" width="{self.w - self.l - self.r}" '
               f'height="{self.h - self.t - self.b}"/>']
        for v in yticks:
            y = self.Y(v)
            out.append(f'<line class="grid" x1="{self.l}" x2="{self.w - self.r}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text class="tick" x="{self.l - 6}" y="{y + 4:.1f}" text-anchor="end">'
                       f"{esc(tick_label(v))}</text>")
        if xticks is None:
            if self.xlog:
                xticks = [2.0 ** k for k in range(math.ceil(self.xlo), math.floor(self.xhi) + 1)]
                if len(xticks) > 9:
                    xticks = xticks[:: math.ceil(len(xticks) / 9)]
            else:
                xticks = [v for v in ticks(self.xlo, self.xhi, 6) if self.xlo <= v <= self.xhi]
        for v in xticks:
            x = self.X(v)
            out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{self.t}" y2="{self.h - self.b}"/>')
            label = _log2_label(v) if self.xlog else tick_label(v)
            out.append(f'<text class="tick" x="{x:.1f}" y="{self.h - self.b + 16}" text-anchor="middle">'
                       f"{esc(label)}</text>")
        out.append(f'<line class="axis" x1="{self.l}" x2="{self.w - self.r}" y1="{self.h - self.b}" '
                   f'y2="{self.h - self.b}"/>')
        out.append(f'<line class="axis" x1="{self.l}" x2="{self.l}" y1="{self.t}" y2="{self.h - self.b}"/>')
        out.append(f'<text class="axis-label" x="{(self.l + self.w - self.r) / 2:.1f}" y="{self.h - 10}" '
                   f'text-anchor="middle">{esc(xlabel)}</text>')
        cy = (self.t + self.h - self.b) / 2
        out.append(f'<text class="axis-label" x="14" y="{cy:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 14 {cy:.1f})">{esc(ylabel)}</text>')
        return out


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{esc(label)}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>")


def _legend(names: list[str], styles: list[tuple[str, str, str]]) -> str:
    items = []
    for name, (color, dash, marker) in zip(names, styles):
        swatch = (f'<svg class="swatch" viewBox="0 0 24 12" width="24" height="12" aria-hidden="true">'
                  f'<line x1="1" x2="23" y1="6" y2="6" stroke="{color}" stroke-width="2"'
                  + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
                  + _marker(marker, 12, 6, color, 3) + "</svg>")
        items.append(f"<li>{swatch}{esc(name)}</li>")
    return '<ul class="legend">' + "".join(items) + "</ul>"


def line_plot(series: list[Series], *, xlabel: str, ylabel: str, title: str, xlog: bool = False,
              hlines: list[tuple[float, str]] = (), width: int = 560, height: int = 300,
              ymin_zero: bool = True) -> str:
    """Lines (with markers) per series; ``hlines`` are labelled reference lines (e.g. the bandwidth ceiling)."""
    pts = [p for s in series for p in s.points if p.x is not None and p.y is not None]
    if xlog:
        pts = [p for p in pts if p.x > 0]
    if not pts:
        return ""
    xs = [p.x for p in pts]
    ys = [p.y for p in pts] + [v for v, _ in hlines]
    ylo = 0.0 if ymin_zero and min(ys) >= 0 else min(ys)
    yhi = max(ys)
    if not xlog and min(xs) == max(xs):
        xlo, xhi = min(xs) - 1, max(xs) + 1
    else:
        xlo, xhi = min(xs), max(xs)
    yt = ticks(ylo, yhi * 1.05 if yhi > 0 else yhi + 1)
    f = _Frame(width, height, xlo, xhi, yt[0], yt[-1], xlog=xlog)
    body = f.axes(xlabel, ylabel, yt)
    for value, label in hlines:
        y = f.Y(value)
        body.append(f'<line class="ref" x1="{f.l}" x2="{f.w - f.r}" y1="{y:.1f}" y2="{y:.1f}"/>')
        body.append(f'<text class="ref-label" x="{f.w - f.r - 4}" y="{y - 5:.1f}" text-anchor="end">'
                    f"{esc(label)}</text>")
    styles = []
    for i, s in enumerate(series):
        color, dash, marker = style(i)
        styles.append((color, dash, marker))
        sp = sorted((p for p in s.points if p.x is not None and p.y is not None and (p.x > 0 or not xlog)),
                    key=lambda p: p.x)
        if s.line and len(sp) > 1:
            d = " ".join(f"{'M' if j == 0 else 'L'}{f.X(p.x):.1f},{f.Y(p.y):.1f}" for j, p in enumerate(sp))
            body.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.8"'
                        + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        if len(sp) <= 60 or not s.line:
            for p in sp:
                body.append(_wrap_link(_marker(marker, f.X(p.x), f.Y(p.y), color), p.href, p.tip))
    legend = _legend([s.name for s in series], styles) if len(series) > 1 or hlines else ""
    return (f'<figure class="plot">{_svg(width, height, body, title)}'
            f'<figcaption><span class="plot-title">{esc(title)}</span>{legend}</figcaption></figure>')


def bar_chart(items: list[tuple[str, float, str | None, str, bool]], *, xlabel: str, title: str,
              ref: tuple[float, str] | None = None, width: int = 560, value_fmt=None) -> str:
    """Horizontal bars, one per (label, value, href, tooltip, flagged); ``ref`` draws a labelled vertical line."""
    # Long labels are cut so the bars keep their room; the full text stays in the tooltip.
    items = [((it[0][:34] + "…") if len(it[0]) > 35 else it[0], it[1], it[2],
              f"{it[0]}: {it[3]}" if it[3] else it[0], it[4])
             for it in items if it[1] is not None]
    if not items:
        return ""
    bar, gap = 16, 6
    left = min(260, 14 + 7 * max(len(it[0]) for it in items))
    height = 28 + 40 + len(items) * (bar + gap)
    hi = max([it[1] for it in items] + ([ref[0]] if ref else []))
    xt = ticks(0, hi * 1.08 if hi > 0 else 1)
    f = _Frame(width, height, xt[0], xt[-1], 0, 1, left=left, right=60, top=24, bottom=40)
    body = [f'<rect class="plot-bg" x="{f.l}" y="{f.t}" width="{f.w - f.l - f.r}" height="{f.h - f.t - f.b}"/>']
    for v in xt:
        x = f.X(v)
        body.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{f.t}" y2="{f.h - f.b}"/>')
        body.append(f'<text class="tick" x="{x:.1f}" y="{f.h - f.b + 16}" text-anchor="middle">'
                    f"{esc(tick_label(v))}</text>")
    for i, (label, value, href, tip, flagged) in enumerate(items):
        y = f.t + gap / 2 + i * (bar + gap)
        w = max(1.0, f.X(value) - f.l)
        cls = "bar flagged" if flagged else "bar"
        shown = value_fmt(value) if value_fmt else tick_label(value)
        inner = (f'<rect class="{cls}" x="{f.l}" y="{y:.1f}" width="{w:.1f}" height="{bar}"/>'
                 f'<text class="bar-value" x="{f.l + w + 4:.1f}" y="{y + bar - 4:.1f}">{esc(shown)}</text>')
        body.append(f'<text class="bar-label" x="{f.l - 6}" y="{y + bar - 4:.1f}" text-anchor="end">'
                    f"{esc(label)}</text>")
        body.append(_wrap_link(inner, href, tip))
    if ref:
        x = f.X(ref[0])
        body.append(f'<line class="ref" x1="{x:.1f}" x2="{x:.1f}" y1="{f.t - 6}" y2="{f.h - f.b}"/>')
        body.append(f'<text class="ref-label" x="{x:.1f}" y="{f.t - 10}" text-anchor="middle">{esc(ref[1])}</text>')
    body.append(f'<line class="axis" x1="{f.l}" x2="{f.l}" y1="{f.t}" y2="{f.h - f.b}"/>')
    body.append(f'<text class="axis-label" x="{(f.l + f.w - f.r) / 2:.1f}" y="{f.h - 8}" text-anchor="middle">'
                f"{esc(xlabel)}</text>")
    return (f'<figure class="plot">{_svg(width, height, body, title)}'
            f'<figcaption><span class="plot-title">{esc(title)}</span></figcaption></figure>')


def pareto_plot(points: list[Point], front: list[int], *, xlabel: str, ylabel: str, title: str,
                higher_is_better: bool = True, width: int = 560, height: int = 320, xlog: bool = False) -> str:
    """A labelled scatter (with y error bars) and the Pareto front as a step line."""
    pts = [p for p in points if p.x is not None and p.y is not None and (p.x > 0 or not xlog)]
    if not pts:
        return ""
    xs = [p.x for p in pts]
    lows = [p.y - (p.err or 0) for p in pts]
    highs = [p.y + (p.err or 0) for p in pts]
    span = (max(highs) - min(lows)) or abs(max(highs)) or 1.0
    yt = ticks(min(lows) - 0.05 * span, max(highs) + 0.08 * span)
    xlo, xhi = min(xs), max(xs)
    if not xlog:
        pad = (xhi - xlo) * 0.08 or (abs(xlo) * 0.1 or 1.0)
        xlo, xhi = max(0.0, xlo - pad) if xlo >= 0 else xlo - pad, xhi + pad
        xt = [v for v in ticks(xlo, xhi, 6)]
        xlo, xhi = xt[0], xt[-1]
    f = _Frame(width, height, xlo, xhi, yt[0], yt[-1], xlog=xlog, right=24)
    body = f.axes(xlabel, ylabel, yt, None if xlog else [v for v in ticks(xlo, xhi, 6) if xlo <= v <= xhi])
    fp = [points[i] for i in front if points[i] in pts]
    if len(fp) > 1:
        d = []
        for j, p in enumerate(fp):
            if j == 0:
                d.append(f"M{f.X(p.x):.1f},{f.Y(p.y):.1f}")
            else:
                d.append(f"H{f.X(p.x):.1f} V{f.Y(p.y):.1f}")
        body.append(f'<path class="front" d="{" ".join(d)}" fill="none"/>')
    on_front = {id(p) for p in fp}
    placed: list[tuple[float, float, float, float]] = []
    for p in pts:
        x, y = f.X(p.x), f.Y(p.y)
        inner = ""
        if p.err:
            inner += (f'<line class="errbar" x1="{x:.1f}" x2="{x:.1f}" y1="{f.Y(p.y - p.err):.1f}" '
                      f'y2="{f.Y(p.y + p.err):.1f}"/>')
        cls = "pt front-pt" if id(p) in on_front else "pt"
        inner += f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="4.5"/>'
        if p.label:
            anchor = "end" if x > f.w - 110 else "start"
            dx = -7 if anchor == "end" else 7
            wl = 6.2 * len(p.label)
            x0 = x + dx - (wl if anchor == "end" else 0)
            # Nudge a label up or down until it clears the ones already placed (points often crowd).
            for dy in (-6, 14, -18, 26, -30, 38, -42, 50):
                box = (x0, y + dy - 10, x0 + wl, y + dy + 2)
                if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                    break
            placed.append(box)
            inner += (f'<text class="pt-label" x="{x + dx:.1f}" y="{y + dy:.1f}" text-anchor="{anchor}">'
                      f"{esc(p.label)}</text>")
        body.append(_wrap_link(inner, p.href, p.tip))
    note = "better: up and left" if higher_is_better else "better: down and left"
    return (f'<figure class="plot">{_svg(width, height, body, title)}'
            f'<figcaption><span class="plot-title">{esc(title)}</span> <span class="muted">'
            f"Pareto front in bold ({esc(note)}); bars are 95 % confidence intervals.</span></figcaption></figure>")
