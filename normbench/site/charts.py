"""Leaderboard charts: Vega-Lite specifications built with Altair, rendered to static SVG at build time.

Every builder takes a pandas DataFrame and returns an Altair chart; ``render`` turns a chart into a ``Figure``: the
SVG drawn by vl-convert (the page reads with JavaScript off) and the Vega-Lite spec that ``assets/charts.js``
upgrades into an interactive vega-embed view (tooltips, click a mark to open its record) under the site's strict
Content-Security-Policy. Altair, vl-convert's compiler and the vendored Vega-Lite are pinned to the same Vega-Lite
version (``VEGALITE_VERSION``; see ``scripts/vendor_vega.py``).
"""

from __future__ import annotations

import html
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pandas as pd

# Must equal alt.SCHEMA_VERSION and the vendored vega-lite.min.js (assets/vendor/VERSIONS.json); tests check both.
VEGALITE_VERSION = "6.4.1"
VL_CONVERT_VERSION = ".".join(VEGALITE_VERSION.split(".")[:2])   # vl-convert selects its compiler by major.minor

ASSETS = Path(__file__).resolve().parent / "assets"
# Site-relative paths, in load order (all ``defer``); the templates iterate over these.
SCRIPTS = ("assets/vendor/vega.min.js", "assets/vendor/vega-lite.min.js", "assets/vendor/vega-interpreter.js",
           "assets/vendor/vega-embed.min.js", "assets/charts.js")
STYLES = ("assets/vendor/vega-embed.css", "assets/vendor/vega-tooltip.css", "assets/charts.css")
# Shipped beside the scripts: the licences of the vendored code and the pinned versions.
LICENSES = ("assets/vendor/vega.LICENSE", "assets/vendor/vega-lite.LICENSE", "assets/vendor/vega-embed.LICENSE",
            "assets/vendor/vega-tooltip.LICENSE", "assets/vendor/VERSIONS.json")

# Okabe-Ito: distinguishable for the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
WIDTH, HEIGHT = 300, 200           # one panel, in pixels
LABEL_FONT_SIZE = 11
RANKED = "datum.flags == '' || datum.flags == null"


def asset_files() -> dict[str, Path]:
    """Every file the pages need from this module, site-relative path -> source file (the build copies them)."""
    return {rel: ASSETS / rel.removeprefix("assets/") for rel in SCRIPTS + STYLES + LICENSES}


@dataclass(frozen=True)
class Figure:
    """One chart ready for a page: static SVG, the Vega-Lite spec, and the HTML fragment holding both."""

    svg: str    # static SVG rendered at build time by vl-convert (readable with JS off; hostile text escaped)
    spec: str   # the Vega-Lite JSON spec (data inlined), safe to embed in <script type="application/json">
    html: str   # <figure class="nb-chart" id=...><div class="nb-static">SVG</div><script class="nb-spec">...


# --------------------------------------------------------------------------------------------------------------
# data hygiene


_SAFE_REL = re.compile(r"^[A-Za-z0-9_.~/%+-]+(?:[?#][A-Za-z0-9_.~/%+=&#-]*)?$")


def safe_href(url) -> str | None:
    """``url`` if it is a site-relative path or an absolute http(s) link, else ``None`` (no javascript:, data:,
    protocol-relative ``//host`` or anything with a scheme we do not know). The site builds record URLs itself;
    this is the last guard before a URL becomes a clickable mark."""
    if not isinstance(url, str) or not url or len(url) > 2000:
        return None
    if re.match(r"^https?://[^\s/]+[^\s<>\"'`]*$", url, re.I):
        return url
    if url.startswith("//") or ":" in url.split("/", 1)[0] or not _SAFE_REL.match(url):
        return None
    return url


