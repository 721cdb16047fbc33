"""The kernel leaderboard (``kernels.html`` and, with many machines, each machine's part of it) and the kernel
records table every kernel page shows (``kernel_table``).
"""

from __future__ import annotations

import heapq

from normbench.records.schema import FLAGS
from normbench.site import aggregate as agg
from normbench.site import tables as _tables
from normbench.site.fmt import fmt_bytes, fmt_err, fmt_gbps, fmt_pct, fmt_shape, fmt_time, fmt_x
from normbench.site.pages.base import (
    FLAG_LABELS,
    FLAG_MEANINGS,
    Page,
    bound_text,
    device_file,
    flag_badges,
    norm_file,
)
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug
from normbench.site.tables import Col, Table, cell


class KernelPages(SiteCore):
    """The kernel leaderboard and kernel records tables of a ``Site``."""

    def kernel_table(self, tid: str, rows: list[dict], up: str, *, with_hw: bool = True,
                     with_norm: bool = True, srcs: list[str] | None = None, file: bool = False,
                     preview: int | None = None) -> Table:
        """The kernel records ``rows`` ranked by bandwidth. ``srcs``: the rows are in those data files (site-relative,
        each another table's: a norm's every-record table loads its per-device tables' files), so only the first
        rows are built for the page; ``file``: write this table's data file whatever its size (others load it)."""
        cols = [Col("device")] if with_hw else []
        cols += [Col("norm")] if with_norm else []
        cols += [
            Col("backend", title="hover a badge for why a record is flagged; flagged records are never ranked"),
            Col("shape", title="layout and tensor shape"), Col("width", True, "hidden size C"), Col("dtype"),
            Col("pass"), Col("class", title="shape class"),
            Col("time", True, "median over repetitions (hover: interquartile range); on a GPU the GPU's time, from "
                "CUDA events"),
            Col("host", True, "GPU records: the host's median time in one call, without a synchronisation; the note "
                "says which bounds a stream of these calls (host: it runs at the host's pace unless replayed as a "
                "CUDA graph)"),
            Col("GB/s", True, "minimum bytes moved / median time"),
            Col("% ceiling", True, "GB/s as a percentage of the DRAM copy bandwidth measured in the same run; "
                "cache-resident rows are not ranked by it", sorted="descending"),
            Col("% copy", True, "GB/s as a percentage of a copy_ of the case's own bytes timed the same way in the "
                "same run (the note: where its data lived); the share to compare across sizes"),
            Col("vs eager", True, "eager median time / this median time, same shape, dtype and pass"),
            Col("peak mem", True, "peak memory above the inputs"),
            Col("err y", True, "max |y - y_ref| against float64 (hover: dx, dw)"),
            Col("record", title="the result record this row comes from"),
        ]
        t = Table(tid, cols, filters=[("hardware", "device"), ("norm", "norm"), ("dtype", "dtype"), ("pass", "pass"),
                                      ("shape_class", "shape class"), ("backend", "backend"), ("timing", "timing"),
                                      ("layout", "layout"), ("harness", "harness"), ("ranked", "ranked")],
                  preview=preview)
        if srcs is not None:
            # The page holds the first rows (the data files hold every one): the best PREVIEW of them, and each
            # filter's values over all of them, not every row's filters (a norm's 3,300 rows at 100 machines).
            t.n_total = len(rows)
            t.all_options = self._kernel_options(rows)
            ranked = heapq.nsmallest(_tables.PREVIEW, rows, key=agg.bandwidth_key)
        else:
            ranked = agg.rank_by_bandwidth(rows)
        for r in ranked:
            e = r["entry"]
            bad = r["invalid"]
            iqr = f"IQR {fmt_time(r['iqr'])} over {int(r['reps'])} reps" if r["reps"] else ""
            errt = (f"y max_rel {fmt_err(r['err_y_rel'])} · dx max_abs {fmt_err(r['err_dx'])} · "
                    f"dw max_abs {fmt_err(r['err_dw'])}")
            cells = [cell(r["hardware"], r["hardware"], href=f"{up}{device_file(r['hardware'])}")] if with_hw else []
            if with_norm:
                cells.append(cell(r["norm"], r["norm"], href=up + norm_file(r["norm"])))
            cells += [
                cell(r["backend"], r["backend"], flags=flag_badges(r["flags"])),
                cell(fmt_shape(r["shape"]), float(r["elements"]) if r["elements"] else None, note=r["layout"]),
                cell(int(r["num_features"]) if r["num_features"] else "–", r["num_features"]),
                cell(r["dtype"], r["dtype"]),
                cell(r["pass"], r["pass"], note=None if r["timing"] in ("cold", "hot") and r["device"] == "cpu"
                     or r["timing"] == "cold" else r["timing"]),
                cell(r["shape_class"], r["shape_class"]),
                cell("failed", None, cls="failed", title=iqr) if bad else cell(fmt_time(r["time"]), r["time"],
                                                                                title=iqr),
                cell(fmt_time(r["host"]) if r["host"] else "–", r["host"],
                     note=f"{r['bound']}-bound" if r["bound"] and not bad else None, title=bound_text(r)),
                cell("–" if bad else fmt_gbps(r["gbps"]), None if bad else r["gbps"]),
                cell(fmt_pct(None if bad else r["pct"]), None if bad or not r["dram"] else r["pct"],
                     cls=None if r["dram"] else "muted",
                     title=None if r["dram"] else f"cache-resident ({r['cache']}): not ranked against the DRAM "
                                                  "ceiling"),
                cell(fmt_pct(None if bad else r["pct_copy"]), None if bad else r["pct_copy"],
                     note=r["cache"] if r["cache"] != "none" else None,
                     title=f"same-size copy {fmt_gbps(r['copy_gbps'])}; data in cache: {r['cache'] or 'unknown'} "
                           f"({r['cache_how']})"),
                cell(fmt_x(r["speedup"]), r["speedup"]),
                cell(fmt_bytes(r["peak_mem"]), r["peak_mem"]),
                cell(fmt_err(r["err_y"]), r["err_y"], title=errt),
                cell(e.rid[:10], e.rid, href=self.rec_href(e, up)),
            ]
            t.add(cells, self._kernel_filters(r), "invalid" if bad else ("flagged" if r["flagged"] else ""),
                  rank=agg.rank_json(agg.bandwidth_key(r)) if file else None)
        if not with_hw:
            t.filters = [f for f in t.filters if f[0] != "hardware"]
        if not with_norm:
            t.filters = [f for f in t.filters if f[0] != "norm"]
        if srcs is not None:
            t.src = " ".join(up + x for x in srcs) or None   # none: the first rows only (a page loads the rest)
            return t
        shard = t.shard(up, force=file)
        if shard:
            self.data_files[shard[0]] = shard[1]
        return t

    #: A kernel row's fields its tables filter on (``_kernel_filters``), besides whether it is ranked.
    FILTER_FIELDS = ("hardware", "norm", "dtype", "pass", "shape_class", "backend", "timing", "layout", "harness")

    @staticmethod
    def _ranked_state(r: dict) -> str:
        return "invalid" if r["invalid"] else ("flagged" if r["flagged"] else "ranked")

    @classmethod
    def _kernel_options(cls, rows: list[dict]) -> dict[str, list[str]]:
        """Each filter's distinct values (as texts, sorted) over ``rows``: ``Table.options`` of their
        ``_kernel_filters`` without making them."""
        out = {k: sorted({str(r[k]) for r in rows}) for k in cls.FILTER_FIELDS}
        out["ranked"] = sorted({cls._ranked_state(r) for r in rows})
        return out

    @classmethod
    def _kernel_filters(cls, r: dict) -> dict:
        return {**{k: r[k] for k in cls.FILTER_FIELDS}, "ranked": cls._ranked_state(r)}

    @staticmethod
    def leaderboard_file(hw: str) -> str:
        """A machine's rows of the kernel leaderboard (its best per case), in a many-machine site (site-relative)."""
        return Table(slug("kl", hw), []).data_path

    def kernels_part(self, hw: str):
        """A machine's rows of the leaderboard (``best_per_case`` is per machine, so the leaderboard is the union of
        these), each with its rank key, in one data file per machine that ``kernels.html`` loads together: a changed
        machine rewrites its own file, not a 13 MB one of every machine's rows. No page."""
        self.kernel_table(slug("kl", hw), self.rows_at(hw, self.machine_summary(hw)["per_case"]), "", file=True)
        return iter(())

    def kernels_page(self) -> Page:
        # best_per_case's key holds the machine: the union of each machine's is the leaderboard's (ranked below)
        rows = [r for hw in self.kernel_hws for r in self.rows_at(hw, self.machine_summary(hw)["per_case"])]
        # Many machines: the page holds the first rows; every row is in the machines' files (``kernels_part``).
        table = self.kernel_table("kernels", rows, "", srcs=[self.leaderboard_file(hw) for hw in self.kernel_hws]
                                  if self.many_site() else None)
        return Page("kernels.html", "kernels.html", "Kernel leaderboard", active="kernels.html", ctx=dict(
            table=table, n=len(self.kernels),
            flags=[(FLAG_LABELS.get(f, f), f, FLAG_MEANINGS.get(f, f)) for f in FLAGS],
            hws=[(hw, self.hw_name(hw), device_file(hw), len(self.by_hw[hw])) for hw in self.kernel_hws],
            norms=[(n, norm_file(n), len(self.by_norm[n])) for n in sorted(self.by_norm)]))
