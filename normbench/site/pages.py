"""The leaderboard's pages: overview, kernels, accuracy, one per norm, hardware, methodology and rejected records."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

from normbench import stats as S
from normbench.gendocs import MARKER_LINE
from normbench.site import aggregate as agg
from normbench.site import markdown
from normbench.site.layout import Col, Row, SiteInfo, page, table
from normbench.site.markup import (
    esc,
    flag_badges,
    fmt_bytes,
    fmt_err,
    fmt_gbps,
    fmt_metric,
    fmt_pct,
    fmt_seconds_human,
    fmt_shape,
    fmt_time,
    fmt_x,
    link,
    num,
    safe_url,
)
from normbench.site.records import Loaded
from normbench.site.svg import Point, Series, bar_chart, line_plot, pareto_plot

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SLUG_RE = re.compile(r"[^a-z0-9]+")

#: Norms worth a plot on the kernels page itself when measured (the rest have theirs on their own pages).
REFERENCE_NORMS = ("layernorm", "rmsnorm")
MAX_PLOTS_PER_NORM = 12


def norm_file(name: str) -> str:
    """The page of a norm, relative to the site root; odd names get a hash so they cannot escape ``norms/``."""
    if _NAME_RE.match(name):
        return f"norms/{name}.html"
    return f"norms/n-{hashlib.sha256(name.encode()).hexdigest()[:16]}.html"


def slug(*parts: str) -> str:
    text = "-".join(str(p) for p in parts).lower()
    s = _SLUG_RE.sub("-", text).strip("-")[:60]
    return (s or "x") + "-" + hashlib.sha256(text.encode()).hexdigest()[:6]


def _s(v) -> str:
    return v if isinstance(v, str) else ""


def _metric_label(metric: str, higher: bool) -> str:
    return f"{metric} ({'higher' if higher else 'lower'} is better)"


class Site:
    """All pages of one build; ``pages()`` yields (relative path, HTML)."""

    def __init__(self, loaded: Loaded, info: SiteInfo, docs: dict[str, str]):
        self.loaded = loaded
        self.info = info
        self.docs = docs
        self.kernels = [agg.kernel_row(e) for e in loaded.entries if e.kind == "kernel"]
        agg.add_speedups(self.kernels)
        self.acc_rows = [agg.accuracy_row(e) for e in loaded.entries if e.kind == "accuracy"]
        self.cells = agg.accuracy_cells(self.acc_rows)
        # The newest record of a norm describes it (metadata can improve between versions).
        self.norm_meta: dict[str, dict] = {}
        self.hw_entries: dict[str, list] = {}   # oldest first, so [-1] describes a machine as last seen
        for e in sorted(loaded.entries, key=lambda e: _s(e.rec["provenance"].get("timestamp"))):
            self.norm_meta[e.rec["norm"]["name"]] = e.rec["norm"]
            self.hw_entries.setdefault(e.rec["provenance"]["hardware_id"], []).append(e)

    # --- shared pieces -----------------------------------------------------------------------------------------

    def norm_link(self, name: str, depth: int = 0) -> str:
        return f'<a href="{"../" * depth}{esc(norm_file(name))}">{esc(name)}</a>'

    def hw_link(self, hw: str, depth: int = 0) -> str:
        return f'<a href="{"../" * depth}hardware.html#{esc(slug("hw", hw))}">{esc(hw)}</a>'

    def hw_name(self, hw: str) -> str:
        entries = self.hw_entries.get(hw) or []
        if not entries:
            return ""
        h = entries[-1].rec["provenance"].get("hardware")
        if not isinstance(h, dict):
            return ""
        if _s(h.get("gpu")):
            mem = num(h.get("gpu_memory_gb"))
            return f"{h['gpu']}" + (f", {mem:g} GB" if mem else "")
        cores = num(h.get("cores"))
        return _s(h.get("cpu")) + (f", {int(cores)} cores" if cores else "")

    @staticmethod
    def rec_link(e, depth: int = 0, text: str | None = None) -> str:
        label = text if text is not None else e.rid[:10]
        title = f"{e.path} [{e.index}] · id {e.rid}"
        return f'<a class="rec" href="{"../" * depth}{esc(e.href)}" title="{esc(title)}">{esc(label)}</a>'

    # --- kernel tables -------------------------------------------------------------------------------------------

    KCOLS = [
        Col("norm"), Col("backend"), Col("shape", title="layout and tensor shape"), Col("dtype"), Col("pass"),
        Col("class", title="shape class"),
        Col("time", True, "median over repetitions (hover: interquartile range)"),
        Col("GB/s", True, "minimum bytes moved / median time"),
        Col("% ceiling", True, "GB/s as a percentage of the copy bandwidth measured in the same run",
            sorted="descending"),
        Col("vs eager", True, "eager median time / this median time, same shape, dtype and pass"),
        Col("peak mem", True, "peak memory above the inputs"),
        Col("err y", True, "max |y - y_ref| against float64 (hover: dx, dw)"),
        Col("record", title="the result record this row comes from"),
    ]

    def kernel_table(self, tid: str, rows: list[dict], depth: int = 0, with_hw: bool = False,
                     with_norm: bool = True) -> str:
        cols = list(self.KCOLS)
        if not with_norm:
            cols.pop(0)
        if with_hw:
            cols.insert(0, Col("hardware"))
        out = []
        for r in agg.rank_by_bandwidth(rows):
            e = r["entry"]
            iqr = f"IQR {fmt_time(r['iqr'])} over {int(r['reps'])} reps" if r["reps"] else ""
            gb = fmt_gbps(r["gbps"])
            badges = flag_badges(r["flags"])
            time_html = f'<span title="{esc(iqr)}">{fmt_time(r["time"])}</span>'
            if r["invalid"]:
                time_html = f'<span class="failed" title="{esc(iqr)}">failed</span>'
                gb = '<span class="muted">–</span>'
            errt = (f"y max_rel {fmt_err(r['err_y_rel'])} · dx max_abs {fmt_err(r['err_dx'])} · "
                    f"dw max_abs {fmt_err(r['err_dw'])}")
            shape_html = (f'<span class="muted">{esc(r["layout"])}</span> '
                          f'<span class="shape">{esc(fmt_shape(r["shape"]))}</span>')
            cells = [
                (self.norm_link(r["norm"], depth), r["norm"]),
                (esc(r["backend"]) + badges, r["backend"]),
                (shape_html, float(r["elements"]) if r["elements"] else None),
                (esc(r["dtype"]), r["dtype"]),
                (esc(r["pass"]) + ("" if r["timing"] == "cold" or r["device"] == "cpu"
                                   else f' <span class="muted">{esc(r["timing"])}</span>'), r["pass"]),
                (esc(r["shape_class"]), r["shape_class"]),
                (time_html, None if r["invalid"] else r["time"]),
                (gb, None if r["invalid"] else r["gbps"]),
                (fmt_pct(None if r["invalid"] else r["pct"]), None if r["invalid"] else r["pct"]),
                (fmt_x(r["speedup"]), r["speedup"]),
                (fmt_bytes(r["peak_mem"]), r["peak_mem"]),
                (f'<span title="{esc(errt)}">{fmt_err(r["err_y"])}</span>', r["err_y"]),
                (self.rec_link(e, depth), e.rid),
            ]
            if not with_norm:
                cells.pop(0)
            if with_hw:
                cells.insert(0, (self.hw_link(r["hardware"], depth), r["hardware"]))
            out.append(Row(cells, filters={"dtype": r["dtype"], "pass": r["pass"], "shape_class": r["shape_class"],
                                           "backend": r["backend"], "timing": r["timing"], "layout": r["layout"],
                                           "hardware": r["hardware"], "harness": r["harness"]},
                           cls="invalid" if r["invalid"] else ("flagged" if r["flagged"] else "")))
        filters = [("dtype", "dtype"), ("pass", "pass"), ("shape_class", "shape class"), ("backend", "backend")]
        for key, label in (("timing", "timing"), ("layout", "layout"), ("hardware", "hardware"),
                           ("harness", "harness")):
            if len({r.filters[key] for r in out}) > 1:
                filters.append((key, label))
        return table(tid, cols, out, filters=filters, search="find")

    def gbps_plots(self, rows: list[dict], depth: int, limit: int, title_prefix: str = "",
                   with_hw: bool = False) -> list[str]:
        """GB/s against hidden size, one line per backend, the measured ceiling drawn; one plot per
        (hardware, layout, dtype, pass, timing) with at least two hidden sizes."""
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["num_features"] and r["gbps"] is not None and not r["invalid"]:
                groups.setdefault((r["hardware"], r["norm"], r["layout"], r["dtype"], r["pass"], r["timing"]),
                                  []).append(r)
        plots = []
        for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3], ("fwd", "bwd", "fwd+bwd").index(k[4])
                                                 if k[4] in ("fwd", "bwd", "fwd+bwd") else 9, k[5])):
            grp = groups[key]
            if len({r["num_features"] for r in grp}) < 2:
                continue
            hw, norm, layout, dtype, pss, timing = key
            series = []
            for backend in sorted({r["backend"] for r in grp}, key=lambda b: (b != "eager", b)):
                # Several shapes can share a hidden size; the largest is the one closest to steady-state bandwidth.
                best: dict[float, dict] = {}
                for r in grp:
                    if r["backend"] != backend:
                        continue
                    cur = best.get(r["num_features"])
                    if cur is None or (r["elements"] or 0) > (cur["elements"] or 0):
                        best[r["num_features"]] = r
                pts = [Point(r["num_features"], r["gbps"], "../" * depth + r["entry"].href,
                             f"{norm} {backend} {fmt_shape(r['shape'])} {dtype} {pss}: {fmt_gbps(r['gbps'])}, "
                             f"{fmt_time(r['time'])}" + (f" (flagged {', '.join(r['flags'])})" if r["flagged"] else ""))
                       for r in best.values()]
                series.append(Series(backend, pts))
            ceilings = sorted(r["ceiling"] for r in grp if r["ceiling"])
            hlines = []
            if ceilings:
                c = ceilings[len(ceilings) // 2]
                hlines.append((c, f"measured copy ceiling {fmt_gbps(c)}"))
            peaks = {r["datasheet"] for r in grp if r["datasheet"]}
            if peaks:
                p = max(peaks)
                hlines.append((p, f"datasheet peak {fmt_gbps(p)}"))
            t = f"{title_prefix}{norm} · {layout} · {dtype} · {pss}" + ("" if timing == "cold" else f" · {timing}")
            if with_hw:
                t += f" · {hw}"
            plots.append(line_plot(series, xlabel="hidden size C (log scale)", ylabel="GB/s", title=t, xlog=True,
                                   hlines=hlines))
            if len(plots) >= limit:
                break
        return plots

    def shape_bars(self, rows: list[dict], depth: int, limit: int) -> list[str]:
        """Where a machine measured a single hidden size (no curve to draw): GB/s of every backend, dtype and
        pass at its largest shape, against the measured ceiling."""
        plots = []
        sizes: dict[tuple, set] = {}
        for r in rows:
            sizes.setdefault((r["hardware"], r["layout"], r["dtype"], r["pass"]), set()).add(r["num_features"])
        curves = {k[:2] for k, v in sizes.items() if len(v) > 1}
        for hw, layout in sorted({(r["hardware"], r["layout"]) for r in rows}):
            if (hw, layout) in curves or len(plots) >= limit:
                continue
            grp = [r for r in rows if r["hardware"] == hw and r["layout"] == layout and r["gbps"] is not None
                   and not r["invalid"]]
            if not grp:
                continue
            biggest = max(grp, key=lambda r: (r["elements"] or 0))["shape"]
            grp = sorted((r for r in grp if r["shape"] == biggest),
                         key=lambda r: (r["backend"] != "eager", r["backend"], r["dtype"], r["pass"], r["timing"]))
            items = [(f"{r['backend']} · {r['dtype']} · {r['pass']}", r["gbps"], "../" * depth + r["entry"].href,
                      f"{fmt_time(r['time'])}, {fmt_gbps(r['gbps'])}, {fmt_pct(r['pct'])} of ceiling"
                      + "".join(f" ({f}: {why})" for f, why in r["flags"].items()), r["flagged"]) for r in grp]
            ceilings = sorted(r["ceiling"] for r in grp if r["ceiling"])
            ref = (ceilings[len(ceilings) // 2], "copy ceiling") if ceilings else None
            plots.append(bar_chart(items, xlabel="GB/s", ref=ref, value_fmt=fmt_gbps,
                                   title=f"{layout} {fmt_shape(biggest)} · {hw}"))
        return [p for p in plots if p]

    # --- pages ---------------------------------------------------------------------------------------------------

    def overview(self) -> str:
        n_k, n_a = len(self.kernels), len(self.acc_rows)
        norms = sorted(self.norm_meta)
        body = ['<section class="intro"><p>normbench measures normalization layers (LayerNorm, RMSNorm, BatchNorm, '
                "GroupNorm, DyT, Derf, PowerNorm, EvoNorm, weight reparameterizations, and any norm a plugin adds) two "
                "ways: <strong>kernels</strong> (median time, effective bandwidth as a share of the copy bandwidth "
                "measured on the same machine, memory, and error against a float64 reference, per backend, dtype and "
                "pass) and <strong>accuracy</strong> (models trained with the norm as the only change, over several "
                "seeds, with confidence intervals, time-to-target and divergence). Method: "
                '<a href="methodology.html">methodology</a>.</p></section>']
        body.append('<div class="stats">'
                    f'<div><span class="big">{n_k}</span> kernel results</div>'
                    f'<div><span class="big">{n_a}</span> training runs</div>'
                    f'<div><span class="big">{len(norms)}</span> norms</div>'
                    f'<div><span class="big">{len(self.hw_entries)}</span> machines</div>'
                    f'<div><span class="big small">{esc(self.info.taken)}</span> data taken</div></div>')
        if self.loaded.rejected:
            body.append(f'<p class="notice">{len(self.loaded.rejected)} record(s) or file(s) were rejected and are '
                        'not in these tables: see <a href="rejected.html">rejected records</a>.</p>')
        if not self.loaded.entries:
            body.append('<p class="notice">No results yet. Run <code>normbench bench --quick</code> and '
                        "<code>normbench train --quick</code>, then <code>normbench site build</code>.</p>")
        hws = sorted({r["hardware"] for r in self.kernels})
        if hws:
            body.append(self._norm_matrix(hws))
            body.append("<h2>Closest to the bandwidth ceiling, per machine</h2>"
                        '<p class="muted">The five kernel results with the highest share of the copy bandwidth '
                        "measured in the same run (flagged measurements excluded).</p>")
        for hw in hws:
            rows = agg.best_by_bandwidth([r for r in self.kernels if r["hardware"] == hw], 5)
            body.append(f'<h3>{self.hw_link(hw)} <span class="muted">{esc(self.hw_name(hw))}</span></h3>')
            items = "".join(
                f"<tr><td>{self.norm_link(r['norm'])}</td><td>{esc(r['backend'])}</td>"
                f"<td>{esc(r['layout'])} {esc(fmt_shape(r['shape']))}</td><td>{esc(r['dtype'])}</td>"
                f"<td>{esc(r['pass'])}</td><td class='num'>{fmt_time(r['time'])}</td>"
                f"<td class='num'>{fmt_gbps(r['gbps'])}</td><td class='num'>{fmt_pct(r['pct'])}</td>"
                f"<td>{self.rec_link(r['entry'])}</td></tr>" for r in rows)
            body.append('<div class="table-wrap"><table class="lb compact"><thead><tr><th>norm</th><th>backend</th>'
                        '<th>shape</th><th>dtype</th><th>pass</th><th class="num">time</th><th class="num">GB/s</th>'
                        '<th class="num">% ceiling</th><th>record</th></tr></thead><tbody>' + items
                        + "</tbody></table></div>")
        tables = self._acc_tables()
        if tables:
            body.append("<h2>Best per task</h2>")
        for key, cells in tables:
            offline, task, model, quick, variant = key
            ranked = agg.rank_cells(cells)[:3]
            if not ranked:
                continue  # only tuning runs so far
            c0 = ranked[0]
            badge = self._task_badges(offline, quick)
            body.append(f'<h3><a href="accuracy.html#{esc(slug("t", *map(str, key)))}">{esc(task)} · {esc(model)}'
                        f"{_variant_label(variant)}</a> {badge}</h3>")
            items = "".join(
                f"<tr><td>{i + 1}</td><td>{self.norm_link(c.norm)}</td><td>{esc(c.placement or '')}</td>"
                f"<td class='num'>{self._mean_ci(c)}</td><td class='num'>{self._div(c)}</td>"
                f"<td>{esc(c.hardware)}</td><td>{self._seed_links(c, 0)}</td></tr>" for i, c in enumerate(ranked))
            body.append(f'<div class="table-wrap"><table class="lb compact"><thead><tr><th>#</th><th>norm</th>'
                        f'<th>placement</th><th class="num">{esc(_metric_label(c0.metric, c0.higher))}</th>'
                        '<th class="num">seeds</th><th>hardware</th><th>records</th></tr></thead><tbody>' + items
                        + "</tbody></table></div>")
        return page("Normalization layer leaderboard", "\n".join(body), self.info, active="index.html")

    def _norm_matrix(self, hws: list[str]) -> str:
        """Norms down, machines across: the best share of the ceiling any backend, dtype and pass reached."""
        best = {hw: {r["norm"]: r for r in agg.best_backend_per_norm([r for r in self.kernels if r["hardware"] == hw])}
                for hw in hws}
        norms = sorted({n for hw in hws for n in best[hw]},
                       key=lambda n: -max((best[hw][n]["pct"] or 0.0) for hw in hws if n in best[hw]))
        rows = []
        for n in norms:
            cells = [(self.norm_link(n), n)]
            for hw in hws:
                r = best[hw].get(n)
                if r is None:
                    cells.append(("–", None))
                else:
                    tip = f"{r['backend']} · {r['dtype']} · {r['pass']} · {r['layout']} {fmt_shape(r['shape'])}"
                    cells.append((f'<a class="plain" href="{esc(r["entry"].href)}" title="{esc(tip)}">'
                                  f"{fmt_pct(r['pct'])}</a> <span class='muted'>{esc(r['backend'])}</span>",
                                  r["pct"]))
            rows.append(Row(cells))
        cols = [Col("norm")] + [Col(hw, True, self.hw_name(hw)) for hw in hws]
        return ("<h2>Every norm on every machine</h2><p class='muted'>The best share of the measured copy bandwidth "
                "that any backend, dtype and pass of each norm reached (hover for which; click for the record).</p>"
                + table("matrix", cols, rows, cls="narrow"))

    def kernels_page(self) -> str:
        body = ['<p class="muted">One table per machine. Click a column header to sort; use the selects to filter. '
                "Time is the median over repetitions; GB/s is the minimum bytes a norm must move divided by that "
                "time; % ceiling compares it with the copy bandwidth measured in the same run. "
                "A badge marks a flagged record, which is never ranked (hover for the reason): "
                "<em>suspect</em> above the copy ceiling, <em>noisy</em> measured on a busy machine, <em>fell_back</em> "
                "compiled code that ran eager, <em>unchecked</em>/<em>forced</em> not passing <code>normbench check</code>; "
                "<em>non_finite</em> (output or gradient NaN/inf) is invalid and shown as failed.</p>"]
        hws = sorted({r["hardware"] for r in self.kernels})
        if not hws:
            body.append('<p class="notice">No kernel results yet: run <code>normbench bench --quick</code>.</p>')
        if len(hws) > 1:
            body.append("<p>Machines: " + ", ".join(f'<a href="#{esc(slug("k", hw))}">{esc(hw)}</a>' for hw in hws)
                        + "</p>")
        for hw in hws:
            rows = [r for r in self.kernels if r["hardware"] == hw]
            body.append(f'<section id="{esc(slug("k", hw))}"><h2>{esc(hw)} <span class="muted">'
                        f'{esc(self.hw_name(hw))}</span></h2>')
            ceilings = sorted(r["ceiling"] for r in rows if r["ceiling"])
            if ceilings:
                body.append(f'<p>Measured copy bandwidth ceiling: <strong>{fmt_gbps(ceilings[len(ceilings) // 2])}'
                            f"</strong> (median over runs; {self.hw_link(hw)} has the full provenance).</p>")
            # The headline chart: the most measured dtype and pass on this machine.
            combo = Counter((r["dtype"], r["pass"]) for r in rows).most_common(1)[0][0]
            best = agg.best_backend_per_norm([r for r in rows if (r["dtype"], r["pass"]) == combo])
            plots = []
            if best and any(r["pct"] is not None for r in best):
                items = [(r["norm"], r["pct"], r["entry"].href,
                          f"{r['backend']}, {r['layout']} {fmt_shape(r['shape'])}: {fmt_gbps(r['gbps'])}, "
                          f"{fmt_pct(r['pct'])} of ceiling", False) for r in best if r["pct"] is not None]
                plots.append(bar_chart(items, xlabel="% of measured copy bandwidth",
                                       title=f"Best result per norm · {combo[0]} · {combo[1]}",
                                       ref=(100.0, "ceiling"), value_fmt=lambda v: f"{v:.0f} %"))
            for name in REFERENCE_NORMS:
                plots += self.gbps_plots([r for r in rows if r["norm"] == name and r["dtype"] == combo[0]
                                          and r["pass"] == combo[1]], 0, 1)
            if plots:
                body.append('<div class="plots">' + "".join(plots) + "</div>")
            body.append(self.kernel_table(slug("kt", hw), rows))
            body.append("</section>")
        return page("Kernel leaderboard", "\n".join(body), self.info, active="kernels.html")

    # --- accuracy --------------------------------------------------------------------------------------------------

    def _acc_tables(self) -> list[tuple[tuple, list]]:
        tables: dict[tuple, list] = {}
        for c in self.cells:
            tables.setdefault(c.table_key, []).append(c)
        # Real tasks first, full budgets before quick ones.
        return sorted(tables.items(), key=lambda kv: (kv[0][0], kv[0][3], kv[0][1], kv[0][2], kv[0][4] != "default",
                                                      kv[0][4]))

    @staticmethod
    def _task_badges(offline: bool, quick: bool) -> str:
        out = ""
        if offline:
            out += ('<span class="badge offline" title="a synthetic task that needs no download; not comparable '
                    'with real tasks">offline task</span>')
        if quick:
            out += '<span class="badge quick" title="smoke-test budget, not a converged result">quick budget</span>'
        return out

    def _vs_ref(self, c) -> tuple[str, float | None]:
        ref = agg.reference_cell(c, self.cells)
        if ref is None:
            is_ref = S.reference_of(c.model) == (c.norm, c.placement)
            return ('<span class="muted">reference</span>' if is_ref else "", None)
        d = S.versus(c.values, ref.values, log=S.is_log_metric(c.metric))
        if d is None:
            return ('<span class="muted">too few finished seeds</span>', None)
        name = ref.norm + (f" ({ref.placement})" if ref.placement else "")
        return (f'<span title="against {esc(name)}">{esc(S.versus_text(d, c.metric))}</span>', d.p)

    @staticmethod
    def _div(c) -> str:
        """Diverged / counted runs, marked when any diverged (a diverged run is a result, never dropped)."""
        text = f"{c.n_diverged}/{c.n}"
        extra = f' <span class="muted" title="flagged runs: shown, never counted">+{c.n_flagged} flagged</span>' \
            if c.n_flagged else ""
        return (f'<span class="warn">{text}</span>' if c.n_diverged else text) + extra

    @staticmethod
    def _mean_ci(c) -> str:
        st = c.final
        if st.mean is None:
            return '<span class="muted">no finished run</span>'
        s = fmt_metric(st.mean, c.metric)
        if st.low is not None:
            lo, hi = fmt_metric(st.low, c.metric), fmt_metric(st.high, c.metric)
            if st.log:
                tip = (f"geometric mean over {st.n} finished seeds; 95 % CI from a t-interval of log values; "
                       f"sd of log {st.std:.3g}")
            else:
                tip = f"mean over {st.n} finished seeds; 95 % CI (Student t); sd {fmt_metric(st.std, c.metric)}"
            return f'<span title="{esc(tip)}">{s} <span class="muted">[{esc(lo)}, {esc(hi)}]</span></span>'
        return f'<span title="one finished seed: no interval">{s}</span>'

    def _seed_links(self, c, depth: int) -> str:
        out = []
        for r in c.runs:
            label = f"s{int(r['seed'])}" if r["seed"] is not None else "run"
            if r["status"] == "diverged":
                label += "✗"
            elif r["status"] == "flagged":
                label += "⚠"
            link_html = self.rec_link(r["entry"], depth, label)
            if r["status"] in ("diverged", "flagged"):
                why = "diverged" if r["status"] == "diverged" else "flagged: " + ", ".join(r["flags"])
                link_html = f'<span title="{esc(why)}">{link_html}</span>'
            out.append(link_html)
        return " ".join(out)

    def acc_table(self, tid: str, cells: list, depth: int = 0) -> str:
        c0 = cells[0]
        centre = "geometric mean" if S.is_log_metric(c0.metric) else "mean"
        cols = [Col("#", True, sorted="ascending"), Col("norm"), Col("placement"), Col("hardware"),
                Col(f"{c0.metric} {centre} [95 % CI]", True, _metric_label(c0.metric, c0.higher)),
                Col("best", True, "best evaluation over training, mean over seeds"),
                Col("time to target", True, "mean over the seeds that reached the target (k/n reached)"),
                Col("diverged", True, "seeds whose loss became NaN/inf, of the counted seeds; ranks first"),
                Col("vs reference", True, "against the table's reference (LayerNorm, Pre-LN in GPT tables; BatchNorm "
                    "in ResNet tables): ratio of geometric means (perplexity) or difference (accuracy) with its 95 % "
                    "Welch interval; Welch p, Mann–Whitney p; not corrected for multiple comparisons"),
                Col("wall time", True, "training wall time, mean over seeds"),
                Col("seeds", True), Col("records")]
        rows = []
        for i, c in enumerate(agg.rank_cells(cells)):
            tgt = ""
            if c.ttt.mean is not None:
                tgt = f"{fmt_seconds_human(c.ttt.mean)} <span class='muted'>({c.n_reached}/{c.n})</span>"
            elif c.target is not None:
                tgt = f"<span class='muted'>not reached (0/{c.n})</span>"
            else:
                tgt = "<span class='muted'>no target</span>"
            recs = self._seed_links(c, depth)
            cells_html = [
                (str(i + 1), float(i + 1)),
                (self.norm_link(c.norm, depth) + (f' <span class="muted">{esc(c.options)}</span>' if c.options
                                                   else ""), f"{c.norm} {c.options}".strip()),
                (esc(c.placement or "–"), c.placement or ""),
                (self.hw_link(c.hardware, depth), c.hardware),
                (self._mean_ci(c), c.final.mean),
                (fmt_metric(c.best.mean, c.metric), c.best.mean),
                (tgt, c.ttt.mean),
                (self._div(c), c.divergence_rate),
                self._vs_ref(c),
                (fmt_seconds_human(c.wall.mean), c.wall.mean),
                (str(c.n), float(c.n)),
                (recs, None),
            ]
            rows.append(Row(cells_html, filters={"placement": c.placement or "", "hardware": c.hardware},
                            cls="diverged" if c.final.mean is None else ""))
        filters = [(k, k) for k in ("placement", "hardware") if len({r.filters[k] for r in rows}) > 1]
        return table(tid, cols, rows, filters=filters, search="find")

    def tuning_list(self, cells: list, depth: int = 0) -> str:
        """The learning-rate search runs of a table: shown so the choice can be checked, never ranked."""
        tuning = [c for c in cells if c.tuning]
        if not tuning:
            return ""
        rows = []
        for c in sorted(tuning, key=lambda c: (c.norm, c.placement or "", str(c.recipe.get("lr")))):
            log = S.is_log_metric(c.metric)
            fin = [r["final"] for r in c.runs if r["final"] is not None]
            val = S.summarize(fin, log=log).mean
            rows.append(f"<tr><td>{self.norm_link(c.norm, depth)}</td><td>{esc(c.placement or '–')}</td>"
                        f"<td class='num'>{esc(c.recipe.get('lr', '–'))}</td>"
                        f"<td class='num'>{fmt_metric(val, c.metric) if val is not None else '–'}</td>"
                        f"<td class='num'>{sum(r['diverged'] for r in c.runs)}/{len(c.runs)}</td>"
                        f"<td>{self._seed_links(c, depth)}</td></tr>")
        return ("<details class='tuning'><summary>Learning-rate search: "
                f"{sum(len(c.runs) for c in tuning)} tuning runs (validation split; never ranked)</summary>"
                '<div class="table-wrap"><table class="lb compact"><thead><tr><th>norm</th><th>placement</th>'
                '<th class="num">lr</th><th class="num">validation metric</th><th class="num">diverged</th>'
                "<th>records</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div></details>")

    def acc_plots(self, cells: list, depth: int = 0, title_suffix: str = "") -> list[str]:
        plots = []
        c0 = cells[0]
        for hw in sorted({c.hardware for c in cells}):
            hc = [c for c in cells if c.hardware == hw and c.final.mean is not None and c.wall.mean is not None]
            if len(hc) >= 2:
                pts = []
                for c in hc:
                    name = c.norm + (f" ({c.placement})" if c.placement else "")
                    tip = (f"{name}: {fmt_metric(c.final.mean, c.metric)} in {fmt_seconds_human(c.wall.mean)} "
                           f"({c.final.n} seeds)")
                    pts.append(Point(c.wall.mean, c.final.mean, "../" * depth + c.runs[0]["entry"].href, tip,
                                     c.final.half_width, name))
                front = agg.pareto_front([(p.x, p.y) for p in pts], c0.higher)
                plots.append(pareto_plot(pts, front, xlabel=f"training wall time (s) on {hw}",
                                         ylabel=c0.metric, title=f"Speed against {c0.metric}{title_suffix} · {hw}",
                                         higher_is_better=c0.higher))
        eval_series, loss_series = [], []
        for c in agg.rank_cells(cells)[:16]:
            name = c.norm + (f" ({c.placement})" if c.placement else "") + (f" · {c.hardware}"
                                                                         if len({x.hardware for x in cells}) > 1
                                                                         else "")
            href = "../" * depth + c.runs[0]["entry"].href
            ev = agg.mean_curve(c.runs, 2, log=S.is_log_metric(c.metric))
            lo = agg.mean_curve(c.runs, 1)
            if ev:
                eval_series.append(Series(name, [Point(s, v, href, f"{name} step {int(s)}: {fmt_metric(v, c.metric)}")
                                                 for s, v in ev]))
            if lo:
                loss_series.append(Series(name, [Point(s, v, href, f"{name} step {int(s)}: loss {v:.4g}")
                                                 for s, v in lo]))
        if any(len(s.points) > 1 for s in eval_series):
            plots.append(line_plot(eval_series, xlabel="step", ylabel=c0.metric, ymin_zero=False,
                                   title=f"Training curves: {c0.metric}{title_suffix} (mean over seeds)"))
        if any(len(s.points) > 1 for s in loss_series):
            plots.append(line_plot(loss_series, xlabel="step", ylabel="train loss", ymin_zero=False,
                                   title=f"Training curves: train loss{title_suffix} (mean over seeds)"))
        return [p for p in plots if p]

    def accuracy_page(self) -> str:
        body = ['<p class="muted">One table per task and model. Each row combines the seeds of one norm with '
                "everything else equal. Rows rank by divergence rate first (diverged seeds are results, counted in "
                "the <em>diverged</em> column), then by the final metric over the seeds that finished: the mean with "
                "its 95 % Student-t interval for accuracy, the geometric mean with an interval on log values for "
                "perplexity. Flagged runs are listed (⚠) and never counted; learning-rate search runs are listed "
                "apart and never ranked. Offline tasks are synthetic smoke tests and never mix with real tasks. "
                'Paper claims: <a href="claims.html">claims</a>.</p>']
        tables = self._acc_tables()
        if not tables:
            body.append('<p class="notice">No accuracy results yet: run <code>normbench train --quick</code>.</p>')
        else:
            body.append("<ul class='toc'>" + "".join(
                f'<li><a href="#{esc(slug("t", *map(str, k)))}">{esc(k[1])} · {esc(k[2])}{_variant_label(k[4])}</a> '
                f"{self._task_badges(k[0], k[3])}</li>" for k, _ in tables) + "</ul>")
        for key, cells in tables:
            offline, task, model, quick, variant = key
            c0 = cells[0]
            body.append(f'<section id="{esc(slug("t", *map(str, key)))}"><h2>{esc(task)} · {esc(model)}'
                        f"{_variant_label(variant)} {self._task_badges(offline, quick)}</h2>")
            target = f"; target {fmt_metric(c0.target, c0.metric)}" if c0.target is not None else ""
            body.append(f'<p class="muted">Metric: {esc(_metric_label(c0.metric, c0.higher))}{esc(target)}. '
                        f'Recipe: <a href="methodology.html#{esc(slug("recipe", task, model))}">methodology</a>.</p>')
            ranked = [c for c in cells if not c.tuning]
            if ranked:
                body.append(self.acc_table(slug("at", *map(str, key)), ranked))
            body.append(self.tuning_list(cells))
            plots = self.acc_plots(ranked) if ranked else []
            if plots:
                body.append('<div class="plots">' + "".join(plots) + "</div>")
            body.append("</section>")
        return page("Accuracy leaderboard", "\n".join(body), self.info, active="accuracy.html")

    # --- claims --------------------------------------------------------------------------------------------------

    def claims_page(self) -> str:
        """Each paper claim's verdict, from the same evaluation as ``normbench claims`` (normbench.claims)."""
        from normbench import claims as C

        results = C.evaluate(e.rec for e in self.loaded.entries)
        counts = {v: sum(c["verdict"] == v for c in results) for v in C.VERDICTS}
        body = [f"<p>{len(results)} claims from the papers behind the norm zoo, each decided by rules fixed before the "
                f"runs ({esc(', '.join(f'{n} {v}' for v, n in counts.items()))}). Effects are A against B: a ratio "
                "of geometric means for perplexity and steps (below 1: A lower), a difference for accuracy, a "
                "speed-up for kernels. p(claim) and p(refute) are Holm-corrected over all "
                f"{sum(len(c['comparisons']) for c in results)} comparisons; α = {C.ALPHA}. Same output: "
                "<code>normbench claims --json</code>. Rules: "
                '<a href="methodology.html#accuracy-method">methodology</a>.</p>']
        rows = []
        for c in results:
            comps = []
            for r in c["comparisons"]:
                if r["decidable"]:
                    fail = (f"; failed {r['failed_a']}/{r['failed_b']}" if r["type"] == "accuracy"
                            and (r["failed_a"] or r["failed_b"]) else "")
                    detail = (f"{esc(r.get('effect_text') or '–')} · n {r['n_a']}/{r['n_b']}{esc(fail)} · "
                              f"test {esc(r['test'])} · {'Welch' if r['type'] == 'accuracy' else 't'} p "
                              f"{C._p(r.get('p_welch'))}, "
                              f"{'Mann–Whitney' if r['type'] == 'accuracy' else 'Wilcoxon'} p "
                              f"{C._p(r.get('p_mann_whitney'))} · p(claim) {C._p(r['p_for_holm'])}, "
                              f"p(refute) {C._p(r['p_against_holm'])} · {esc(r.get('hardware') or '')}")
                else:
                    detail = "cannot decide yet: " + esc(r["reason"])
                comps.append(f"<li><strong>{esc(r['label'])}</strong> → <span class='verdict "
                             f"{esc(_slug_verdict(r['verdict']))}'>{esc(r['verdict'])}</span><br>"
                             f"<span class='muted'>{detail}</span></li>")
            missing = "".join(f"<li><code>{esc(m)}</code></li>" for m in c["missing"])
            rows.append(
                f"<tr id='{esc(slug('claim', c['id']))}'><td><strong>{esc(c['claim'])}</strong><br>"
                f"<span class='muted'>{link(c['url'], c['paper'])}</span></td>"
                f"<td><span class='verdict {esc(_slug_verdict(c['verdict']))}'>{esc(c['verdict'])}</span><br>"
                f"<span class='muted'>{esc(c['why'])}</span></td>"
                f"<td><ul class='comparisons'>{''.join(comps)}</ul>"
                + (f"<div class='muted'>missing runs:</div><ul>{missing}</ul>" if missing else "")
                + f"</td><td class='muted'>{esc(c['scale_caveat'])}"
                + (f"<br>{esc(c['note'])}" if c["note"] else "") + "</td></tr>")
        body.append('<div class="table-wrap"><table class="lb wrapping claims"><thead><tr><th>claim</th>'
                    "<th>verdict</th><th>comparisons</th><th>scale caveat</th></tr></thead><tbody>"
                    + "".join(rows) + "</tbody></table></div>")
        return page("Paper claims", "\n".join(body), self.info, active="claims.html")

    # --- norms ---------------------------------------------------------------------------------------------------

    def norms_index(self) -> str:
        rows = []
        for name in sorted(self.norm_meta):
            m = self.norm_meta[name]
            paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
            year = paper.get("year") if isinstance(paper.get("year"), int) else None
            nk = sum(r["norm"] == name for r in self.kernels)
            na = sum(r["norm"] == name for r in self.acc_rows)
            rows.append(Row([
                (self.norm_link(name), name),
                (esc(_s(m.get("title"))), _s(m.get("title"))),
                (esc(_s(m.get("family"))), _s(m.get("family"))),
                (esc(_s(m.get("kind"))), _s(m.get("kind"))),
                (link(paper.get("url"), _s(paper.get("title")) or "paper"), _s(paper.get("title"))),
                (str(year or "–"), float(year) if year else None),
                (str(nk), float(nk)), (str(na), float(na)),
                (esc(_s(m.get("package"))), _s(m.get("package"))),
            ], filters={"family": _s(m.get("family")), "kind": _s(m.get("kind"))}))
        cols = [Col("name"), Col("title"), Col("family"), Col("kind"), Col("paper"), Col("year", True),
                Col("kernel results", True), Col("training runs", True), Col("package")]
        body = table("norms", cols, rows, filters=[("family", "family"), ("kind", "kind")], search="find",
                     cls="wrapping")
        return page("Norms", body, self.info, active="norms.html",
                    lead="Every norm with results, as described by the records themselves (so a plugin's norm shows "
                         "here even where the plugin is not installed).")

    def norm_page(self, name: str) -> str:
        m = self.norm_meta[name]
        paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
        authors, ptitle = _s(paper.get("authors")), _s(paper.get("title"))
        year = paper.get("year") if isinstance(paper.get("year"), int) else ""
        url = paper.get("url")
        body = ['<div class="norm-meta"><dl>']
        layouts = m.get("layouts") if isinstance(m.get("layouts"), list) else []
        backends = m.get("backends") if isinstance(m.get("backends"), list) else []
        facts = [
            ("name", f"<code>{esc(name)}</code>"),
            ("family", esc(_s(m.get("family")))),
            ("kind", esc(_s(m.get("kind")))),
            ("layouts", esc(", ".join(str(x) for x in layouts))),
            ("backends", esc(", ".join(str(x) for x in backends))),
            ("batch dependent", "yes" if m.get("batch_dependent") is True else "no"),
            ("running state", "yes" if m.get("running_state") is True else "no"),
            ("package", esc(_s(m.get("package"))) + (f" {esc(_s(m.get('package_version')))}"
                                                    if _s(m.get("package_version")) else "")),
        ]
        for k, v in facts:
            body.append(f"<dt>{esc(k)}</dt><dd>{v or '–'}</dd>")
        paper_html = link(url, ptitle or "paper")
        if url and safe_url(url) is None:
            paper_html += ' <span class="muted">(link not shown: not an http(s) address)</span>'
        body.append(f"<dt>paper</dt><dd>{paper_html}<br><span class='muted'>{esc(authors)}"
                    f"{', ' if authors and year else ''}{esc(year)}</span></dd>")
        body.append("</dl>")
        formula = _s(m.get("formula"))
        if formula:
            body.append(f'<div class="formula"><div class="muted">formula</div><pre>{esc(formula)}</pre></div>')
        body.append("</div>")
        if _s(m.get("notes")):
            body.append(f'<p class="notes">{esc(m["notes"])}</p>')
        krows = [r for r in self.kernels if r["norm"] == name]
        body.append("<h2>Kernel results</h2>")
        if krows:
            plots = self.gbps_plots(krows, 1, MAX_PLOTS_PER_NORM, "", with_hw=True)
            plots += self.shape_bars(krows, 1, MAX_PLOTS_PER_NORM - len(plots))
            if plots:
                body.append('<div class="plots">' + "".join(plots) + "</div>")
            body.append(self.kernel_table("kernels-" + slug(name), krows, depth=1,
                                          with_hw=len({r["hardware"] for r in krows}) > 1, with_norm=False))
        else:
            body.append('<p class="muted">No kernel results for this norm yet.</p>')
        cells = [c for c in self.cells if c.norm == name]
        body.append("<h2>Accuracy results</h2>")
        if cells:
            by_table: dict[tuple, list] = {}
            for c in cells:
                by_table.setdefault(c.table_key, []).append(c)
            for key in sorted(by_table, key=lambda k: (k[0], k[3], k[1], k[2])):
                offline, task, model, quick, variant = key
                cs = by_table[key]
                body.append(f"<h3>{esc(task)} · {esc(model)}{_variant_label(variant)} "
                            f"{self._task_badges(offline, quick)}</h3>")
                ranked = [c for c in cs if not c.tuning]
                if ranked:
                    body.append(self.acc_table("acc-" + slug(name, *map(str, key)), ranked, depth=1))
                body.append(self.tuning_list(cs, depth=1))
                cs = ranked or cs
                all_cells = [c for c in self.cells if c.table_key == key]
                plots = self.acc_plots(cs, depth=1) if len(all_cells) < 2 else \
                    [p for p in self.acc_plots(cs, depth=1) if "Training curves" in p]
                if plots:
                    body.append('<div class="plots">' + "".join(plots) + "</div>")
                body.append(f'<p><a href="../accuracy.html#{esc(slug("t", *map(str, key)))}">Compare with the other '
                            "norms on this task</a></p>")
        else:
            body.append('<p class="muted">No training runs with this norm yet.</p>')
        title = _s(m.get("title")) or name
        return page(title, "\n".join(body), self.info, depth=1, active="norms.html")

    # --- hardware, methodology, rejected -----------------------------------------------------------------------

    def hardware_page(self) -> str:
        body = ['<p class="muted">Where each result was measured. A machine is identified by its hardware id; '
                "all software versions seen in its records are listed.</p>"]
        if not self.hw_entries:
            body.append('<p class="notice">No results yet.</p>')
        for hw in sorted(self.hw_entries):
            entries = self.hw_entries[hw]
            provs = [e.rec["provenance"] for e in entries]
            h = provs[-1].get("hardware") if isinstance(provs[-1].get("hardware"), dict) else {}

            def seen(key, ps=provs):
                return ", ".join(sorted({str(p.get(key)) for p in ps if p.get(key) not in (None, "")})) or "–"

            ts = sorted(_s(p.get("timestamp")) for p in provs if _s(p.get("timestamp")))
            kr = [r for r in self.kernels if r["hardware"] == hw]
            ceil = sorted(r["ceiling"] for r in kr if r["ceiling"])
            methods = sorted({m for r in kr if isinstance(m := r["entry"].rec["metrics"].get("ceiling_method"), str)})
            peak = sorted({r["datasheet"] for r in kr if r["datasheet"]})
            commits = sorted({_s(p.get("git_commit"))[:10] for p in provs if _s(p.get("git_commit"))})
            plugins = sorted({f"{k} {v}" for p in provs if isinstance(p.get("plugins"), dict)
                              for k, v in p["plugins"].items()})
            commands = Counter(_s(p.get("command")) for p in provs if _s(p.get("command")))
            facts = [
                ("CPU", esc(_s(h.get("cpu")))),
                ("cores / threads", f"{esc(h.get('cores'))} / {esc(h.get('threads'))}"),
                ("GPU", esc(_s(h.get("gpu")) or "none")),
                ("GPU memory", f"{esc(h.get('gpu_memory_gb'))} GB" if num(h.get("gpu_memory_gb")) else "–"),
                ("driver / CUDA", f"{esc(h.get('driver') or '–')} / {esc(h.get('cuda') or '–')}"),
                ("copy ceiling (measured)", (f"{fmt_gbps(ceil[len(ceil) // 2])} median, {fmt_gbps(ceil[0])} – "
                                             f"{fmt_gbps(ceil[-1])}") if ceil else "–"),
                ("ceiling method", "<br>".join(esc(m) for m in methods[:5]) or "–"),
                ("datasheet peak", ", ".join(fmt_gbps(p) for p in peak) or "–"),
                ("platform", esc(seen("platform"))),
                ("Python", esc(seen("python"))), ("torch", esc(seen("torch"))), ("Triton", esc(seen("triton"))),
                ("normbench", esc(seen("normbench_version")) + (f" (commits {esc(', '.join(commits))})"
                                                                if commits else "")),
                ("plugins", esc(", ".join(plugins)) or "–"),
                ("records", f"{len(kr)} kernel, {sum(r['hardware'] == hw for r in self.acc_rows)} accuracy"),
                ("taken", esc(f"{ts[0]} – {ts[-1]}") if ts else "–"),
                ("commands", "<br>".join(f"<code>{esc(c)}</code> <span class='muted'>×{n}</span>"
                                         for c, n in commands.most_common(5)) or "–"),
            ]
            body.append(f'<section id="{esc(slug("hw", hw))}" class="hw"><h2>{esc(hw)}</h2><dl>'
                        + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl></section>")
        return page("Hardware", "\n".join(body), self.info, active="hardware.html")

    def methodology_page(self) -> str:
        toc = [("reading", "Reading the tables")] + [(a, t) for a, k, t in DOCS if k in self.docs or k in REQUIRED_DOCS]
        toc += [("bytes", "Bytes models in the records"), ("recipes", "Recipes in the records")]
        body = ['<nav class="toc">' + " · ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in toc) + "</nav>"]
        body.append("""<section id="reading"><h2>Reading the tables</h2><ul>
<li><strong>time</strong>: median over timed repetitions (hover for the interquartile range and the count). CPU timings
use <code>time.perf_counter</code> with a fixed thread count; GPU timings use CUDA events with the L2 cache flushed
between repetitions (<em>cold</em>) unless labelled <em>hot</em> (events, no flush) or <em>host</em> (a host clock
around a synchronised call, as pytest-benchmark and ASV time: launch overhead included, no flush).</li>
<li><strong>GB/s</strong>: the minimum bytes the norm must move for that pass (its documented formula) divided by the
median time.</li>
<li><strong>% ceiling</strong>: GB/s as a share of the copy bandwidth measured on the same machine in the same run.
A result above the ceiling means the data stayed in cache: it is flagged <em>suspect</em> and never ranked.</li>
<li><strong>flags</strong>: a badge next to the backend marks a record that is shown but never ranked (hover for the
reason): <em>suspect</em> (above the copy ceiling), <em>noisy</em> (measured on a busy machine: background load or an
unsteady copy ceiling), <em>fell_back</em> (compiled code that ran eager), <em>unchecked</em>/<em>forced</em> (not
passing <code>normbench check</code>), <em>tuning</em>. A <em>non_finite</em> record (NaN or inf in the output or a
gradient) is invalid: its row reads <em>failed</em> and its numbers are used nowhere.</li>
<li><strong>vs eager</strong>: eager PyTorch's median time divided by this backend's, same norm, shape, dtype and pass.
</li>
<li><strong>err y</strong>: maximum absolute error of the output against a float64 reference (hover for dx and dw).</li>
<li><strong>mean [95 % CI]</strong>: over the seeds that finished; mean ± t<sub>0.975, n−1</sub>·s/√n (Student t).
Perplexity uses the <strong>geometric mean</strong> and the same interval on log perplexity, mapped back. Seeds combine
only when every other setting is equal. Diverged seeds count in the divergence rate, which ranks before the metric.
Flagged runs (⚠) are shown and never counted; learning-rate search runs are listed apart and never ranked.</li>
<li><strong>Pareto front</strong>: the norms no other norm beats on both training time and final quality.</li>
</ul></section>""")
        for anchor, key, title in DOCS:
            if key not in self.docs and key not in REQUIRED_DOCS:
                continue
            text = self.docs.get(key)
            if text is not None:
                # The document's own title, when it has one, heads its section.
                m = re.match(r"\s*#\s+(.+?)\s*#*\s*(\n|$)", text)
                if m:
                    title, text = m.group(1), text[m.end():]
            body.append(f'<section id="{anchor}" class="doc"><h2>{markdown.inline(title)}</h2>')
            if text is not None:
                body.append(markdown.render(text, heading_offset=1))
            else:
                body.append(f'<p class="muted">docs/{esc(key)} is not written yet.</p>')
            body.append("</section>")
        bm: dict[str, dict] = {}
        for r in self.kernels:
            cfg = r["entry"].rec["config"]
            model = cfg.get("bytes_model")
            if isinstance(model, dict) and isinstance(model.get("formula"), str):
                bm.setdefault(model["formula"], {"norms": set(), "example": model})["norms"].add(r["norm"])
        body.append('<section id="bytes"><h2>Bytes models in the records</h2>')
        if bm:
            for formula in sorted(bm):
                norms = ", ".join(sorted(bm[formula]["norms"]))
                body.append(f"<h3><code>{esc(formula)}</code></h3><p class='muted'>used by {esc(norms)}</p>"
                            f"<pre>{esc(json.dumps(bm[formula]['example'], indent=1, sort_keys=True, default=str))}"
                            "</pre>")
        else:
            body.append('<p class="muted">No record states its bytes model.</p>')
        body.append("</section>")
        body.append('<section id="recipes"><h2>Recipes in the records</h2>')
        recipes: dict[tuple, set] = {}
        for r in self.acc_rows:
            try:
                text = json.dumps(r["recipe"], indent=1, sort_keys=True, default=str)
            except (TypeError, ValueError):
                text = str(r["recipe"])
            recipes.setdefault((r["task"], r["model"]), set()).add(text)
        if not recipes:
            body.append('<p class="muted">No training runs yet.</p>')
        for (task, model), texts in sorted(recipes.items()):
            body.append(f'<h3 id="{esc(slug("recipe", task, model))}">{esc(task)} · {esc(model)}</h3>')
            for text in sorted(texts):
                body.append(f"<pre>{esc(text)}</pre>")
        body.append("</section>")
        return page("Methodology", "\n".join(body), self.info, active="methodology.html")

    def rejected_page(self) -> str:
        body = []
        rej = self.loaded.rejected
        if rej:
            body.append(f"<p>{len(rej)} file(s) or record(s) failed validation. They are not on the leaderboard. "
                        "Fix or remove them; <code>normbench validate PATH</code> lists the same problems.</p>")
            rows = "".join(
                f"<tr><td><code>{esc(r.path)}</code></td><td>{esc(r.label)}</td><td><ul>"
                + "".join(f"<li>{esc(p)}</li>" for p in r.problems[:20])
                + (f"<li>… and {len(r.problems) - 20} more</li>" if len(r.problems) > 20 else "")
                + "</ul></td></tr>" for r in rej)
            body.append('<div class="table-wrap"><table class="lb wrapping rejected"><thead><tr><th>file</th>'
                        f"<th>record</th><th>problems</th></tr></thead><tbody>{rows}</tbody></table></div>")
        else:
            body.append("<p>Every record is valid.</p>")
        if self.loaded.superseded:
            body.append("<h2>Superseded</h2><p class='muted'>Records sharing an id with a newer record; the newer one "
                        "is shown.</p><ul>" + "".join(
                            f"<li><code>{esc(old.path)}</code> [{old.index}] id {esc(old.rid)} → "
                            f"{self.rec_link(new, 0, new.path)}</li>" for old, new in self.loaded.superseded) + "</ul>")
        return page("Rejected records", "\n".join(body), self.info, active="rejected.html")

    def pages(self):
        yield "index.html", self.overview()
        yield "kernels.html", self.kernels_page()
        yield "accuracy.html", self.accuracy_page()
        yield "claims.html", self.claims_page()
        yield "norms.html", self.norms_index()
        for name in sorted(self.norm_meta):
            yield norm_file(name), self.norm_page(name)
        yield "hardware.html", self.hardware_page()
        yield "methodology.html", self.methodology_page()
        yield "rejected.html", self.rejected_page()


#: (anchor, file in docs/, heading) rendered on the methodology page; the required ones say when they are missing.
DOCS = (("measurement", "measurement.md", "Measurement"), ("accuracy-method", "accuracy.md", "Accuracy"),
        ("kernels-doc", "kernels.md", "Kernels"), ("norms-doc", "norms.md", "The norm zoo"))
REQUIRED_DOCS = ("measurement.md", "accuracy.md")


def read_docs(docs_dir: Path | None) -> dict[str, str]:
    out = {}
    if docs_dir is None:
        return out
    for _, key, _ in DOCS:
        p = docs_dir / key
        if p.is_file():
            try:
                # The markers around generated blocks (normbench.gendocs) are for the generator, not the reader.
                out[key] = MARKER_LINE.sub("", p.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                pass
    return out


def _slug_verdict(v: str) -> str:
    return v.replace(" ", "-")


def _variant_label(variant: str) -> str:
    return "" if variant == "default" else f" · {esc(variant)}"
