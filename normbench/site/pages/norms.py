"""The norms index, each norm's page and each norm's page on one device.
"""

from __future__ import annotations

from markupsafe import Markup

from normbench.site import pages
from normbench.site import tables as _tables
from normbench.site.fmt import safe_url
from normbench.site.pages.base import Page, _s, device_file, norm_compare_file, norm_device_file, norm_file
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug
from normbench.site.tables import Col, Table, cell


class NormPages(SiteCore):
    """The norm pages of a ``Site``."""

    def norms_index(self) -> Page:
        t = Table("norms", [Col("name"), Col("title"), Col("family"), Col("kind"), Col("paper"), Col("year", True),
                            Col("kernel results", True), Col("training runs", True), Col("package")],
                  filters=[("family", "family"), ("kind", "kind")], cls="wrapping")
        for name in sorted(self.norm_meta):
            m = self.norm_meta[name]
            paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
            year = paper.get("year") if isinstance(paper.get("year"), int) else None
            url = safe_url(paper.get("url"))
            nk = len(self.by_norm.get(name, []))
            na = sum(r["norm"] == name for r in self.acc_rows)
            t.add([cell(name, name, href=norm_file(name)), cell(_s(m.get("title")), _s(m.get("title"))),
                   cell(_s(m.get("family")), _s(m.get("family"))), cell(_s(m.get("kind")), _s(m.get("kind"))),
                   cell(_s(paper.get("title")) or "paper", _s(paper.get("title")), href=url, ext=bool(url)),
                   cell(year or "–", float(year) if year else None), cell(nk, float(nk)), cell(na, float(na)),
                   cell(_s(m.get("package")), _s(m.get("package")))],
                  {"family": _s(m.get("family")), "kind": _s(m.get("kind"))})
        return Page("norms.html", "norms.html", "Norms", active="norms.html", ctx=dict(table=t),
                    lead="Every norm with results, as described by the records themselves (so a plugin's norm shows "
                         "here even where the plugin is not installed). Each norm's page has its GB/s-against-hidden-"
                         "size figures per device and its training results.")

    def norm_inline(self, name: str) -> bool:
        """Whether a norm's page draws its figures itself (few points in all, on at most ``MANY_MACHINES`` machines);
        else each device's figure page holds them, drawn in the browser from their spec (a deep page: its records
        table is the no-JavaScript view). A norm on many machines never draws them on its page: that page would grow
        with the machines (3.8 MB at 30) and its static SVGs were a quarter of a cold build's time."""
        if name not in self._inline and self.many(name):
            self._inline[name] = False
        if name not in self._inline:   # asked by each of the norm's jobs: counted once per process
            per_hw: dict[str, list[dict]] = {}
            for r in self.by_norm.get(name, []):
                per_hw.setdefault(r["hardware"], []).append(r)
            points = 0
            for hw in sorted(per_hw):   # counted until the bound is passed
                points += self._width_points(name, hw, per_hw[hw], "../")
                if points > pages.INLINE_POINTS:
                    break
            self._inline[name] = points <= pages.INLINE_POINTS
        return self._inline[name]

    def norm_shared(self, name: str) -> bool:
        """Whether a norm's every-record table is too big for its page: its rows are then written once, in its
        per-device tables' data files (``knd-*``), which the norm page's table loads together."""
        return not self.many(name) and len(self.by_norm.get(name, [])) > _tables.INLINE_MAX

    def norm_page(self, name: str) -> Page:
        m = self.norm_meta[name]
        p = Page(norm_file(name), "norm.html", _s(m.get("title")) or name, active="norms.html",
                 crumbs=[("norms.html", "Norms")])
        up = p.up
        paper = m.get("paper") if isinstance(m.get("paper"), dict) else {}
        rows = self.by_norm.get(name, [])
        devices = []
        inline = self.norm_inline(name)
        many = self.many(name)
        for hw in self.norm_hws(name):
            # The machine's section, from what its summary keeps of this norm (``machine_summary``)
            sec = self.machine_summary(hw)["norms"][name]
            if inline:
                figs, points = self._width_figures(name, hw, self.by_norm_hw.get((name, hw), []), up)
            else:
                # With many machines and no figures inline, a machine's section is its button: its figures are not
                # shown, so not planned either (their frames were most of a rebuild's norm pages), only counted.
                n_figs, points = sec["counts"] if self.charts is not None else (0, 0)
                figs = [Markup("")] * n_figs
            devices.append({"hw": hw, "name": self.hw_name(hw), "anchor": slug("d", hw), "figs": figs,
                            "points": points, "href": up + device_file(hw),
                            "fig_href": up + self.norm_hw_href(name, hw),
                            "pick": up + self.machine_file(hw) if many else None,
                            "widths": sec["widths"], "n": sec["n"],
                            "best": [self._top_row(r) | {"href": self.rec_href(r["entry"], up)}
                                     for r in self.rows_at(hw, sec["best"])],
                            "best_copy": [self._top_row(r, copy=True) | {"href": self.rec_href(r["entry"], up)}
                                          for r in self.rows_at(hw, sec["best_copy"])]})
        # Figures inline while the page stays small; with many devices each has its figure page (one click).
        acc = []
        for key, table in self._acc_tables:   # sorted by table_order, as the keys of the norm's cells were
            cells = [c for c in table if c.norm == name and not c.tuning]
            if cells:
                ranked = self._ranked_tables[key]
                for c in cells:
                    acc.append(self._cell_summary(c, ranked.index(c) + 1, len(ranked), up, key))
        p.charts = inline and any(d["figs"] for d in devices)
        p.ctx = dict(
            name=name, meta=m, paper=paper, paper_url=paper.get("url"), devices=devices, acc=acc, inline=inline,
            compare_href=norm_compare_file(name),
            layouts=", ".join(str(x) for x in m.get("layouts") or [] if isinstance(x, (str, int))),
            backends=", ".join(str(x) for x in m.get("backends") or [] if isinstance(x, (str, int))),
            table=(self.kernel_table(slug("kn", name), rows, up, with_norm=False,
                                     srcs=[Table(slug("knd", name, hw), []).data_path
                                           for hw in sorted({r["hardware"] for r in rows})])
                   if self.norm_shared(name) else
                   self.kernel_table(slug("kn", name), rows, up, with_norm=False, srcs=[] if many else None))
            if rows else None)
        if many and p.ctx["table"] is not None:
            p.ctx["table"].only = ("norm", name)   # a machine's file holds every norm's rows
        return p

    def norm_device_page(self, name: str, hw: str) -> Page:
        """One norm on one device: its GB/s and %-of-ceiling figures and the records behind them."""
        p = Page(norm_device_file(name, hw), "norm_device.html", f"{name} on {hw}", active="norms.html",
                 lead=self.hw_name(hw), crumbs=[("norms.html", "Norms"), (norm_file(name), name)])
        hr = self.by_norm_hw.get((name, hw), [])
        # Static SVG where the norm's page draws the same figures (few points: drawn once, shared); else the browser
        # draws them from their spec and the records table below is the view without JavaScript.
        figs, _ = self._width_figures(name, hw, hr, p.up, static=self.norm_inline(name))
        p.charts = bool(figs)
        p.ctx = dict(name=name, hw=hw, figs=figs, device_href=p.up + device_file(hw), n=len(hr),
                     widths=len({r["num_features"] for r in hr}),
                     table=self.kernel_table(slug("knd", name, hw), hr, p.up, with_norm=False,
                                             with_hw=self.norm_shared(name), file=self.norm_shared(name),
                                             preview=_tables.DEEP_PREVIEW))
        return p
