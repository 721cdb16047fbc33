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
            out[c] = out[c].where(out[c].map(lambda v: v is not None and math.isfinite(v)), None).astype(object)
    return out.reset_index(drop=True)


def no_data_chart(title: str = "", message: str = "no data") -> alt.Chart:
    """An explicit "no data" figure: a framed panel with the message, never an empty frame or an error."""
    return (alt.Chart(pd.DataFrame({"message": [message]}))
            .mark_text(fontSize=14, color="#555")
            .encode(text="message:N")
            .properties(width=WIDTH, height=60, title=title or "", description=f"{title}: {message}"))


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
    if metric not in ("gbps", "pct_ceiling"):
        raise ValueError(f"metric must be 'gbps' or 'pct_ceiling', not {metric!r}")
    data = _clean(df, KERNEL_COLUMNS)
    data = data[data[metric].notna()] if metric in data.columns else data.iloc[0:0]
    if data.empty:
        return no_data_chart(title)
    if "flags" not in data.columns:
        data["flags"] = ""
    data["flags"] = data["flags"].fillna("")
    y_title = "GB/s" if metric == "gbps" else "% of measured ceiling"
    x, y = _x_width(data["width"]), alt.Y(f"{metric}:Q", title=y_title)
    colour = alt.Color("backend:N", title="backend", scale=alt.Scale(range=PALETTE))
    base = alt.Chart(data)
    ranked = base.transform_filter(RANKED)
    flagged = base.transform_filter(f"!({RANKED})")
    layers = [
        ranked.mark_line(strokeWidth=1.5).encode(x=x, y=y, color=colour, detail="backend:N"),
        ranked.mark_point(filled=True, size=40, opacity=1).encode(
            x=x, y=y, color=colour, tooltip=_kernel_tooltip(), href="url:N").properties(name="points"),
        flagged.mark_point(filled=False, shape="triangle-up", size=60, strokeWidth=1.5, opacity=1).encode(
            x=x, y=y, color=colour, tooltip=_kernel_tooltip(), href="url:N").properties(name="flagged"),
    ]
    if metric == "gbps" and "ceiling_gbps" in data.columns and data["ceiling_gbps"].notna().any():
        layers.append(base.mark_rule(strokeDash=[4, 3], color="#777").encode(
            y="max(ceiling_gbps):Q", tooltip=[alt.Tooltip("max(ceiling_gbps):Q", title="measured ceiling (GB/s)",
                                                          format=".4~g")]))
    chart = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    return chart.facet(row=alt.Row("dtype:N", title="dtype"), column=alt.Column("pass_:N", title="pass")).properties(
        title=title or "", description=title or f"{y_title} against hidden size")


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


def render(chart: alt.TopLevelMixin, chart_id: str, *, alt_text: str) -> Figure:
    """Compile ``chart`` and draw it: the static SVG (vl-convert, pinned Vega-Lite) and the spec for the browser."""
    spec = chart.to_dict()
    spec.setdefault("description", alt_text)
    svg = _static_svg(spec)
    _audit_svg(svg)
    sj = spec_json(spec)
    fid = html.escape(str(chart_id), quote=True)
    cap = html.escape(str(alt_text), quote=True)
    frag = (f'<figure class="nb-chart" id="{fid}">'
            f'<div class="nb-static" role="img" aria-label="{cap}">{svg}</div>'
            f'<script type="application/json" class="nb-spec">{sj}</script>'
            f"<figcaption>{cap}</figcaption></figure>")
    return Figure(svg=svg, spec=sj, html=frag)
