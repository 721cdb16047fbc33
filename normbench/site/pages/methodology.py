"""The methodology page (bytes models, training recipes) and the pages of docs/ it links.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from normbench.gendocs import MARKER_LINE
from normbench.site import markdown
from normbench.site.pages.base import DOCS, Page
from normbench.site.pages.core import SiteCore
from normbench.site.records import slug


class MethodologyPages(SiteCore):
    """The methodology pages of a ``Site``."""

    def methodology_page(self) -> Page:
        # Each formula's norms, and as its example the model of its first row in ``kernels``' order: per machine
        # (kept between builds, ``per_machine``), then the machines' first rows compared by their place in it.
        place = {id(r): i for i, r in enumerate(self.kernels)}
        bm: dict[str, dict] = {}
        for hw, rows in self.by_hw.items():
            for formula, (at, model, norms) in self.per_machine("bytes_models", hw,
                                                                lambda rows=rows: _bytes_models(rows)).items():
                got = bm.setdefault(formula, {"norms": set(), "example": model, "at": place[id(rows[at])]})
                got["norms"].update(norms)
                if place[id(rows[at])] < got["at"]:
                    got["example"], got["at"] = model, place[id(rows[at])]
        recipes: dict[tuple, set] = {}
        for r in self.acc_rows:
            try:
                text = json.dumps(r["recipe"], indent=1, sort_keys=True, default=str)
            except (TypeError, ValueError):
                text = str(r["recipe"])
            recipes.setdefault((r["task"], r["model"]), set()).add(text)
        docs = [(f"methodology/{name}.html", title, key in self.docs) for name, key, title in DOCS]
        return Page("methodology.html", "methodology.html", "Methodology", active="methodology.html", ctx=dict(
            docs=docs,
            bytes_models=[(f, ", ".join(sorted(v["norms"])), json.dumps(v["example"], indent=1, sort_keys=True,
                                                                       default=str)) for f, v in sorted(bm.items())],
            recipes=[(slug("recipe", t, m), f"{t} · {m}", sorted(texts)) for (t, m), texts in sorted(recipes.items())]))

    def doc_page(self, name: str, key: str, title: str) -> Page:
        text = self.docs.get(key)
        if text is not None:
            m = re.match(r"\s*#\s+(.+?)\s*#*\s*(\n|$)", text)
            if m:  # the document's own title heads its page
                title, text = m.group(1), text[m.end():]
        return Page(f"methodology/{name}.html", "doc.html", title, active="methodology.html",
                    crumbs=[("methodology.html", "Methodology")],
                    ctx=dict(html=markdown.render(text, heading_offset=1) if text is not None else None, key=key))


def _bytes_models(rows: list[dict]) -> dict[str, tuple[int, dict, set]]:
    """Per bytes-model formula in one machine's rows: (the position of its first row, that row's model, the norms
    that use it) (``Site.methodology_page``)."""
    out: dict[str, tuple[int, dict, set]] = {}
    for i, r in enumerate(rows):
        model = r["entry"].rec["config"].get("bytes_model")
        if isinstance(model, dict) and isinstance(model.get("formula"), str):
            out.setdefault(model["formula"], (i, model, set()))[2].add(r["norm"])
    return out


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
