"""The paper claims' page and the softmax page (both show the claims' verdicts: rendered in one job).
"""

from __future__ import annotations

from normbench.site import aggregate as agg
from normbench.site import pages
from normbench.site.pages.base import Page, norm_file
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug


class ClaimPages(SiteCore):
    """The claims and softmax pages of a ``Site``."""

    def claim_results(self) -> list[dict]:
        if not hasattr(self, "_claims"):
            from normbench import claims as C

            # Only the records a claim may read (``claims.reads``): the entries are one per id already, so the
            # outcome is the same. The speed comparisons' rows per machine, kept between builds (``per_machine``):
            # each reads one machine's kernel records, and their scipy tests were a third of a 100-machine rebuild.
            kern: dict[str, list] | None = None   # each machine's kernel entries in the order read

            def machine_rows(hw: str) -> dict:
                nonlocal kern
                if kern is None:   # made once, where a machine's rows are not kept
                    kern = {}
                    for e in self.loaded.entries:
                        if e.kind == "kernel":
                            kern.setdefault(e.hw, []).append(e)
                return C.machine_speed_rows([e.rec for e in kern.get(hw, []) if C.reads(e.rec)])

            speed: dict[str, list[dict]] = {}
            for hw in sorted(self.hw_entries):
                rows = self.per_machine("claims_speed", hw, lambda hw=hw: machine_rows(hw))
                for key, got in rows.items():
                    speed.setdefault(key, []).extend(got)
            self._claims = C.evaluate((e.rec for e in self.loaded.entries
                                       if e.kind != "kernel" and C.reads(e.rec)), speed=speed)
        return self._claims

    def claims_page(self) -> Page:
        from normbench import claims as C

        by_id = {e.rid: e for e in self.loaded.entries}
        results = self.claim_results()
        claims = []
        for c in results:
            comps = []
            for r in c["comparisons"]:
                recs = [(rid[:10], self.rec_href(by_id[rid], "")) for rid in r.get("records", []) if rid in by_id]
                comps.append({**r, "p_welch_s": C.format_p(r.get("p_welch")),
                              "p_mw_s": C.format_p(r.get("p_mann_whitney")),
                              "p_for_s": C.format_p(r.get("p_for_holm")),
                              "p_against_s": C.format_p(r.get("p_against_holm")), "recs": recs})
            claims.append({**c, "anchor": slug("claim", c["id"]), "comps": comps,
                           "p_holm_s": C.format_p(c.get("p_holm")), "vslug": c["verdict"].replace(" ", "-")})
        counts = {v: sum(c["verdict"] == v for c in results) for v in C.VERDICTS}
        return Page("claims.html", "claims.html", "Paper claims", active="claims.html", ctx=dict(
            claims=claims, counts=counts, alpha=C.ALPHA, n_comp=sum(len(c["comparisons"]) for c in results)))

    @staticmethod
    def _softmaxish(r: dict) -> bool:
        return r["family"] == "softmax" or r["norm"] in ("softmax", "log_softmax")

    def softmax_page(self) -> Page:
        rows = [r for r in self.kernels if self._softmaxish(r)]
        algorithms: dict[str, str] = {}
        if rows:
            try:
                from normbench.softmax import ALGORITHM_BACKENDS as algorithms
            except Exception:  # the algorithm notes are a nicety; the records are what is shown
                algorithms = {}
        backends = []
        for b in sorted({r["backend"] for r in rows}):
            br = [r for r in rows if r["backend"] == b]
            passes = sorted({f"{r['pass']}: {int(p)}" for r in br
                             if (p := r["row_passes"]) is not None})
            backends.append({"backend": b, "algorithm": algorithms.get(b, "not defined by normbench (library "
                                                                           "kernel)"),
                             "passes": ", ".join(passes) or "–", "n": len(br)})
        sections, plans = [], []
        for n in sorted({r["norm"] for r in rows}):
            for hw in sorted({r["hardware"] for r in rows if r["norm"] == n}):
                hr = [r for r in self.by_norm_hw.get((n, hw), []) if self._softmaxish(r)]   # ``rows``' order
                plans.append((n, hw, hr, self._width_points(n, hw, hr, "")))
        inline = sum(x[3] for x in plans) <= pages.INLINE_POINTS
        for n, hw, hr, _ in plans:
            figs, points = self._width_figures(n, hw, hr, "", draw=inline)
            sections.append({"norm": n, "hw": hw, "href": norm_file(n), "figs": figs, "points": points,
                             "fig_href": self.norm_hw_href(n, hw),
                             "best": [self._top_row(r) for r in agg.best_by_bandwidth(hr, 5)]})
        # As on a norm's page: figures inline while the page stays small, else one click away per device.
        for x in sections:
            x["inline"] = inline
        claim = next((c for c in self.claim_results() if "softmax" in c["id"]), None)
        return Page("softmax.html", "softmax.html", "Softmax kernels", active="softmax.html",
                    charts=any(x["figs"] and x["inline"] for x in sections), ctx=dict(
                        backends=backends, sections=sections, claim=claim,
                        claim_anchor=slug("claim", claim["id"]) if claim else "", n=len(rows),
                        table=self.kernel_table("softmax", rows, "") if rows else None))
