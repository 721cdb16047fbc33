"""The width figures (GB/s and % of ceiling against hidden size) every kernel page draws: their points, frames
and plans, drawn only when a page is rendered (``LazyFigure``).
"""

from __future__ import annotations

import hashlib
import json

from markupsafe import Markup

from normbench.site.fmt import fmt_gbps, fmt_pct, fmt_shape, fmt_time, num
from normbench.site.pages.base import FLAG_LABELS
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug


class LazyFigure:
    """A figure drawn when its page is rendered (``__html__``), so a build can tell from its inputs (``fingerprint``)
    whether a page changed before drawing anything; drawn figures are kept by that fingerprint (``Site.fig_store``)."""

    def __init__(self, site, builder: str, df, chart_id: str, alt: str, static: bool, kw: dict,
                 data_from: str | None = None, inputs: str | None = None):
        self.site, self.builder, self._df, self.chart_id, self.alt, self.static, self.kw = (
            site, builder, df, chart_id, alt, static, kw)
        self.data_from, self.inputs = data_from, inputs
        self._print: str | None = None
        self._html: str | None = None

    @property
    def df(self):
        if callable(self._df):   # made when drawn (``inputs`` stands for it in the fingerprint)
            self._df = self._df()
        return self._df

    def fingerprint(self) -> str:
        if self._print is None and self.inputs is not None:
            self._print = hashlib.sha256(repr((self.builder, self.chart_id, self.alt, self.static,
                                               sorted(self.kw.items()), self.data_from, "inputs",
                                               self.inputs)).encode("utf-8", "surrogatepass")).hexdigest()
        if self._print is None:
            import pandas as pd

            df = self.df
            h = hashlib.sha256(repr((self.builder, self.chart_id, self.alt, self.static, sorted(self.kw.items()),
                                     self.data_from, list(map(str, df.columns)), list(map(str, df.dtypes)),
                                     len(df))).encode())
            h.update(pd.util.hash_pandas_object(df, index=True).values.tobytes())
            for col in df.columns:   # object columns: their text exactly (the hash above is of their values' hashes)
                if df[col].dtype == object:
                    h.update(json.dumps(list(df[col]), default=str, ensure_ascii=False).encode("utf-8",
                                                                                             "surrogatepass"))
            self._print = h.hexdigest()
        return self._print

    def __html__(self) -> str:
        if self._html is None:
            store = self.site.fig_store
            key = self.fingerprint()
            html = store.get(key) if store is not None else None
            if html is None:
                # A builder's ``*_spec`` twin (where there is one) makes the same spec with less of Altair's work.
                build = (getattr(self.site.charts, self.builder + "_spec", None)
                         or getattr(self.site.charts, self.builder))
                chart = build(self.df, **self.kw)
                # The charts module escapes every text it puts in the SVG and the spec (its tests check hostile text).
                html = self.site.charts.render(chart, self.chart_id, alt_text=self.alt, static=self.static,
                                               data_from=self.data_from).html
                if store is not None:
                    store.put(key, html)
            self._html = html
        return self._html

    def __str__(self) -> str:
        return self.__html__()


