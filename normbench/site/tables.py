"""Tables as data: columns, rows of cells and filters, rendered by the templates; a big table keeps its first rows
in the page and all of them in a data file that ``assets/site.js`` loads, so no page grows with the records."""

from __future__ import annotations

import base64
import gzip
import json
import re
from dataclasses import dataclass, field

#: A table with more rows than this keeps only its first PREVIEW rows in the page (readable with JavaScript off)
#: and all rows in ``data/<id>.js``.
INLINE_MAX = 400
PREVIEW = 100
#: The first rows a deep page's big table keeps (a norm's page per device: its figures and its records' table, whose
#: rows its data file holds; ~250 of these pages at 100k records).
DEEP_PREVIEW = 25
#: Rows the script shows before its "show all" button.
PAGE_ROWS = 250
#: The gzip level of a data file's payload (``data_script``). Measured on a 1,000-record machine's two data files
#: (0.74 + 0.59 MB of packed JSON): level 1 0.23 + 0.15 MB in 15 ms, 6 0.19 + 0.12 MB in 55 ms, 9 0.19 + 0.12 MB
#: in 105 ms. Level 1: compressing was 22 s of CPU of a 100-machine cold build at level 6 (1,209 files; issue
#: #38's 120 s), for ~20 % more bytes in data/ (54 -> ~65 MB of a 300 MB budget at 100 machines).
DATA_GZIP = 1


@dataclass
class Col:
    """A table column; ``num`` columns sort numerically on each cell's sort value."""

    label: str
    num: bool = False
    title: str = ""
    sorted: str = "none"   # "ascending"/"descending" when the rows come sorted by this column


def cell(text="", v=None, *, href: str | None = None, title: str | None = None, note: str | None = None,
         flags=None, cls: str | None = None, ext: bool = False) -> dict:
    """One table cell: text, sort value ``v``, a link (a site-relative URL, or a vetted http(s) one with ``ext``),
    a hover title, a muted note after the text, flag badges [(label, flag, reason)] and a CSS class."""
    c: dict = {"t": "" if text is None else str(text)}
    if v is not None:
        c["v"] = v
    if href:
        c["h"] = href
        if ext:
            c["x"] = 1
    if title:
        c["ti"] = title
    if note:
        c["n"] = note
    if flags:
        c["b"] = [list(f) for f in flags]
    if cls:
        c["k"] = cls
    return c


@dataclass
class Table:
    id: str
    cols: list[Col]
    rows: list[dict] = field(default_factory=list)   # {"c": [cells], "f": {filter: value}, "k": row class}
    filters: list[tuple[str, str]] = field(default_factory=list)
    search: bool = True
    page: int | None = None   # rows shown before "show all" (default PAGE_ROWS)
    cls: str = ""
    src: str | None = None    # the data file(s) with every row, relative to the page, space-separated (``shard``)
    n_total: int | None = None          # rows in all, where only the first are built (``rows`` is the preview)
    all_options: dict | None = None     # each filter's distinct values over every row, where only the first rows
                                        # are built (filter -> sorted texts)
    preview: int | None = None          # rows kept in the page when a data file holds them all (default PREVIEW)
    only: tuple[str, str] | None = None  # (filter, value): the rows a data file loaded on demand must match

    @property
    def count(self) -> int:
        return len(self.rows) if self.n_total is None else self.n_total

    def per_page(self) -> int:
        return self.page or PAGE_ROWS

    def add(self, cells: list[dict], filters: dict | None = None, cls: str = "", rank: list | None = None) -> None:
        row = {"c": cells, "f": filters or {}, "k": cls}
        if rank is not None:
            row["r"] = rank
        self.rows.append(row)

    def options(self) -> list[tuple[str, str, list[str]]]:
        """(key, label, distinct values) of each filter that has more than one value."""
        out = []
        for key, label in self.filters:
            if self.all_options is not None:
                values = self.all_options.get(key, [""])
            else:
                values = sorted({str(r["f"].get(key, "")) for r in self.rows})
            if len(values) > 1:
                out.append((key, label, values))
        return out

    @property
    def inline(self) -> list[dict]:
        return self.rows if self.src is None else self.rows[:min(self.preview or PREVIEW, PREVIEW)]

    def body_html(self):
        """The rows in the page (``inline``) as HTML, each cell escaped as the templates escape a value: what the
        ``datatable`` macro once wrote cell by cell through a Jinja macro, the same bytes, about ten times faster
        (a 100k-record site's pages hold a few hundred thousand cells)."""
        from markupsafe import Markup, escape

        nums = [c.num for c in self.cols]
        out = []
        for r in self.inline:
            tr = ["\n<tr"]
            if r.get("k"):
                tr.append(f' class="{escape(r["k"])}"')
            for k, v in r.get("f", {}).items():
                tr.append(f' data-f-{escape(k)}="{escape(v)}"')
            tr.append(">")
            for c, num in zip(r["c"], nums):
                k = c.get("k")
                tr.append("<td")
                if num or k:
                    tr.append(f' class="{escape(("num " if num else "") + (k or ""))}"')
                if "v" in c:
                    tr.append(f' data-v="{escape(c["v"])}"')
                tr.append(">")
                t, h, ti = escape(c.get("t", "")), c.get("h"), c.get("ti")
                if h:
                    tr.append(f'<a href="{escape(h)}"' + (' rel="noopener noreferrer nofollow"' if c.get("x") else "")
                              + (f' title="{escape(ti)}"' if ti else "") + f">{t}</a>")
                elif ti:
                    tr.append(f'<span title="{escape(ti)}">{t}</span>')
                else:
                    tr.append(str(t))
                if c.get("n"):
                    tr.append(f' <span class="muted">{escape(c["n"])}</span>')
                for label, f, why in c.get("b") or ():
                    tr.append(f' <span class="flag flag-{escape(f)}" title="{escape(f)}: {escape(why)}">'
                              f"{escape(label)}</span>")
                tr.append("</td>")
            tr.append("</tr>")
            out.append("".join(tr))
        return Markup("".join(out))

    @property
    def data_path(self) -> str:
        return f"data/{self.id}.js"

    def shard(self, up: str, force: bool = False) -> tuple[str, "Table"] | None:
        """For a big table: (site-relative path, this table) of the data file holding every row (its text:
        ``data_text``, made when the file is written); None for a small one. ``force``: the file is written whatever
        the table's size (another page's table loads it), and the page loads it only when the table is big."""
        if len(self.rows) <= INLINE_MAX and not force:
            return None
        if len(self.rows) > INLINE_MAX:
            self.src = up + self.data_path
        return self.data_path, self

    def data_text(self) -> str:
        return data_script("nbData", (self.id,), pack_rows(self.rows))