def _clean(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The columns the chart uses, with URLs vetted and NaN/inf turned into nulls (JSON has no NaN)."""
    out = df.loc[:, [c for c in columns if c in df.columns]].copy()
    if "url" in out.columns:
        out["url"] = out["url"].map(safe_href)
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c]):
            col = out[c].astype(object)
            out[c] = col.where(col.map(lambda v: v is not None and math.isfinite(v)), None)
    return out.reset_index(drop=True)


def no_data_chart(title: str = "", message: str = "no data") -> alt.Chart:
    """An explicit "no data" figure: a framed panel with the message, never an empty frame or an error."""
    return (alt.Chart(pd.DataFrame({"message": [message]}))
            .mark_text(fontSize=14, color="#555")
            .encode(text="message:N")
            .properties(width=WIDTH, height=60, title=title or "",
                        description=f"{title}: {message}" if title else message))


def _tip(field: str, title: str, fmt: str | None = None, typ: str = "N") -> alt.Tooltip:
    return alt.Tooltip(f"{field}:{typ}", title=title, **({"format": fmt} if fmt else {}))


# --------------------------------------------------------------------------------------------------------------
# builders

KERNEL_COLUMNS = ["width", "rows", "gbps", "pct_ceiling", "ceiling_gbps", "backend", "dtype", "pass_", "device",
                  "median_s", "flags", "url", "label"]


def _kernel_tooltip() -> list[alt.Tooltip]:
    return [_tip("label", "record"), _tip("backend", "backend"), _tip("dtype", "dtype"), _tip("pass_", "pass"),
            _tip("device", "device"), _tip("width", "hidden size", "d", "Q"), _tip("rows", "rows", "d", "Q"),
            _tip("gbps", "GB/s", ".4~g", "Q"), _tip("pct_ceiling", "% of ceiling", ".3~g", "Q"),
            _tip("median_s", "median time (s)", ".3~g", "Q"), _tip("flags", "flags")]


def _title(title: str, data: pd.DataFrame) -> alt.TitleParams | str:
    """The title, with a subtitle saying what the hollow triangles are when any record is flagged."""
    n = int((data["flags"] != "").sum())
    if not n:
        return title or ""
    return alt.TitleParams(text=title or "", subtitle=f"△ {n} flagged record{'s' * (n > 1)}: shown, never ranked",
                           anchor="start")


def _kernel_marks() -> dict:
    """Tooltip, link and accessible name of a kernel record's point (the name is the one-line label, so the
    static SVG's aria-labels stay short)."""
    return {"tooltip": _kernel_tooltip(), "href": "url:N", "description": "label:N"}


def _record_layers(base: alt.Chart, data: pd.DataFrame, *, x, y, color, pick: str, **line) -> list[alt.Chart]:
    """Ranked records as points on lines, flagged ones as hollow triangles on none; clicking a legend entry of
    ``pick`` (the colour field) fades the other series. A layer with no rows is left out (Vega warns about the
    infinite extent of an empty layer's scale domain)."""
    n_flagged = int((data["flags"] != "").sum())
    sel = alt.selection_point(fields=[pick], bind="legend", name="pick")
    fade = alt.condition(sel, alt.value(1.0), alt.value(0.12))
    layers = []
    if n_flagged < len(data):
        ranked = base.transform_filter(RANKED)
        # Named, as every layer here: Altair would name the legend selection's view by a hash of the layer's data
        # (its text), which no spec made for other rows of the same structure could share.
        layers += [ranked.mark_line(strokeWidth=1.5).encode(x=x, y=y, color=color, opacity=fade, **line)
                   .properties(name="lines"),
                   ranked.mark_point(filled=True, size=40).encode(
                       x=x, y=y, color=color, opacity=fade, **_kernel_marks()).properties(name="points")]
    if n_flagged:
        layers.append(base.transform_filter(f"!({RANKED})").mark_point(
            filled=False, shape="triangle-up", size=60, strokeWidth=1.5).encode(
            x=x, y=y, color=color, opacity=fade, **_kernel_marks()).properties(name="flagged"))
    layers[0] = layers[0].add_params(sel)
    return layers


def _x_width(widths) -> alt.X:
    """Hidden size on a log2 axis, ticks at the measured widths (a sweep's widths are powers of two or LLM sizes)."""
    ticks = sorted({int(w) for w in widths if w and w > 0})
    return alt.X("width:Q", title="hidden size (log2 scale)",
                 scale=alt.Scale(type="log", base=2, nice=False, padding=12),
                 axis=alt.Axis(values=ticks, format="d", labelOverlap="greedy", labelAngle=-45 if len(ticks) > 6
                               else 0))


def kernel_width_chart(df: pd.DataFrame, *, metric: str = "gbps", title: str = "") -> alt.Chart:
    """One norm on one device: ``metric`` (GB/s or % of the same-run ceiling) against hidden size, one line per
    backend, one panel per dtype (rows) and pass (columns); the measured ceiling as a dashed rule for GB/s.
    Flagged records are drawn as hollow triangles joined by no line (they are never ranked)."""
    data = _kernel_width_data(df, metric)
    if data.empty:
        return no_data_chart(title)
    return _kernel_width_chart(data, metric, title)


def _kernel_width_data(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The rows ``kernel_width_chart`` draws: the columns it uses, links vetted, the rows with ``metric``."""
    if metric not in ("gbps", "pct_ceiling"):
        raise ValueError(f"metric must be 'gbps' or 'pct_ceiling', not {metric!r}")
    data = _clean(df, KERNEL_COLUMNS)
    data = data[data[metric].notna()] if metric in data.columns else data.iloc[0:0]
    if data.empty:
        return data
    if "flags" not in data.columns:
        data["flags"] = ""
    data["flags"] = data["flags"].fillna("")
    return data


#: Specs of ``kernel_width_chart`` by everything in them but their data (``kernel_width_chart_spec``), per process.
_WIDTH_SPECS: dict[tuple, dict] = {}


def kernel_width_chart_spec(df: pd.DataFrame, *, metric: str = "gbps", title: str = "") -> dict:
    """``kernel_width_chart(df, ...).to_dict(validate=False)``, with Altair's work done once per structure.

    A site draws the same figure (a norm, layout and metric) on each device: the specs differ only in their data
    set. Everything else the builder takes from the data is in the key (the columns, the ticks at the measured
    widths, the number of flagged records, whether any is ranked, whether a ceiling is known); the spec of a known
    key gets the new data set, as Altair writes it (its values and its name, the hash of the values, from a
    one-mark chart of the same rows). ``tests/test_site_charts.py`` compares this with Altair's own spec."""
    data = _kernel_width_data(df, metric)
    if data.empty:
        return no_data_chart(title).to_dict(validate=False)
    n_flagged = int((data["flags"] != "").sum())
    key = (metric, title, tuple(data.columns), tuple(sorted({int(w) for w in data["width"] if w and w > 0})),
           n_flagged, n_flagged < len(data),
           metric == "gbps" and "ceiling_gbps" in data.columns and bool(data["ceiling_gbps"].notna().any()))
    known = _WIDTH_SPECS.get(key)
    if known is None or len(known.get("datasets") or {}) != 1:
        spec = _kernel_width_chart(data, metric, title).to_dict(validate=False)
        if len(spec.get("datasets") or {}) == 1:
            _WIDTH_SPECS[key] = json.loads(json.dumps(spec))
        return spec
    ((old, _),) = known["datasets"].items()
    ((new, values),) = alt.Chart(data).mark_point().to_dict(validate=False)["datasets"].items()
    text = json.dumps({k: v for k, v in known.items() if k != "datasets"}).replace(json.dumps(old), json.dumps(new))
    rest = json.loads(text)
    return {k: ({new: values} if k == "datasets" else rest[k]) for k in known}


def _kernel_width_chart(data: pd.DataFrame, metric: str, title: str) -> alt.Chart:
    y_title = "GB/s" if metric == "gbps" else "% of measured ceiling"
    x, y = _x_width(data["width"]), alt.Y(f"{metric}:Q", title=y_title)
    colour = alt.Color("backend:N", title="backend", scale=alt.Scale(range=PALETTE))
    base = alt.Chart(data)
    # One line per backend and row count: records of other row counts at the same width are other curves.
    layers = _record_layers(base, data, x=x, y=y, color=colour, pick="backend", detail=["backend:N", "rows:N"])
    if metric == "gbps" and "ceiling_gbps" in data.columns and data["ceiling_gbps"].notna().any():
        layers.append(base.mark_rule(strokeDash=[4, 3], color="#777").encode(
            y="max(ceiling_gbps):Q", tooltip=[alt.Tooltip("max(ceiling_gbps):Q", title="measured ceiling (GB/s)",
                                                          format=".4~g")]))
    elif metric == "pct_ceiling":   # 100 % is the same-run ceiling; a point above it read from cache
        layers.append(base.transform_aggregate(n="count()").mark_rule(strokeDash=[4, 3], color="#777").encode(
            y=alt.datum(100.0)))
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    return chart.facet(row=alt.Row("dtype:N", title="dtype"), column=alt.Column("pass_:N", title="pass")).properties(
        title=_title(title, data), description=title or f"{y_title} against hidden size")


def device_compare_chart(df: pd.DataFrame, *, title: str = "") -> alt.Chart:
    """Several devices: % of each run's measured ceiling against hidden size, one line per device and dtype/pass
    (dash), one panel per backend. The percentage is the one measure that compares machines of different
    bandwidth; flagged records are hollow triangles on no line."""
    data = _clean(df, KERNEL_COLUMNS)
    data = data[data["pct_ceiling"].notna()] if "pct_ceiling" in data.columns else data.iloc[0:0]
    if data.empty:
        return no_data_chart(title)
    data["flags"] = data["flags"].fillna("") if "flags" in data.columns else ""
    data["case"] = data["dtype"].astype(str) + " · " + data["pass_"].astype(str)
    x, y = _x_width(data["width"]), alt.Y("pct_ceiling:Q", title="% of measured ceiling")
    colour = alt.Color("device:N", title="device", scale=alt.Scale(range=PALETTE))
    dash = alt.StrokeDash("case:N", title="dtype · pass")
    layers = _record_layers(alt.Chart(data), data, x=x, y=y, color=colour, pick="device", strokeDash=dash,
                            detail=["case:N", "rows:N"])
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    return chart.facet(facet=alt.Facet("backend:N", title="backend"), columns=3).properties(
        title=_title(title, data), description=title or "% of measured ceiling against hidden size, per device")


ACCURACY_COLUMNS = ["norm", "order", "seed", "value", "diverged", "centre", "ci_lo", "ci_hi", "lr", "url", "label"]


def _norm_axis_label(norm: str, lr, n_div: int, n: int) -> str:
    parts = [str(norm)]
    if lr is not None and isinstance(lr, (int, float)) and math.isfinite(lr):
        parts.append(f"lr {lr:.2g}")
    if n_div:
        parts.append(f"✗ {n_div}/{n} diverged")
    return " · ".join(parts)


def accuracy_seed_chart(df: pd.DataFrame, *, metric: str, higher_is_better: bool, title: str = "") -> alt.Chart:
    """One task cell: each seed's final ``metric`` per norm (points side by side), the interval ``ci_lo..ci_hi``
    as a bar and ``centre`` as a tick; diverged seeds are red crosses on the worst edge of the axis (bottom when
    higher is better), seeds that finished without a value grey rings there. The axis label of each norm carries
    its learning rate and divergence count."""
    data = _clean(df, ACCURACY_COLUMNS)
    if data.empty:
        return no_data_chart(title)
    data["diverged"] = data["diverged"].fillna(False).astype(bool) if "diverged" in data.columns else False
    for c in ("value", "centre", "ci_lo", "ci_hi", "lr"):
        if c not in data.columns:
            data[c] = None
    data = data.sort_values(["order", "norm", "seed"], kind="stable").reset_index(drop=True)
    counts = data.groupby("norm", sort=False)["diverged"].agg(["sum", "size"])
    lrs = data.groupby("norm", sort=False)["lr"].first()
    data["norm_label"] = [_norm_axis_label(n, lrs[n], int(counts.loc[n, "sum"]), int(counts.loc[n, "size"]))
                          for n in data["norm"]]
    order = list(dict.fromkeys(data["norm_label"]))
    finite = data[~data["diverged"] & data["value"].notna()].copy()
    shown = pd.concat([finite["value"], data["centre"], data["ci_lo"], data["ci_hi"]]).dropna().astype(float)
    lo, hi = (float(shown.min()), float(shown.max())) if len(shown) else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    # Diverged seeds, and seeds with no final value, sit on the worst edge: seen, never read as a number.
    edge = lo if higher_is_better else hi
    dvg = data[data["diverged"]].assign(edge=edge, status="diverged")
    missing = data[~data["diverged"] & data["value"].isna()].assign(edge=edge, status="no final value")
    cells = data.drop_duplicates("norm").copy()
    cells = cells[cells["ci_lo"].notna() & cells["ci_hi"].notna()]
    x = alt.X("norm_label:N", title=None, sort=order, axis=alt.Axis(labelAngle=-30, labelLimit=260))
    x_mid = alt.X("norm_label:N", title=None, sort=order, bandPosition=0.5)   # interval and centre mid-band
    y_scale = alt.Scale(domain=[lo, hi], nice=False, zero=False)
    y_title = f"{metric} ({'higher' if higher_is_better else 'lower'} is better)"
    tip = [_tip("label", "run"), _tip("norm", "norm"), _tip("seed", "seed", "d", "Q"),
           _tip("value", metric, ".5~g", "Q"), _tip("lr", "learning rate", ".3~g", "Q")]
    layers = []
    if not cells.empty:
        layers.append(alt.Chart(cells).mark_rule(strokeWidth=3, opacity=0.45, color="#333").encode(
            x=x_mid, y=alt.Y("ci_lo:Q", scale=y_scale, title=y_title), y2="ci_hi:Q",
            tooltip=[_tip("norm", "norm"), _tip("centre", "centre", ".5~g", "Q"),
                     _tip("ci_lo", "95% CI low", ".5~g", "Q"), _tip("ci_hi", "95% CI high", ".5~g", "Q")],
        ).properties(name="interval"))
    centres = data.drop_duplicates("norm")
    centres = centres[centres["centre"].notna()]
    if not centres.empty:
        layers.append(alt.Chart(centres).mark_tick(thickness=2, color="#000").encode(
            x=x_mid, y=alt.Y("centre:Q", scale=y_scale, title=y_title)).properties(name="centre"))
    if not finite.empty:
        layers.append(alt.Chart(finite).mark_point(filled=True, size=45, opacity=0.9).encode(
            x=x, xOffset=alt.XOffset("seed:N"), y=alt.Y("value:Q", scale=y_scale, title=y_title),
            color=alt.value(PALETTE[0]), tooltip=tip, href="url:N", description="label:N").properties(name="seeds"))
    edge_tip = [_tip("label", "run"), _tip("norm", "norm"), _tip("seed", "seed", "d", "Q"), _tip("status", "status")]
    for rows, name, mark in ((dvg, "diverged", dict(shape="cross", filled=True, size=70, color="#C00")),
                             (missing, "missing", dict(shape="circle", filled=False, size=50, color="#777"))):
        if not rows.empty:
            layers.append(alt.Chart(rows).mark_point(opacity=1, **mark).encode(
                x=x, xOffset=alt.XOffset("seed:N"), y=alt.Y("edge:Q", scale=y_scale, title=y_title),
                tooltip=edge_tip, href="url:N", description="label:N").properties(name=name))
    return alt.layer(*layers).properties(width=max(WIDTH, 60 * len(order)), height=HEIGHT + 40,
                                         title=title or "", description=title or f"final {metric} per seed")


#: A run's curve holds at most about this many points in a figure (min-max decimation; the records keep every step).
CURVE_POINTS = 200


def thin_curve(data: pd.DataFrame, max_points: int = CURVE_POINTS) -> pd.DataFrame:
    """Min-max decimation of one run's curve (sorted by step): the steps split into ``max_points // 2`` buckets,
    each keeps its lowest and its highest value, and the first and last points stay. Spikes (a loss that blows
    up) survive, which plain striding would skip; runs already short enough are returned as they are."""
    n = len(data)
    if n <= max_points:
        return data
    buckets = max(1, max_points // 2)
    edges = [round(i * n / buckets) for i in range(buckets + 1)]
    keep = {0, n - 1}
    values = data["value"].astype(float).to_numpy()
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi > lo:
            seg = values[lo:hi]
            keep.add(lo + int(seg.argmin()))
            keep.add(lo + int(seg.argmax()))
    return data.iloc[sorted(keep)]


def training_curves_chart(df: pd.DataFrame, *, metric: str, log_y: bool = False, title: str = "") -> alt.Chart:
    """Training curves overlaid: ``metric`` against step, one line per norm (colour) and seed. On a log axis the
    non-positive values are left out (they have no place there) and the title says how many."""
    data = _clean(df, ["norm", "seed", "step", "value", "url"])
    if not data.empty:
        data = data[data["value"].notna() & data["step"].notna()]
    dropped = 0
    if log_y and not data.empty:
        keep = data["value"].astype(float) > 0
        dropped, data = int((~keep).sum()), data[keep]
    if data.empty:
        return no_data_chart(title)
    data = data.sort_values(["norm", "seed", "step"], kind="stable").reset_index(drop=True)
    longest = int(data.groupby(["norm", "seed"])["step"].size().max())
    if longest > CURVE_POINTS:
        data = pd.concat([thin_curve(g) for _, g in data.groupby(["norm", "seed"], sort=False)], ignore_index=True)
    y = alt.Y("value:Q", title=metric, scale=alt.Scale(type="log") if log_y else alt.Scale(zero=False))
    sel = alt.selection_point(fields=["norm"], bind="legend", name="pick")   # click a norm in the legend
    enc = dict(x=alt.X("step:Q", title="step"), y=y,
               color=alt.Color("norm:N", title="norm", scale=alt.Scale(range=PALETTE)),
               opacity=alt.condition(sel, alt.value(0.85), alt.value(0.08)),
               tooltip=[_tip("norm", "norm"), _tip("seed", "seed", "d", "Q")], href="url:N")
    chart = alt.Chart(data).mark_line(strokeWidth=1.2).encode(detail="seed:N", **enc).add_params(sel).properties(
        name="curves")
    lone = data.groupby(["norm", "seed"])["step"].transform("size") == 1
    if lone.any():   # a run with one logged step is a point: a line through one point draws nothing
        chart = chart + alt.Chart(data[lone]).mark_point(filled=True, size=30).encode(**enc).properties(
            name="lone")
    note = f" ({dropped} non-positive values not drawn on the log axis)" if dropped else ""
    if longest > CURVE_POINTS:
        note += f" (each run drawn with at most {CURVE_POINTS} of its {longest} logged points: lowest and highest " \
                "per step range, so spikes stay; the records hold every point)"
    return chart.properties(width=WIDTH * 2, height=HEIGHT + 40, title=(title or "") + note,
                            description=(title or f"{metric} against step") + note)


# Conservative advance widths (em) of the site's sans-serif, so estimated label boxes are never smaller than drawn.
_NARROW, _SEMI, _WIDE = set("ijl.,:;'|!()[]{}/\\ `"), set("ftrI-1"), set("mwMW@%")


def text_width(text: str, size: float = LABEL_FONT_SIZE) -> float:
    """Upper estimate of ``text``'s width in pixels at ``size`` px (DejaVu/Liberation Sans metrics, rounded up)."""
    em = 0.0
    for ch in str(text):
        em += (0.36 if ch in _NARROW else 0.5 if ch in _SEMI else 1.0 if ch in _WIDE
               else 0.8 if ch.isupper() else 0.66 if ch.isascii() else 1.05)
    return em * size + 2


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(px, py, texts, width: float, height: float, size: float = LABEL_FONT_SIZE,
                 point_radius: float = 5.0) -> list[tuple[float, float, float, float]]:
    """Top-left corners and sizes ``(x, y, w, h)`` of one label per point, in pixels, such that no two labels and
    no label and point overlap. Deterministic: points are taken in a fixed order and each label takes the first
    free candidate on rings of growing radius around its point; a label that finds no room inside the plot goes
    to a list below it (always free). Labels that stand away from their point get a leader line (see caller)."""
    h = size * 1.25
    pts = [(x - point_radius, y - point_radius, x + point_radius, y + point_radius) for x, y in zip(px, py)]
    placed: list[tuple[float, float, float, float]] = []
    out: list[tuple[float, float, float, float] | None] = [None] * len(texts)
    below = height + 34.0   # under the axis title
    for i in sorted(range(len(texts)), key=lambda k: (py[k], px[k], str(texts[k]))):
        w = text_width(texts[i], size)
        x0, y0 = px[i], py[i]
        spot = None
        for r in (3.0, 8.0, 14.0, 22.0, 32.0, 46.0, 64.0, 90.0):
            d = point_radius + r
            for cx, cy in ((x0 + d, y0 - h / 2), (x0 - d - w, y0 - h / 2), (x0 - w / 2, y0 - d - h),
                           (x0 - w / 2, y0 + d), (x0 + d * .7, y0 - d * .7 - h), (x0 - d * .7 - w, y0 - d * .7 - h),
                           (x0 + d * .7, y0 + d * .7), (x0 - d * .7 - w, y0 + d * .7)):
                box = (cx, cy, cx + w, cy + h)
                if box[0] < 0 or box[1] < 0 or box[2] > width or box[3] > height:
                    continue
                if any(_overlaps(box, b) for b in placed) or any(_overlaps(box, p) for p in pts):
                    continue
                spot = box
                break
            if spot:
                break
        if spot is None:
            spot = (0.0, below, w, below + h)
            below += h + 2
        placed.append(spot)
        out[i] = (spot[0], spot[1], w, h)
    return out


def scatter_chart(df: pd.DataFrame, *, x: str, y: str, label: str, x_title: str, y_title: str,
                  title: str = "") -> alt.Chart:
    """Labelled points (e.g. training time against quality). Labels are placed in Python (``place_labels``) at
    fixed pixel positions, so they never overlap each other or a point, in the static SVG and the live view.
    An optional boolean column ``front`` marks the Pareto front, drawn as a dashed line through those points."""
    cols = [c for c in dict.fromkeys([x, y, label, "url", "label", "front"]) if c in df.columns]
    data = _clean(df, cols)
    if not data.empty:
        data = data[data[x].notna() & data[y].notna()].reset_index(drop=True)
    if data.empty:
        return no_data_chart(title)
    w, h = WIDTH * 2, HEIGHT + 100

    def domain(v):
        lo, hi = float(v.min()), float(v.max())
        pad = (hi - lo) * 0.06 or abs(hi) * 0.05 or 1.0
        return lo - pad, hi + pad

    (xl, xh), (yl, yh) = domain(data[x].astype(float)), domain(data[y].astype(float))
    px = [(float(v) - xl) / (xh - xl) * w for v in data[x]]
    py = [h - (float(v) - yl) / (yh - yl) * h for v in data[y]]
    texts = [str(t) for t in data[label]]
    boxes = place_labels(px, py, texts, w, h)
    lab = pd.DataFrame({"text": texts, "lx": [b[0] for b in boxes], "ly": [b[1] for b in boxes],
                        "px": px, "py": py})
    # A label that had to move away from its point is tied to it by a leader line.
    far = [math.hypot(b[0] + b[2] / 2 - p, b[1] + b[3] / 2 - q) > 40 for b, p, q in zip(boxes, px, py)]
    lead = lab[far].assign(ex=[b[0] + b[2] / 2 for b, f in zip(boxes, far) if f],
                           ey=[b[1] + b[3] / 2 for b, f in zip(boxes, far) if f])
    tips = [_tip(label, label), _tip(x, x_title, ".4~g", "Q"), _tip(y, y_title, ".4~g", "Q")]
    if "label" in data.columns and label != "label":
        tips.insert(0, _tip("label", "run"))
    layers = []
    if "front" in data.columns:   # optional column: the points on the Pareto front, joined in x order
        front = data[data["front"].fillna(False).astype(bool)]
        if len(front) > 1:
            layers.append(alt.Chart(front.sort_values(x)).mark_line(color="#999", strokeDash=[5, 3]).encode(
                x=f"{x}:Q", y=f"{y}:Q", order=f"{x}:Q").properties(name="front"))
    layers += [alt.Chart(data).mark_point(filled=True, size=50, opacity=1, color=PALETTE[0]).encode(
        x=alt.X(f"{x}:Q", title=x_title, scale=alt.Scale(domain=[xl, xh], nice=False, zero=False)),
        y=alt.Y(f"{y}:Q", title=y_title, scale=alt.Scale(domain=[yl, yh], nice=False, zero=False)),
        tooltip=tips, description=f"{label}:N",
        **({"href": "url:N"} if "url" in data.columns else {})).properties(name="points")]
    if not lead.empty:
        layers.append(alt.Chart(lead).mark_rule(color="#999", strokeWidth=0.8).encode(
            x=alt.X("px:Q", scale=None), y=alt.Y("py:Q", scale=None), x2="ex:Q", y2="ey:Q"))
    layers.append(alt.Chart(lab).mark_text(align="left", baseline="top", fontSize=LABEL_FONT_SIZE,
                                           color="#222").encode(
        x=alt.X("lx:Q", scale=None), y=alt.Y("ly:Q", scale=None), text="text:N").properties(name="labels"))
    # Vega's default autosize ("pad") grows the view to hold labels listed below the plot.
    return alt.layer(*layers).properties(width=w, height=h, title=title or "",
                                         description=title or f"{y_title} against {x_title}")


# --------------------------------------------------------------------------------------------------------------
# rendering

_ALLOWED_SVG = {"svg", "g", "path", "rect", "line", "text", "tspan", "title", "desc", "defs", "clipPath", "circle",
                "a", "image", "linearGradient", "radialGradient", "stop", "pattern"}


def _audit_svg(svg: str) -> None:
    """Refuse an SVG with anything that could run: unknown elements, event handlers, script-capable links."""
    root = ET.fromstring(svg)
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag not in _ALLOWED_SVG:
            raise ValueError(f"vl-convert produced an unexpected <{tag}> element")
        for k, v in el.attrib.items():
            name = k.rsplit("}", 1)[-1].lower()
            if name.startswith("on") or name == "style":
                raise ValueError(f"vl-convert produced an attribute {name!r}")
            if name == "href" and tag != "image" and safe_href(v) is None:
                raise ValueError("vl-convert produced a link that is not a site path or http(s) URL")
            if tag == "image" and name == "href" and not v.startswith("data:image/"):
                raise ValueError("vl-convert produced an external image")


def spec_json(spec: dict) -> str:
    """The spec as JSON that cannot end its <script> element or open a comment: ``<``, ``>`` and ``&`` become
    ``\\u003c``, ``\\u003e``, ``\\u0026`` (still the same JSON value)."""
    text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


_SENTINEL = "https://nb.invalid/link/"


def _rows(spec: dict):
    """Every inline data row of a (possibly nested) spec."""
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "datasets" and isinstance(v, dict):
                for rows in v.values():
                    yield from (r for r in rows if isinstance(r, dict))
            elif k == "values" and isinstance(v, list):
                yield from (r for r in v if isinstance(r, dict))
            else:
                yield from _rows(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _rows(v)


def _static_svg(spec: dict) -> str:
    """vl-convert's SVG with each mark's link pointing at the record as the page links it.

    vl-convert resolves a relative ``href`` against its own loader's base URL (not this page), so the links go in
    as numbered sentinels and are put back verbatim afterwards."""
    import vl_convert as vlc

    spec = json.loads(json.dumps(spec))
    urls: list[str] = []
    for row in _rows(spec):
        if isinstance(row.get("url"), str):
            urls.append(row["url"])
            row["url"] = f"{_SENTINEL}{len(urls) - 1}"
    svg = vlc.vegalite_to_svg(spec, vl_version=VL_CONVERT_VERSION)
    svg = re.sub(r"^<\?xml[^>]*>\s*", "", svg)
    return re.sub(re.escape(f'xlink:href="{_SENTINEL}') + r'(\d+)"',
                  lambda m: f'xlink:href="{html.escape(urls[int(m.group(1))], quote=True)}"', svg)


#: What a figure drawn only in the browser shows until (or unless) its script draws it.
LIVE_ONLY = ("This figure is drawn by your browser from its Vega-Lite specification (JavaScript is needed); without "
             "it, the table of records on this page holds every point.")


def render(chart: alt.TopLevelMixin | dict, chart_id: str, *, alt_text: str, static: bool = True,
           data_from: str | None = None) -> Figure:
    """Compile ``chart`` and draw it: the static SVG (vl-convert, pinned Vega-Lite) and the spec for the browser.
    ``static=False`` leaves the SVG out (the browser draws the spec; a note stands in until it does): for figures on
    deep pages, where drawing every SVG at build time would cost most of a large site's build. ``data_from`` (with
    ``static=False``): the id of a figure on the same page drawing the same rows; each data set of this spec is then
    written as ``"#<that id>"`` and ``assets/charts.js`` takes it from that figure's spec (Altair names a data set by
    the hash of its rows, so a name the other spec lacks is an error there, never other data)."""
    if data_from is not None and static:
        raise ValueError("data_from is for figures drawn in the browser (static=False)")
    # The builders above only make valid Vega-Lite (the tests compile each); Altair's own check of the spec against
    # the Vega-Lite schema cost a third of each chart's time.
    spec = chart if isinstance(chart, dict) else chart.to_dict(validate=False)   # a dict: a ``*_spec`` builder's
    spec.setdefault("description", alt_text)
    for row in _rows(spec):   # JSON has no NaN/inf: a missing number is null (drawn as no mark, not as 0)
        for k, v in row.items():
            if isinstance(v, float) and not math.isfinite(v):
                row[k] = None
    if static:
        svg = _static_svg(spec)
        _audit_svg(svg)
    else:
        svg = ""
    if data_from is not None and isinstance(spec.get("datasets"), dict):
        spec["datasets"] = {name: f"#{data_from}" for name in spec["datasets"]}
    sj = spec_json(spec)
    fid = html.escape(str(chart_id), quote=True)
    cap = html.escape(str(alt_text), quote=True)
    still = svg or f'<p class="muted nb-live-note">{html.escape(LIVE_ONLY)}</p>'
    live_only = "" if static else ' data-static="none"'
    frag = (f'<figure class="nb-chart" id="{fid}"{live_only}>'
            f'<div class="nb-static" role="img" aria-label="{cap}">{still}</div>'
            f'<script type="application/json" class="nb-spec">{sj}</script>'
            f"<figcaption>{cap}</figcaption></figure>")
    return Figure(svg=svg, spec=sj, html=frag)
