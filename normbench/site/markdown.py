"""Markdown for the methodology pages: markdown-it-py (CommonMark + tables) with raw HTML off and only http(s)
or in-page links kept."""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup

from normbench.site.fmt import safe_url


def _link_ok(url: str) -> bool:
    return url.startswith("#") or safe_url(url) is not None


@lru_cache(maxsize=1)
def _md() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "typographer": False}).enable("table")
    md.validateLink = _link_ok  # a refused link stays text: [bad](javascript:x) is shown as written
    return md


def _shift_headings(tokens, offset: int) -> None:
    for t in tokens:
        if t.type in ("heading_open", "heading_close"):
            t.tag = f"h{min(6, int(t.tag[1]) + offset)}"


def render(text: str, heading_offset: int = 0) -> Markup:
    """``text`` as HTML (raw HTML in it is escaped); headings moved down ``heading_offset`` levels."""
    md = _md()
    tokens = md.parse(text)
    _shift_headings(tokens, heading_offset)
    for t in tokens:
        if t.type == "inline":
            for c in t.children or ():
                if c.type == "link_open":
                    c.attrSet("rel", "noopener noreferrer nofollow")
    return Markup(md.renderer.render(tokens, md.options, {}))


def inline(text: str) -> Markup:
    """One line of Markdown (code spans, emphasis, links) without a paragraph around it."""
    return Markup(_md().renderInline(text))