class Figures(SiteCore):
    """The width figures of a ``Site``'s kernel pages."""

    @staticmethod
    def _width_best(rows: list[dict]) -> list[tuple[tuple, dict]]:
        """The points of ``width_frame``: ((backend, dtype, pass, layout, width), row) in order, the largest shape of
        each width."""
        timings = {r["timing"] for r in rows}
        best: dict[tuple, dict] = {}
        for r in rows:
            if r["invalid"] or r["gbps"] is None or not r["num_features"]:
                continue
            pss = r["pass"] + (f" · {r['timing']}" if len(timings) > 1 else "")
            key = (r["backend"], r["dtype"], pss, r["layout"], int(r["num_features"]))
            cur = best.get(key)
            if cur is None or (r["elements"] or 0) > (cur["elements"] or 0):
                best[key] = r
        return sorted(best.items(), key=lambda kv: kv[0])

    def width_frame(self, rows: list[dict], up: str):
        """One point per backend, dtype, pass (and timing) and hidden size for ``charts.kernel_width_chart``: the
        largest shape of that width (closest to steady-state bandwidth); invalid records are left out."""
        return self._frame(self._width_best(rows), up)

    def _frame(self, best: list[tuple[tuple, dict]], up: str):
        """``width_frame`` of the points ``_width_best`` chose."""
        import pandas as pd

        if not best:
            return pd.DataFrame()
        cols: dict[str, list] = {k: [] for k in ("width", "rows", "gbps", "pct_ceiling", "ceiling_gbps", "backend",
                                                 "dtype", "pass_", "device", "median_s", "flags", "url", "layout",
                                                 "label")}
        for (backend, dtype, pss, layout, width), r in best:
            flags = ", ".join(FLAG_LABELS.get(f, f) for f in sorted(r["flags"]))
            for k, v in (("width", width), ("rows", int((r["elements"] or 0) // max(width, 1))), ("gbps", r["gbps"]),
                         ("pct_ceiling", r["pct"]), ("ceiling_gbps", r["ceiling"]), ("backend", backend),
                         ("dtype", dtype), ("pass_", pss), ("device", r["hardware"]), ("median_s", r["time"]),
                         ("flags", flags), ("url", self.rec_href(r["entry"], up)), ("layout", layout),
                         ("label", f"{r['norm']} {backend} {fmt_shape(r['shape'])} {dtype} {pss}: "
                                   f"{fmt_gbps(r['gbps'])}, {fmt_pct(r['pct'])} of ceiling, {fmt_time(r['time'])}"
                                   + (f" [{flags}]" if flags else ""))):
                cols[k].append(v)
        return pd.DataFrame(cols)

    @staticmethod
    def _best_print(best: list[tuple[tuple, dict]], up: str) -> list:
        """What ``_frame`` makes of ``best``, before formatting (its labels are a function of these values)."""
        return [(key, r["elements"], r["gbps"], r["pct"], r["ceiling"], r["hardware"], r["time"], sorted(r["flags"]),
                 SiteCore.rec_href(r["entry"], up), r["norm"], r["shape"]) for key, r in best]

    def figure(self, builder: str, df, chart_id: str, alt: str, *, static: bool = True, data_from: str | None = None,
               inputs: str | None = None, **kw):
        """A rendered chart (``charts.<builder>(df, **kw)``), or None without the charts module or data; ``static``
        False: the spec only, drawn in the browser (``charts.render``), its data read from the figure ``data_from``
        of the same page where given (the same records: ``charts.render``). ``df`` may be a function making the
        frame when the figure is drawn, with ``inputs`` the text it is a function of (the figure's print)."""
        if self.charts is None or df is None or not hasattr(self.charts, builder):
            return None
        if not callable(df) and len(df) == 0:
            return None
        return LazyFigure(self, builder, df, chart_id, alt, static, kw, data_from, inputs)

    def width_figures(self, norm: str, hw: str, rows: list[dict], up: str) -> list:
        """GB/s and % of ceiling against hidden size on one device, one figure pair per layout with two widths."""
        return self._width_figures(norm, hw, rows, up)[0]

    def _width_plan(self, norm: str, hw: str, rows: list[dict], up: str) -> list[tuple]:
        """(layout, metric, what, points) of each width figure of a norm on a device (``_width_best``'s points: the
        figure's frame is ``_frame`` of them), before drawing any."""
        key = (norm, hw, up)
        if key in self._wplan:
            return self._wplan[key]
        plan = []
        for layout in sorted({r["layout"] for r in rows}):
            # The points (``width_frame``'s) without their frame: a figure makes its frame when it is drawn and is
            # digested by their print (making ~1,000 frames was most of a rebuild's norm pages).
            best = self._width_best([r for r in rows if r["layout"] == layout])
            if len({k[4] for k, _ in best}) < 2:
                continue
            for metric, what in (("gbps", "GB/s"), ("pct_ceiling", "% of the measured copy ceiling")):
                if metric == "pct_ceiling" and all(_na(r["pct"]) for _, r in best):
                    continue
                plan.append((layout, metric, what, best))
        self._wplan[key] = plan
        return plan

    def _width_points(self, norm: str, hw: str, rows: list[dict], up: str) -> int:
        """The points of a norm's width figures on a device (``_width_plan``'s, counted without making them)."""
        return self._width_counts(rows)[1] if self.charts is not None else 0

    def _width_counts(self, rows: list[dict]) -> tuple[int, int]:
        """(figures, points) of ``_width_plan`` for ``rows``, counted without making its frames."""
        figs = n = 0
        for layout in sorted({r["layout"] for r in rows}):
            best = self._width_best([r for r in rows if r["layout"] == layout])
            if len({key[4] for key, _ in best}) < 2:
                continue
            k = 2 if any(num(r["pct"]) is not None for _, r in best) else 1
            figs += k
            n += len(best) * k
        return figs, n

    def _width_figures(self, norm: str, hw: str, rows: list[dict], up: str, *, draw: bool = True,
                       static: bool = True) -> tuple[list, int]:
        """The figures and their number of points; ``draw=False`` counts them without drawing (placeholders)."""
        key = (norm, hw, up, draw, static)
        if key in self._wfig:  # the norm's page and its device page show the same figures: drawn once
            return self._wfig[key]
        if not draw:   # placeholders: counted without making the figures' frames
            n_figs, points = self._width_counts(rows) if self.charts is not None else (0, 0)
            self._wfig[key] = ([Markup("")] * n_figs, points)
            return self._wfig[key]
        figs, points = [], 0
        gbps_fig: dict[str, str] = {}   # layout -> its GB/s figure's id
        for layout, metric, what, best in self._width_plan(norm, hw, rows, up):
            if not draw:
                fig = Markup("") if self.charts is not None else None
            else:
                alt = (f"{norm} on {hw} ({layout}): {what} against hidden size, one line per backend "
                       f"({', '.join(sorted({k[0] for k, _ in best}))}) per dtype and pass")
                chart_id = slug("w", norm, hw, layout, metric)
                kw = {}
                # Drawn in the browser, the % figure reads the GB/s figure's data (one copy in the page) where the
                # two draw the same records (each leaves out the rows without its metric).
                if not static and metric == "pct_ceiling" and layout in gbps_fig and all(
                        _na(r["pct"]) == _na(r["gbps"]) for _, r in best):
                    kw["data_from"] = gbps_fig[layout]
                if metric == "gbps":
                    gbps_fig[layout] = chart_id
                fig = self.figure("kernel_width_chart", lambda best=best, up=up: self._frame(best, up), chart_id,
                                  alt, metric=metric, title=f"{norm} · {layout} · {what}", static=static,
                                  inputs=repr(self._best_print(best, up)), **kw)
            if fig is not None:
                figs.append(fig)
                points += len(best)
        self._wfig[key] = (figs, points)
        return figs, points


def _na(v) -> bool:
    """Whether a frame would hold ``v`` as missing (``pandas.isna``: None or NaN)."""
    return v is None or (isinstance(v, float) and v != v)
