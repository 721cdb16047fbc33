"""The by-model pages (``bymodel``: normbench best's answer per model, device, site and regime).
"""

from __future__ import annotations

from normbench.site.pages.base import Page, device_file
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug
from normbench.site.tables import Col, Table, cell


class ModelPages(SiteCore):
    """The by-model pages of a ``Site``."""

    def bymodel(self):
        if not hasattr(self, "_bymodel"):
            from normbench.site.bymodel import ByModel

            self._bymodel = ByModel(self.loaded.entries, self.per_machine)
        return self._bymodel

    def models_index(self) -> Page:
        from normbench.site import bymodel as bm

        b = self.bymodel()
        t = Table("models", [Col("model"), Col("device"), Col("family"), Col("dtype"), Col("pass"),
                             Col("answered", True, "cells with a winner, a tie, or the only eligible backend"),
                             Col("undecided", True, "the paired interval holds 1 and leaves the tie band"),
                             Col("flagged", True, "only flagged records (or errors above tolerance)"),
                             Col("missing", True, "no record"), Col("cells", True, "sites x regimes")],
                  filters=[("model", "model"), ("hardware", "device"), ("dtype", "dtype"), ("pass", "pass")])
        hub = self.many_site()
        for r in bm.index_rows(b, self.per_machine, hub):
            t.add([cell(r["name"], r["name"], href=r["href"]), cell(r["hw"], r["hw"], href=device_file(r["hw"])),
                   cell(r["family"], r["family"]), cell(r["dtype"], r["dtype"]), cell(r["pass"], r["pass"]),
                   cell(r["answered"], r["answered"]), cell(r["undecided"], r["undecided"]),
                   cell(r["flagged"], r["flagged"]), cell(r["missing"], r["missing"]), cell(r["cells"], r["cells"])],
                  {"model": r["key"], "hardware": r["hw"], "dtype": r["dtype"], "pass": r["pass"]})
        shard = t.shard("")   # one row per model, machine, dtype and pass: 1,800 rows (1 MB) at 100 machines
        if shard:
            self.data_files[shard[0]] = shard[1]
        measured = {k for k, _ in b.pairs()}
        return Page("models.html", "models.html", "By model", active="models.html", ctx=dict(
            table=t if t.rows else None,
            pages=([(m.name, None, bm.model_hub_file(m.key)) for m in b.models if m.key in measured] if hub else
                   [(m.name, hw, bm.model_file(k, hw)) for k, hw in b.pairs() for m in [b.model(k)]]),
            unmeasured=[(m.key, m.name, m.family) for m in b.models if m.key not in measured]),
            lead="For the norms in a model, at the model's own shapes, which implementation to use on a device: "
                 "normbench best's answer per norm site and regime, and what each choice costs in norm time.")

    def model_page(self, key: str, hw: str) -> Page:
        """A model's answer on one machine: its page, or with many machines (``many_site``) a part of the model's one
        page (``model_hub``), loaded when the machine is picked (a machine's seven model pages were ~0.64 MB of
        mostly "missing" cells; as compressed parts ~0.07 MB)."""
        from normbench.site import bymodel as bm

        b = self.bymodel()
        if self.many_site():
            p = Page(bm.model_part_file(key, hw), "model_part.html", f"{b.model(key).name} on {hw}",
                     part=bm.part_id(key, hw))
        else:
            p = Page(bm.model_file(key, hw), "model.html", f"{b.model(key).name} on {hw}", active="models.html",
                     lead=self.hw_name(hw), crumbs=[("models.html", "By model")])
        p.ctx = {**bm.page_context(b, key, hw, p.up), "device_href": p.up + device_file(hw)}
        return p

    def model_hub(self, key: str) -> Page:
        """A model's one page in a many-machine site: a machine picker; the picked machine's answer is loaded from its
        part (``model_page``), so the page does not grow with the machines' answers."""
        from normbench.site import bymodel as bm

        b = self.bymodel()
        m = b.model(key)
        p = Page(bm.model_hub_file(key), "model_hub.html", m.name, active="models.html",
                 crumbs=[("models.html", "By model")])
        p.ctx = dict(key=key, name=m.name, family=m.family,
                     machines=[(hw, slug(hw), self.hw_name(hw), p.up + bm.model_part_file(key, hw), bm.part_id(key, hw))
                               for k, hw in b.pairs() if k == key])
        return p
