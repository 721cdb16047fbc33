"""The devices page, each device's page and figures page, and a norm compared across devices.
"""

from __future__ import annotations

from collections import Counter

from normbench.site import pages
from normbench.site import tables as _tables
from normbench.site.fmt import fmt_gbps, fmt_pct, num
from normbench.site.pages.base import Page, _s, device_file, figures_file, norm_compare_file, norm_file
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug


class DevicePages(SiteCore):
    """The device pages of a ``Site``."""

    def device_page(self, hw: str) -> Page:
        p = Page(device_file(hw), "device.html", hw, active="devices.html", lead=self.hw_name(hw),
                 crumbs=[("devices.html", "Devices")])
        rows = self.by_hw.get(hw, [])
        norms = sorted({r["norm"] for r in rows})
        summary = self.machine_summary(hw)
        best = {r["norm"]: r for r in self.rows_at(hw, summary["best"])}
        best_copy = {r["norm"]: r for r in self.rows_at(hw, summary["best_copy"])}
        if any(self.many(n) for n in norms):
            # Every kernel record of the machine, once, in its data file: its first rows in this page, and the norm
            # pages load a machine's rows of their norm from it (a best-per-case table beside it held the same rows
            # again: ~400 kB a machine; the leaderboard has them per case, filterable by device).
            table = self.kernel_table(slug("km", hw), rows, p.up, with_hw=False, file=True,
                                      preview=_tables.DEEP_PREVIEW)
        else:
            table = self.kernel_table(slug("kd", hw), self.best_per_case(rows), p.up, with_hw=False) if rows else None
        p.ctx = dict(facts=self.hw_facts(hw), n=len(rows), every=table is not None and table.id.startswith("km-"),
                     norms=[(n, self.norm_hw_href(n, hw, "../"), best.get(n), best_copy.get(n),
                            None if n in best or n in best_copy else self.unranked_why(n, hw)) for n in norms],
                     table=table,
                     fmt_pct=fmt_pct)
        return p

    def hw_facts(self, hw: str) -> list[tuple[str, str]]:
        memo = self.__dict__.setdefault("_facts", {})   # the devices page and each device's page show them
        if hw not in memo:   # a function of the machine's own records: kept between builds
            memo[hw] = self.per_machine("hw_facts", hw, lambda: self._hw_facts(hw))
        return memo[hw]

    def _hw_facts(self, hw: str) -> list[tuple[str, str]]:
        entries = self.hw_entries[hw]
        provs = [e.rec["provenance"] for e in entries]
        h = provs[-1].get("hardware") if isinstance(provs[-1].get("hardware"), dict) else {}

        def seen(key):
            return ", ".join(sorted({str(p.get(key)) for p in provs if p.get(key) not in (None, "")})) or "–"

        ts = sorted(_s(p.get("timestamp")) for p in provs if _s(p.get("timestamp")))
        kr = self.by_hw.get(hw, [])
        ceil = sorted(r["ceiling"] for r in kr if r["ceiling"])
        methods = sorted({m for r in kr if isinstance(m := r["entry"].rec["metrics"].get("ceiling_method"), str)})
        peak = sorted({r["datasheet"] for r in kr if r["datasheet"]})
        commits = sorted({_s(p.get("git_commit"))[:10] for p in provs if _s(p.get("git_commit"))})
        plugins = sorted({f"{k} {v}" for p in provs if isinstance(p.get("plugins"), dict)
                          for k, v in p["plugins"].items()})
        commands = Counter(_s(p.get("command")) for p in provs if _s(p.get("command")))
        return [
            ("CPU", _s(h.get("cpu")) or "–"),
            ("cores / threads", f"{h.get('cores', '–')} / {h.get('threads', '–')}"),
            ("GPU", _s(h.get("gpu")) or "none"),
            ("GPU memory", f"{h.get('gpu_memory_gb')} GB" if num(h.get("gpu_memory_gb")) else "–"),
            ("driver / CUDA", f"{h.get('driver') or '–'} / {h.get('cuda') or '–'}"),
            ("copy ceiling (measured)", (f"{fmt_gbps(ceil[len(ceil) // 2])} median, {fmt_gbps(ceil[0])} – "
                                         f"{fmt_gbps(ceil[-1])}") if ceil else "–"),
            ("ceiling method", "; ".join(methods[:5]) or "–"),
            ("datasheet peak", ", ".join(fmt_gbps(p) for p in peak) or "–"),
            ("platform", seen("platform")), ("Python", seen("python")), ("torch", seen("torch")),
            ("Triton", seen("triton")),
            ("normbench", seen("normbench_version") + (f" (commits {', '.join(commits)})" if commits else "")),
            ("plugins", ", ".join(plugins) or "–"),
            ("records", f"{len(kr)} kernel, {sum(r['hardware'] == hw for r in self.acc_rows)} accuracy"),
            ("taken", f"{ts[0]} – {ts[-1]}" if ts else "–"),
            ("commands", " | ".join(f"{c} (×{n})" for c, n in commands.most_common(3)) or "–"),
        ]

    def compared_norms(self) -> list[str]:
        """Norms measured on more than one device."""
        return [n for n in sorted(self.by_norm) if len(self.norm_hws(n)) > 1]

    def devices_page(self) -> Page:
        hws = sorted(self.hw_entries)
        matrix = self.matrix()
        return Page("devices.html", "devices.html", "Devices", active="devices.html", ctx=dict(
            hws=[(hw, self.hw_name(hw), device_file(hw), self.hw_facts(hw)) for hw in hws], matrix=matrix,
            compared=[(n, norm_compare_file(n), len(self.norm_hws(n)))
                      for n in self.compared_norms()]))

    def compare_page(self, name: str) -> Page:
        """One norm across devices: % of each device's own ceiling against hidden size, one figure per layout, dtype
        and pass (most measured first) while the page stays small."""
        import pandas as pd

        p = Page(norm_compare_file(name), "compare.html", f"{name} across devices", active="devices.html",
                 crumbs=[("devices.html", "Devices"), (norm_file(name), name)])
        # combination -> device -> (its valid rows, their ``_width_best`` points), from each machine's summary
        combos: dict[tuple, dict[str, tuple]] = {}
        for hw in self.norm_hws(name):
            for combo, (n, best) in self.machine_summary(hw)["compare"].get(name, {}).items():
                combos.setdefault(combo, {})[hw] = (n, [(key, self.by_hw[hw][i]) for key, i in best])
        figs, points, left = [], 0, []
        for combo, per_hw in sorted(combos.items(), key=lambda kv: (-sum(n for n, _ in kv[1].values()), kv[0])):
            # Each device's points (``width_frame``'s), chosen without making frames: the page is digested by them
            # on every build and its figures' frames are made only when it is drawn.
            bests = [b for hw in sorted(per_hw) if (b := per_hw[hw][1])]
            if len(bests) < 2 or len({key[4] for b in bests for key, _ in b}) < 2:
                continue
            n = sum(map(len, bests))
            label = " · ".join(combo)
            if figs and points + n > pages.COMPARE_POINTS:
                left.append(label)
                continue

            def frame(bests=bests, up=p.up):
                return pd.concat([self._frame(b, up) for b in bests], ignore_index=True)

            fig = self.figure("device_compare_chart", frame, slug("dc", name, *combo),
                              f"{name} ({label}): % of each device's copy ceiling against hidden size, one colour "
                              "per device, one panel per backend", title=f"{name} · {label}",
                              inputs=repr([self._best_print(b, p.up) for b in bests]),
                              static=False)   # a deep page: the browser draws it (each device's page has the records)
            if fig:
                figs.append(fig)
                points += n
        p.charts = bool(figs)
        p.ctx = dict(name=name, figs=figs, left=left, norm_href=p.up + norm_file(name),
                     devices=[(hw, self.norm_hw_href(name, hw, p.up)) for hw in self.norm_hws(name)
                              if name in self.machine_summary(hw)["compare"]])
        return p

    def machine_figures_page(self, hw: str) -> Page:
        """A machine's GB/s and %-of-ceiling figures against hidden size, one section per norm it measured that is on
        many machines (``MANY_MACHINES``: no page per norm and machine), drawn in the browser from their specs (no
        SVG at build time: one page a machine, whatever the number of norms)."""
        p = Page(figures_file(hw), "machine_figures.html", f"Figures of {hw}", active="devices.html",
                 lead=self.hw_name(hw), crumbs=[("devices.html", "Devices"), (device_file(hw), hw)])
        sections = []
        for name in self.machine_norms(hw):
            if not self.many(name):
                continue
            hr = self.by_norm_hw.get((name, hw), [])
            figs, _ = self._width_figures(name, hw, hr, p.up, static=False)
            sections.append({"norm": name, "hw": hw, "anchor": slug("f", name), "figs": figs, "n": len(hr),
                             "widths": len({r["num_features"] for r in hr}),
                             "norm_href": f"{p.up}{norm_file(name)}#{slug('d', hw)}"})
        p.charts = any(x["figs"] for x in sections)
        p.ctx = dict(hw=hw, sections=sections, device_href=p.up + device_file(hw))
        return p