def data_script(call: str, args: tuple, payload) -> str:
    """A data file: ``window.<call>(<args as JSON>, "<payload>")``, the payload being ``payload`` as JSON, gzip-
    compressed (``DATA_GZIP``, no name, no time: the same data gives the same bytes) and base64-encoded, which
    ``assets/site.js`` (``inflate``) decodes with the browser's ``DecompressionStream``. A data file is a script the
    page's own script loads (same origin, so the strict CSP allows it, also from file://, where ``fetch()`` of a local
    file is refused); base64 cannot leave its string literal. The packed JSON of a machine's records repeats keys,
    units and provenance, so this is about a third of its size (issue #38: 1.33 MB of a machine's 3.4 MB were its two
    data files)."""
    body = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    b64 = base64.b64encode(gzip.compress(body, compresslevel=DATA_GZIP, mtime=0)).decode("ascii")
    return f"window.{call}(" + "".join(json.dumps(a) + "," for a in args) + '"' + b64 + '");\n'


_SCRIPT = re.compile(r"window\.([A-Za-z]+)\((.*)\);\n", re.S)


def read_data_script(text: str) -> tuple[str, list, object]:
    """A data file read back (``data_script``'s inverse, for tests and tools): (callback, leading args, payload)."""
    m = _SCRIPT.fullmatch(text)
    if m is None:
        raise ValueError("not a data file: expected window.<callback>(..., \"<base64>\");")
    args = json.loads("[" + m.group(2) + "]")
    return m.group(1), args[:-1], json.loads(gzip.decompress(base64.b64decode(args[-1], validate=True)))


#: A packed cell's fields, in order (``assets/site.js`` unpacks the same order).
CELL_FIELDS = ("t", "v", "h", "ti", "n", "x", "b", "k")


def pack_rows(rows: list[dict]) -> dict:
    """Rows as a data file holds them: every string once in ``s`` and referred to by its index; a cell is the index
    of its text, or ``[t, v, h, ti, n, x, b, k]`` without trailing nulls (a string sort value ``v`` as ``[index]``, a
    float one to 6 significant digits: it only orders rows); a row is ``[cells, filter values in the order of ``fk``,
    class, rank key]`` (the rank key where the build gave one: it orders the union of several files). A big
    leaderboard's rows repeat the same devices, norms, links and filter values, so this is a third of the plain rows'
    size; ``assets/site.js`` (``unpack``) restores the plain rows."""
    strings: dict[str, int] = {}

    def s(v):
        return None if v is None else strings.setdefault(str(v), len(strings))

    def sort_value(v):
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, float):
            return float(f"{v:.6g}") if v == v and abs(v) != float("inf") else None
        return v if isinstance(v, int) else [s(v)]

    def cell(c: dict):
        if len(c) == 1 and "t" in c:
            return s(c["t"])
        packed = [s(c.get("t", "")), sort_value(c.get("v")), s(c.get("h")), s(c.get("ti")), s(c.get("n")),
                  1 if c.get("x") else None, [[s(x) for x in b] for b in c["b"]] if c.get("b") else None,
                  s(c.get("k"))]
        while packed[-1] is None:
            packed.pop()
        return packed

    keys = list(dict.fromkeys(k for r in rows for k in r.get("f", {})))
    packed = []
    for r in rows:
        row = [[cell(c) for c in r["c"]], [s(r.get("f", {}).get(k)) for k in keys]]
        if r.get("k") or r.get("r") is not None:
            row.append(s(r["k"]) if r.get("k") else None)
        if r.get("r") is not None:
            row.append(r["r"])
        packed.append(row)
    return {"s": list(strings), "fk": keys, "rows": packed}
