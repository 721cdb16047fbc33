"""The page shell (head with the Content-Security-Policy, navigation, footer) and the sortable, filterable table."""

from __future__ import annotations

from dataclasses import dataclass, field

from normbench.site.markup import attrs, esc

# No inline script or style anywhere: scripts and styles come only from assets/ next to the pages.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "base-uri 'none'; form-action 'none'")

#: Rows a table shows before its "show all" button (the rest stay in the page, hidden, so sorting sees them).
PAGE_ROWS = 250

NAV = (
    ("index.html", "Overview"),
    ("kernels.html", "Kernels"),
    ("accuracy.html", "Accuracy"),
    ("claims.html", "Claims"),
    ("norms.html", "Norms"),
    ("hardware.html", "Hardware"),
    ("methodology.html", "Methodology"),
)


@dataclass
class SiteInfo:
    built: str                 # UTC time of the build
    version: str               # normbench version that built it
    n_records: int
    n_rejected: int
    taken: str                 # "2025-11-20 – 2025-11-21"


def page(title: str, body: str, info: SiteInfo, *, depth: int = 0, active: str = "", lead: str = "") -> str:
    """A complete HTML document; ``depth`` is how many directories below the site root the page lives."""
    up = "../" * depth
    nav = []
    for href, label in NAV:
        cur = ' aria-current="page"' if href == active else ""
        nav.append(f'<a href="{up}{href}"{cur}>{esc(label)}</a>')
    if info.n_rejected:
        cur = ' aria-current="page"' if active == "rejected.html" else ""
        nav.append(f'<a class="nav-warn" href="{up}rejected.html"{cur}>Rejected ({info.n_rejected})</a>')
    lead_html = f'<p class="lead">{lead}</p>' if lead else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · normbench leaderboard</title>
<link rel="icon" href="{up}assets/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{up}assets/site.css">
<script src="{up}assets/site.js" defer></script>
</head>
<body>
<header class="top"><div class="wrap">
<a class="brand" href="{up}index.html"><span class="logo" aria-hidden="true">∥x∥</span> normbench</a>
<nav>{"".join(nav)}</nav>
</div></header>
<main class="wrap">
<h1>{esc(title)}</h1>
{lead_html}
{body}
</main>
<footer><div class="wrap">Built {esc(info.built)} by normbench {esc(info.version)} from {info.n_records} result records
(data taken {esc(info.taken)}). Every number links to the record it comes from.</div></footer>
</body>
</html>
"""


@dataclass
class Col:
    """A table column; ``num`` columns sort numerically on each cell's ``data-v``."""

    label: str
    num: bool = False
    title: str = ""
    cls: str = ""
    sorted: str = "none"   # "ascending"/"descending" when the rows come sorted by this column


@dataclass
class Row:
    cells: list[tuple[str, object]]            # (inner HTML, sort value or None)
    filters: dict[str, str] = field(default_factory=dict)
    cls: str = ""
    anchor: str | None = None


def table(tid: str, cols: list[Col], rows: list[Row], *, filters: list[tuple[str, str]] = (),
          search: str | None = None, caption: str = "", cls: str = "", page: int | None = None) -> str:
    """A table the script makes sortable (click a header) and filterable (the selects above it).

    ``filters`` is [(key, label)]: a select per key listing the distinct ``Row.filters[key]`` values.
    The script shows the first ``page`` rows (in the current order) with a button for the rest.
    Without the script the full table still shows.
    """
    out = []
    if filters or search:
        out.append(f'<div class="filters" data-table="{esc(tid)}">')
        for key, label in filters:
            values = sorted({r.filters.get(key, "") for r in rows})
            opts = "".join(f'<option value="{esc(v)}">{esc(v or "–")}</option>' for v in values)
            out.append(f'<label>{esc(label)} <select data-filter="{esc(key)}"><option value="">all</option>'
                       f"{opts}</select></label>")
        if search:
            out.append(f'<label>{esc(search)} <input type="search" data-search="1" placeholder="text in any column"'
                       ' autocomplete="off"></label>')
        out.append(f'<span class="count" data-count-for="{esc(tid)}">{len(rows)} rows</span></div>')
    out.append(f'<div class="table-wrap"><table class="{esc(("lb sortable " + cls).strip())}" id="{esc(tid)}" '
               f'data-page="{int(page or PAGE_ROWS)}">')
    if caption:
        out.append(f"<caption>{caption}</caption>")
    out.append("<thead><tr>")
    for c in cols:
        cls = ("num " if c.num else "") + c.cls
        title = f' title="{esc(c.title)}"' if c.title else ""
        kind = "num" if c.num else "text"
        out.append(f'<th class="{esc(cls.strip())}" data-sort="{kind}"{title} aria-sort="{esc(c.sorted)}">'
                   f'<button type="button">{esc(c.label)}</button></th>')
    out.append("</tr></thead><tbody>")
    for r in rows:
        fattrs = "".join(f' data-f-{esc(k)}="{esc(v)}"' for k, v in r.filters.items())
        out.append(f"<tr{attrs(id=r.anchor, class_=r.cls or None)}{fattrs}>")
        for (inner, sortv), c in zip(r.cells, cols):
            cls = f' class="{esc(("num " if c.num else "") + c.cls).strip()}"' if (c.num or c.cls) else ""
            if sortv is None:
                dv = ""
            elif isinstance(sortv, float):
                dv = f' data-v="{sortv!r}"'
            else:
                dv = f' data-v="{esc(sortv)}"'
            out.append(f"<td{cls}{dv}>{inner}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    out.append(f'<button type="button" class="more" data-more-for="{esc(tid)}" hidden>show all rows</button>')
    return "".join(out)
