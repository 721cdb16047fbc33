"""A tiny, safe Markdown renderer for the methodology pages (no raw HTML passes through).

Supports headings, paragraphs, bullet and numbered lists, fenced code, block quotes, pipe tables,
horizontal rules and inline code, bold, italics and http(s) links. Everything else is escaped text.
"""

from __future__ import annotations

import re

from normbench.site.markup import esc, safe_url

_LINK = re.compile(r"\[([^\]\n]{1,500})\]\(([^)\s]{1,2000})\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")
_ITAL = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])|(?<![\w_])_(?!\s)(.+?)(?<!\s)_(?![\w_])")
_AUTOLINK = re.compile(r"<(https?://[^>\s]+)>")


def _emphasis(escaped: str) -> str:
    escaped = _BOLD.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", escaped)
    return _ITAL.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", escaped)


def _plain(text: str) -> str:
    """Escaped text with emphasis and links; no code spans inside."""
    out, pos = [], 0
    for m in _LINK.finditer(text):
        out.append(_emphasis(_autolinks(text[pos:m.start()])))
        label, url = m.group(1), m.group(2)
        good = None if "\ue000" in url else safe_url(url)  # a code span inside a URL: not a link
        inner = _emphasis(esc(label))
        out.append(f'<a href="{esc(good)}" rel="noopener noreferrer nofollow">{inner}</a>' if good else inner)
        pos = m.end()
    out.append(_emphasis(_autolinks(text[pos:])))
    return "".join(out)


def _autolinks(text: str) -> str:
    out, pos = [], 0
    for m in _AUTOLINK.finditer(text):
        out.append(esc(text[pos:m.start()]))
        good = None if "\ue000" in m.group(1) else safe_url(m.group(1))
        out.append(f'<a href="{esc(good)}" rel="noopener noreferrer nofollow">{esc(good)}</a>' if good
                   else esc(m.group(0)))
        pos = m.end()
    out.append(esc(text[pos:]))
    return "".join(out)


def inline(text: str) -> str:
    """One line of Markdown inline syntax as safe HTML."""
    # Code spans are set aside first (as private-use placeholders) so emphasis may wrap them but never enter them.
    codes: list[str] = []

    def stash(m):
        codes.append(f"<code>{esc(m.group(2).strip())}</code>")
        return f"\ue000{len(codes) - 1}\ue001"

    text = re.sub(r"(`+)(.+?)\1", stash, text.replace("\ue000", "").replace("\ue001", ""))
    out = _plain(text)
    return re.sub("\ue000(\\d+)\ue001", lambda m: codes[int(m.group(1))], out)


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "section"
    slug, n = base, 2
    while slug in used:
        slug, n = f"{base}-{n}", n + 1
    used.add(slug)
    return slug


def _table(lines: list[str]) -> str:
    def cells(line: str) -> list[str]:
        line = line.strip()
        if line.startswith("|"):
            line = line[1:]
        if line.endswith("|") and not line.endswith("\\|"):
            line = line[:-1]
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]

    head = cells(lines[0])
    rows = [cells(line) for line in lines[2:]]
    out = ['<div class="table-wrap"><table class="doc-table"><thead><tr>']
    out += [f"<th>{inline(c)}</th>" for c in head]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LIST_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$")


def render(md: str, heading_offset: int = 1) -> str:
    """Markdown source as safe HTML; headings shift down by ``heading_offset`` levels (the page owns ``<h1>``)."""
    lines = md.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    used: set[str] = set()
    para: list[str] = []
    i = 0

    def flush_para():
        if para:
            out.append("<p>" + inline(" ".join(para)) + "</p>")
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```") or stripped.startswith("~~~"):
            flush_para()
            fence = stripped[:3]
            code = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                code.append(lines[i])
                i += 1
            out.append(f"<pre><code>{esc(chr(10).join(code))}</code></pre>")
            i += 1
            continue
        if not stripped:
            flush_para()
            i += 1
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", stripped)
        if m:
            flush_para()
            level = min(6, len(m.group(1)) + heading_offset)
            out.append(f'<h{level} id="{_slug(m.group(2), used)}">{inline(m.group(2))}</h{level}>')
            i += 1
            continue
        if re.match(r"^([-*_])(\s*\1){2,}$", stripped):
            flush_para()
            out.append("<hr>")
            i += 1
            continue
        if "|" in stripped and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            flush_para()
            block = [line, lines[i + 1]]
            i += 2
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                block.append(lines[i])
                i += 1
            out.append(_table(block))
            continue
        if stripped.startswith(">"):
            flush_para()
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].lstrip())
                i += 1
            out.append(f"<blockquote>{render(chr(10).join(quote), heading_offset)}</blockquote>")
            continue
        m = _LIST_ITEM.match(line)
        if m:
            flush_para()
            ordered = m.group(2)[0].isdigit()
            items: list[list[str]] = []
            while i < len(lines):
                m = _LIST_ITEM.match(lines[i])
                if m and (m.group(2)[0].isdigit()) == ordered:
                    items.append([m.group(3)])
                elif items and lines[i].strip() and lines[i].startswith((" ", "\t")):
                    items[-1].append(lines[i].strip())  # continuation or nested item, kept as text
                else:
                    break
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join("<li>" + inline(" ".join(it)) + "</li>" for it in items)
                       + f"</{tag}>")
            continue
        para.append(stripped)
        i += 1
    flush_para()
    return "\n".join(out)
