"""The overview (``index.html``): the norm x device matrix (the devices page shows it too), each machine's top
results and each accuracy table's leaders.
"""

from __future__ import annotations

import functools

from normbench.site import pages
from normbench.site import tables as _tables
from normbench.site.fmt import fmt_gbps, fmt_pct, fmt_shape, fmt_time
from normbench.site.pages.base import FLAG_LABELS, LEGACY, Page, device_file, norm_file
from normbench.site.pages.core import SiteCore
from normbench.site.tables import Col, Table, cell


class OverviewPage(SiteCore):
    """The overview of a ``Site``."""

    def matrix(self) -> Table:
        """The overview's norm x device matrix (the devices page shows it too): each norm's best % of ceiling. With
        many machines (``many_site``) a machine per row, the best machines first, the rows beyond the first in
        ``data/matrix.js`` (written by the overview), so neither page grows with the machines."""
        if getattr(self, "_matrix", None) is None:
            self._matrix = self._make_matrix()
            if self.many_site() and len(self._matrix.rows) > _tables.DEEP_PREVIEW:
                self._matrix.preview = _tables.DEEP_PREVIEW
                self._matrix.src = self._matrix.data_path   # both pages are at the site's root
        return self._matrix

    @functools.cached_property
    def _matrix_bests(self) -> tuple[dict, dict]:
        """Per machine, each norm's best row against the DRAM ceiling and (norms with no ranked record from DRAM)
        its best cache-resident row against a same-size copy: the matrix and ``top_machines`` both read them."""
        hws = self.kernel_hws
        best = {hw: {r["norm"]: r for r in self.rows_at(hw, self.machine_summary(hw)["best"])} for hw in hws}
        best_copy = {hw: {r["norm"]: r for r in self.rows_at(hw, self.machine_summary(hw)["best_copy"])}
                     for hw in hws}
        return best, best_copy

    @functools.cached_property
    def top_machines(self) -> list[str]:
        """The machines in the order of their best share of the ceiling over every norm (highest first)."""
        best, _ = self._matrix_bests
        return sorted(self.kernel_hws, key=lambda hw: (-max([r["pct"] or 0.0 for r in best[hw].values()] or [-1.0]),
                                                       hw))

    def _make_matrix(self) -> Table:
        hws = self.kernel_hws
        best, best_copy = self._matrix_bests
        norms = sorted(self.by_norm, key=lambda n: (-max([best[hw][n]["pct"] or 0.0 for hw in hws
                                                          if n in best[hw]] or [-1.0]), n))
        if self.many_site():
            matrix = Table("matrix", [Col("device")] + [Col(n, True) for n in norms], search=True, cls="narrow")
            for hw in self.top_machines:
                matrix.add([cell(hw, hw, href=device_file(hw), title=self.hw_name(hw))]
                           + [self._matrix_cell(n, hw, best, best_copy) for n in norms])
            return matrix
        matrix = Table("matrix", [Col("norm")] + [Col(hw, True, self.hw_name(hw)) for hw in hws], search=False,
                       cls="narrow")
        for n in norms:
            matrix.add([cell(n, n, href=norm_file(n))] + [self._matrix_cell(n, hw, best, best_copy) for hw in hws])
        return matrix

    def _matrix_cell(self, n: str, hw: str, best: dict, best_copy: dict) -> dict:
        """A norm on a machine: its best % of the DRAM ceiling, else of a same-size copy, else unranked or none."""
        r = best[hw].get(n)
        rc = best_copy[hw].get(n)
        if r is None and rc is not None:
            return cell(fmt_pct(rc["pct_copy"]), None, cls="muted", href=self.norm_hw_href(n, hw),
                        note=f"{rc['backend']}, of same-size copy",
                        title=f"only cache-resident ({rc['cache']}) records: best against a same-size "
                              f"copy, not the DRAM ceiling: {rc['backend']} · {rc['dtype']} · "
                              f"{rc['pass']} · {rc['layout']} {fmt_shape(rc['shape'])}")
        if r is None:
            measured = n in self.machine_norms(hw)
            why, detail = self.unranked_why(n, hw) if measured else ("–", None)
            return cell(why, None, cls="muted" if measured else None,
                        href=self.norm_hw_href(n, hw) if measured else None, title=detail)
        return cell(fmt_pct(r["pct"]), r["pct"], href=self.norm_hw_href(n, hw),
                    note=r["backend"], title=f"best: {r['backend']} · {r['dtype']} · {r['pass']} · "
                                             f"{r['layout']} {fmt_shape(r['shape'])}; click for "
                                             f"{n}'s figures on {hw}")

    def unranked_why(self, n: str, hw: str) -> tuple[str, str]:
        """Why a norm measured on a machine has no ranked record there: (``unranked:`` and the reason in a few words,
        for its cell; how many records, and what keeps each kind from a rank, for the cell's title). A record is
        ranked when it carries no flag and has its share of a ceiling: of the DRAM copy ceiling, or, cache-resident,
        of a copy of its own size timed the same way (``aggregate.best_backend_per_norm``)."""
        rows = self.by_norm_hw.get((n, hw), [])
        plain = [r for r in rows if not r["flagged"]]
        no_copy = [r for r in plain if not r["dram"] and r["pct_copy"] is None]
        no_bandwidth = [r for r in plain if r["dram"] and r["pct"] is None and r["gbps"] is None]
        flagged = [r for r in rows if r["flagged"]]
        labels = ", ".join(FLAG_LABELS.get(f, f) for f in sorted({f for r in flagged for f in r["flags"]}))
        short, detail = [], []
        if no_copy:
            short.append("no same-size copy")
            caches = ", ".join(sorted({str(r["cache"]) for r in no_copy}))
            detail.append(f"{len(no_copy)} cache-resident ({caches}), so not ranked against the DRAM ceiling, and "
                          "without a same-size copy to rank them against")
        if no_bandwidth:
            short.append("no bandwidth")
            detail.append(f"{len(no_bandwidth)} without a bandwidth (no time or no bytes moved)")
        if flagged:
            if not short:
                short.append(f"flagged ({labels})")
            detail.append(f"{len(flagged)} flagged ({labels}): flagged records are never ranked")
        if not short:   # a norm's every row is one of the above where it has no best; said plainly if not
            short.append("no ranked record")
        return "unranked: " + "; ".join(short), (f"{len(rows)} record(s) of {n} on {hw}, none ranked: "
                                                 + "; ".join(detail or ["none"]))

    def overview(self) -> Page:
        hws = self.kernel_hws
        matrix = self.matrix()
        every = sorted(self.hw_entries)
        devices = every
        if self.many_site():   # the best machines' results; every machine is in the matrix and the devices page
            hws = self.top_machines[:pages.TOP_MACHINES]
            devices = hws
            if matrix.src:
                self.data_files[matrix.data_path] = matrix
        top = {hw: self.rows_at(hw, self.machine_summary(hw)["top"]) for hw in hws}
        top_copy = {hw: self.rows_at(hw, self.machine_summary(hw)["top_copy"]) for hw in hws}
        tables = []
        for key, cells in self._acc_tables:
            ranked = self._ranked_tables[key][:3]
            if ranked:
                tables.append((key, self.cell_page_file(key), ranked))
        return Page("index.html", "index.html", "Normalization layer leaderboard", active="index.html", ctx=dict(
            n_kernel=len(self.kernels), n_acc=len(self.acc_rows), n_norms=len(self.norm_meta),
            hws=[(hw, self.hw_name(hw), device_file(hw)) for hw in devices], n_hws=len(every),
            n_more=len(every) - len(devices), matrix=matrix,
            top=[(hw, self.hw_name(hw), device_file(hw), [self._top_row(r) for r in top[hw]]) for hw in hws],
            top_copy=[(hw, self.hw_name(hw), device_file(hw), [self._top_row(r, copy=True) for r in top_copy[hw]])
                      for hw in hws if top_copy[hw]],
            acc_tables=tables, n_rejected=len(self.loaded.rejected), empty=not self.loaded.entries,
            n_unranked=sum(r["flagged"] for r in self.kernels),
            n_legacy=sum(LEGACY in r["flags"] for r in self.kernels),
            n_stale=sum("stale" in r["flags"] for r in self.kernels)))

    def _top_row(self, r: dict, copy: bool = False) -> dict:
        """A row of a top table: ``pct`` of the DRAM ceiling, or with ``copy`` of the same-size copy."""
        return {"norm": r["norm"], "norm_href": norm_file(r["norm"]), "backend": r["backend"],
                "shape": f"{r['layout']} {fmt_shape(r['shape'])}", "dtype": r["dtype"], "pass": r["pass"],
                "time": fmt_time(r["time"]), "gbps": fmt_gbps(r["gbps"]),
                "pct": fmt_pct(r["pct_copy"] if copy else r["pct"]),
                "href": self.rec_href(r["entry"], ""), "rid": r["entry"].rid[:10]}
