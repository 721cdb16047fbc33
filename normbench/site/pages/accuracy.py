"""The accuracy leaderboard and each accuracy table's page (a task and model on one machine).
"""

from __future__ import annotations

import functools

from normbench import stats as S
from normbench.site import aggregate as agg
from normbench.site.fmt import fmt_metric, fmt_seconds_human, num
from normbench.site.pages.base import Page, norm_file
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug
from normbench.site.tables import Col, Table, cell


class AccuracyPages(SiteCore):
    """The accuracy pages of a ``Site``."""

    @functools.cached_property
    def _acc_tables(self) -> list[tuple[tuple, list]]:
        """The accuracy tables (``Cell.table_key`` -> its cells), in ``table_order``."""
        tables: dict[tuple, list] = {}
        for c in self.cells:
            tables.setdefault(c.table_key, []).append(c)
        return sorted(tables.items(), key=lambda kv: self.table_order(kv[0]))

    @functools.cached_property
    def _ranked_tables(self) -> dict[tuple, list]:
        """``agg.rank_cells`` of each accuracy table's cells, once per build: the overview, the accuracy page, each
        table's page and every norm's page read them."""
        return {key: agg.rank_cells(cells) for key, cells in self._acc_tables}

    @staticmethod
    def table_order(key: tuple) -> tuple:
        """Where a table (``Cell.table_key``) goes: real tasks first, full budgets before quick ones, then task,
        model, the default variant before the others, and machine."""
        offline, task, model, quick, variant, hardware = key
        return (offline, quick, task, model, variant != "default", variant, hardware)

    @staticmethod
    def cell_page_file(key: tuple) -> str:
        offline, task, model, quick, variant, hardware = key
        return f"accuracy/{slug(task, model, variant, 'quick' if quick else 'full', hardware)}.html"

    @staticmethod
    def table_title(key: tuple) -> str:
        offline, task, model, quick, variant, hardware = key
        return f"{task} · {model}" + ("" if variant == "default" else f" · {variant}") + f" on {hardware}"

    def _mean_ci(self, c) -> tuple[str, str]:
        st = c.final
        if st.mean is None:
            return "no finished run", ""
        s = fmt_metric(st.mean, c.metric)
        if st.low is None:
            return s, "one finished seed: no interval"
        tip = (f"geometric mean over {st.n} finished seeds; 95 % CI from a t-interval of log values; sd of log "
               f"{st.std:.3g}" if st.log else f"mean over {st.n} finished seeds; 95 % CI (Student t); "
                                              f"sd {fmt_metric(st.std, c.metric)}")
        return f"{s} [{fmt_metric(st.low, c.metric)}, {fmt_metric(st.high, c.metric)}]", tip

    def _vs_ref(self, c) -> tuple[str, str, float | None]:
        memo = self.__dict__.setdefault("_vs", {})   # a cell's line on its norm's page and in its table
        got = memo.get(id(c))
        if got is None or got[0] is not c:
            got = memo[id(c)] = (c, self._versus_ref(c))
        return got[1]

    def _versus_ref(self, c) -> tuple[str, str, float | None]:
        ref = agg.reference_cell(c, self.cells)
        if ref is None:
            return ("reference" if S.reference_of(c.model) == (c.norm, c.placement) else ""), "", None
        d = S.versus(c.values, ref.values, log=S.is_log_metric(c.metric))
        if d is None:
            return "too few finished seeds", "", None
        name = ref.norm + (f" ({ref.placement})" if ref.placement else "")
        return S.versus_text(d, c.metric), f"against {name}", d.p

    @staticmethod
    def _lr(c) -> str:
        lrs = sorted({str(r["recipe"].get("lr")) for r in c.runs if r["recipe"].get("lr") is not None})
        return ", ".join(lrs) or "–"

    def _cell_summary(self, c, rank: int, of: int, up: str, key: tuple) -> dict:
        mean, tip = self._mean_ci(c)
        return {"title": self.table_title(key), "href": up + self.cell_page_file(key), "placement": c.placement,
                "rank": rank, "of": of, "mean": mean, "tip": tip, "diverged": c.n_diverged, "n": c.n,
                "lr": self._lr(c), "tuned": c.tuned, "metric": c.metric, "hardware": c.hardware,
                "vs": self._vs_ref(c)[0], "offline": key[0], "quick": key[3]}

    def seed_links(self, c, up: str) -> list[tuple[str, str, str]]:
        out = []
        for r in c.runs:
            label = f"s{int(r['seed'])}" if r["seed"] is not None else "run"
            why = ""
            if r["status"] == "diverged":
                label, why = label + "✗", "diverged"
            elif r["status"] == "flagged":
                label, why = label + "⚠", "flagged: " + ", ".join(r["flags"])
            out.append((label, self.rec_href(r["entry"], up), why))
        return out

    def acc_table(self, tid: str, cells: list, up: str) -> Table:
        c0 = cells[0]
        centre = "geometric mean" if S.is_log_metric(c0.metric) else "mean"
        cols = [Col("#", True, sorted="ascending"), Col("norm"), Col("placement"),
                Col(f"{c0.metric} {centre} [95 % CI]", True, _metric_label(c0.metric, c0.higher)),
                Col("best", True, "best evaluation over training, mean over seeds"),
                Col("time to target", True, "mean over the seeds that reached the target (k/n reached)"),
                Col("diverged", True, "seeds whose loss became NaN/inf, of the counted seeds; ranks first"),
                Col("vs reference", True, "against the table's reference (LayerNorm, Pre-LN in GPT tables; BatchNorm "
                    "in ResNet tables): ratio of geometric means (perplexity) or difference (accuracy) with its 95 % "
                    "Welch interval; Welch p, Mann–Whitney p; not corrected for multiple comparisons"),
                Col("lr", True, "learning rate of the counted runs (chosen by the search on the validation split "
                    "when tuned)"),
                Col("wall time", True, "training wall time, mean over seeds"), Col("seeds", True), Col("records")]
        t = Table(tid, cols, filters=[("placement", "placement")])  # one machine's table (its title names it)
        for i, c in enumerate(agg.rank_cells(cells)):
            if c.ttt.mean is not None:
                tgt = cell(fmt_seconds_human(c.ttt.mean), c.ttt.mean, note=f"({c.n_reached}/{c.n})")
            elif c.target is not None:
                tgt = cell(f"not reached (0/{c.n})", None, cls="muted")
            else:
                tgt = cell("no target", None, cls="muted")
            mean, tip = self._mean_ci(c)
            vs, vtip, vp = self._vs_ref(c)
            div = f"{c.n_diverged}/{c.n}"
            seeds = self.seed_links(c, up)
            t.add([
                cell(i + 1, float(i + 1)),
                cell(c.norm, f"{c.norm} {c.options}".strip(), href=up + norm_file(c.norm), note=c.options or None),
                cell(c.placement or "–", c.placement or ""),
                cell(mean, c.final.mean, title=tip, cls="muted" if c.final.mean is None else None),
                cell(fmt_metric(c.best.mean, c.metric), c.best.mean), tgt,
                cell(div, c.divergence_rate, cls="warn" if c.n_diverged else None,
                     note=f"+{c.n_flagged} flagged" if c.n_flagged else None),
                cell(vs, vp, title=vtip, cls="muted" if vp is None else None),
                cell(self._lr(c), num(c.runs[0]["recipe"].get("lr")), note="tuned" if c.tuned else None),
                cell(fmt_seconds_human(c.wall.mean), c.wall.mean), cell(c.n, float(c.n)),
                cell(" ".join(s[0] for s in seeds), None, href=seeds[0][1] if seeds else None,
                     title="records: see the seed table on the cell page"),
            ], {"placement": c.placement or ""}, "diverged" if c.final.mean is None else "")
        return t

    def tuning_rows(self, cells: list, up: str) -> list[dict]:
        """The learning-rate search runs of a table: shown so the choice can be checked, never ranked."""
        out = []
        for c in sorted((c for c in cells if c.tuning), key=lambda c: (c.norm, c.placement or "",
                                                                       str(c.recipe.get("lr")))):
            fin = [r["final"] for r in c.runs if r["final"] is not None]
            val = S.summarize(fin, log=S.is_log_metric(c.metric)).mean
            out.append({"norm": c.norm, "href": up + norm_file(c.norm), "placement": c.placement or "–",
                        "lr": c.recipe.get("lr", "–"), "value": fmt_metric(val, c.metric) if val is not None else "–",
                        "diverged": f"{sum(r['diverged'] for r in c.runs)}/{len(c.runs)}",
                        "seeds": self.seed_links(c, up)})
        return out

    def accuracy_page(self) -> Page:
        tables = []
        for key, cells in self._acc_tables:
            ranked = [c for c in cells if not c.tuning]
            c0 = cells[0]
            tables.append({"key": key, "title": self.table_title(key), "href": self.cell_page_file(key),
                           "anchor": slug("t", *map(str, key)), "offline": key[0], "quick": key[3],
                           "metric": _metric_label(c0.metric, c0.higher),
                           "table": self.acc_table(slug("at", *map(str, key)), ranked, "") if ranked else None,
                           "n_tuning": sum(len(c.runs) for c in cells if c.tuning)})
        # Per norm across cells: its rank and centre in every table it appears in.
        summary = Table("acc-summary", [Col("norm")] + [Col(t["title"], True, t["metric"]) for t in tables],
                        search=False, cls="narrow")
        for n in sorted({c.norm for c in self.cells if not c.tuning}):
            row = [cell(n, n, href=norm_file(n))]
            for key, ranked in self._ranked_tables.items():
                mine = [c for c in ranked if c.norm == n]
                if not mine:
                    row.append(cell("–"))
                    continue
                c = mine[0]
                mean, tip = self._mean_ci(c)
                row.append(cell(f"#{ranked.index(c) + 1}/{len(ranked)}", float(ranked.index(c) + 1),
                                href=self.cell_page_file(key), note=fmt_metric(c.final.mean, c.metric)
                                if c.final.mean is not None else "no finished run",
                                title=f"{mean}; {c.n_diverged}/{c.n} diverged" + (f" ({c.placement})"
                                                                                   if c.placement else "")))
            summary.add(row)
        return Page("accuracy.html", "accuracy.html", "Accuracy leaderboard", active="accuracy.html",
                    ctx=dict(tables=tables, summary=summary if tables else None))

    def cell_page(self, key: tuple, cells: list) -> Page:
        p = Page(self.cell_page_file(key), "cell.html", self.table_title(key), active="accuracy.html",
                 crumbs=[("accuracy.html", "Accuracy")])
        up = p.up
        ranked = self._ranked_tables[key]
        c0 = cells[0]
        import pandas as pd

        seeds, curves = [], []
        for order, c in enumerate(ranked):
            name = c.norm + (f" ({c.placement})" if c.placement else "") + (f" {c.options}" if c.options else "")
            for r in c.runs:
                if r["status"] not in ("ok", "diverged"):
                    continue
                href = self.rec_href(r["entry"], up)
                seeds.append({"norm": name, "order": order, "seed": int(r["seed"] or 0), "value": r["final"],
                              "diverged": r["status"] == "diverged" or r["final"] is None,
                              "centre": c.final.mean, "ci_lo": c.final.low, "ci_hi": c.final.high,
                              "lr": num(r["recipe"].get("lr")), "url": href,
                              "label": f"{name} seed {r['seed']}: " + ("diverged" if r["final"] is None
                                                                       else fmt_metric(r["final"], c.metric))})
                for step, _loss, ev in r["curve"]:
                    if ev is not None:
                        curves.append({"norm": name, "seed": int(r["seed"] or 0), "step": step, "value": ev,
                                       "url": href})
        figs = []
        if seeds:
            figs.append(self.figure("accuracy_seed_chart", pd.DataFrame(seeds), slug("seeds", *map(str, key)),
                                    f"{self.table_title(key)}: final {c0.metric} of every seed per norm, with the "
                                    "95 % interval; diverged seeds marked at the edge", metric=c0.metric,
                                    higher_is_better=c0.higher, title=f"final {c0.metric} per seed"))
        if curves:
            figs.append(self.figure("training_curves_chart", pd.DataFrame(curves), slug("curves", *map(str, key)),
                                    f"{self.table_title(key)}: {c0.metric} during training, one line per seed, one "
                                    "colour per norm", metric=c0.metric, log_y=S.is_log_metric(c0.metric),
                                    title=f"{c0.metric} during training"))
        scatter = []
        for c in ranked:
            if c.final.mean is not None and c.wall.mean is not None:
                name = c.norm + (f" ({c.placement})" if c.placement else "")
                scatter.append({"norm": name, "x": c.wall.mean, "y": c.final.mean,
                                "url": self.rec_href(c.runs[0]["entry"], up),
                                "label": f"{name}: {fmt_metric(c.final.mean, c.metric)} in "
                                         f"{fmt_seconds_human(c.wall.mean)} ({c.final.n} seeds)"})
        if len(scatter) >= 2:
            front = set(agg.pareto_front([(d["x"], d["y"]) for d in scatter], c0.higher))
            for i, d in enumerate(scatter):
                d["front"] = i in front
            figs.append(self.figure("scatter_chart", pd.DataFrame(scatter), slug("sc", *map(str, key)),
                                    f"{self.table_title(key)}: training wall time against final {c0.metric}",
                                    x="x", y="y", label="norm", x_title="training wall time (s)",
                                    y_title=c0.metric, title=f"time against {c0.metric}"))
        figs = [f for f in figs if f]
        seed_rows = []
        for c in ranked:
            for r in c.runs:
                seed_rows.append({"norm": c.norm, "placement": c.placement or "–", "seed": r["seed"],
                                  "status": r["status"], "final": fmt_metric(r["final"], c.metric),
                                  "lr": r["recipe"].get("lr", "–"), "steps": r["steps"],
                                  "wall": fmt_seconds_human(r["wall"]), "href": self.rec_href(r["entry"], up),
                                  "flags": ", ".join(r["flags"])})
        p.charts = bool(figs)
        p.ctx = dict(key=key, offline=key[0], quick=key[3], metric=_metric_label(c0.metric, c0.higher),
                     target=fmt_metric(c0.target, c0.metric) if c0.target is not None else None,
                     table=self.acc_table(slug("ac", *map(str, key)), [c for c in cells if not c.tuning], up)
                     if ranked else None, tuning=self.tuning_rows(cells, up), figs=figs, seeds=seed_rows,
                     recipe_href=f"{up}methodology.html#{slug('recipe', key[1], key[2])}")
        return p


def _metric_label(metric: str, higher: bool) -> str:
    return f"{metric} ({'higher' if higher else 'lower'} is better)"
