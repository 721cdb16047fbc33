"""The site's view of the records that count (``normbench.results.records_that_count``): anchors and record pages.

Valid records become ``Entry`` objects; invalid ones (bad JSON, failed validation, a record no reader can use)
become ``Rejected`` items that the build prints and the site lists on its "rejected records" page; nothing is
dropped silently.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


class Entry:
    """One valid record, where it came from, and the file name its copy gets in the site.

    ``rid``, ``kind``, ``timestamp``, ``hw`` (hardware id) and ``norm`` (its name) are at hand without the record;
    ``rec`` is read on first use where the reader had it in its cache (``results.counted.Entry``): a rebuild reads
    an unchanged machine's pages and aggregates from the site cache and never unpickles its records (issue #38)."""

    __slots__ = ("src", "path", "index", "key", "page", "digest", "rid", "kind", "timestamp", "hw", "norm")

    def __init__(self, rec: dict | None, path: str, index: int, key: str = "", page: str = "", digest: str = "",
                 src=None):
        if src is None:   # a record at hand (tests, one-off readers): the reader's entry of it
            from normbench.results.counted import Entry as CountedEntry

            src = CountedEntry(rec, Path(path), index, digest)
        self.src = src        # ``results.counted.Entry``: the record, read on first use
        self.path = path      # the record file, as the user would type it (e.g. results/kernel/cpu-x/layernorm.json)
        self.index = index    # position inside that file
        self.key = key        # safe, unique name: the record's anchor on its page
        self.page = page      # its record page, relative to the site root (records/<machine>[-<bucket>].html)
        self.digest = digest  # the SHA-256 of the bytes of the file it was read from (``readcache.file_digest``)
        self.rid, self.kind, self.timestamp, self.hw, self.norm = src.rid, src.kind, src.timestamp, src.hw, src.norm

    @property
    def rec(self) -> dict:
        return self.src.rec

    def __repr__(self) -> str:
        return f"Entry({self.rid!r}, {self.path!r}, {self.index}, key={self.key!r}, page={self.page!r})"

    @property
    def href(self) -> str:
        """The record's place on its record page, relative to the site root."""
        return f"{self.page}#{self.key}"

    @property
    def json_file(self) -> str:
        """The gzip-compressed JSON file (an array of the page's records, as validated) that holds this record."""
        return self.page[:-len(".html")] + ".json.gz"


@dataclass
class Rejected:
    """A file or record that could not go on the leaderboard, with every reason."""

    path: str
    index: int | None
    label: str
    problems: list[str] = field(default_factory=list)


@dataclass
class Loaded:
    entries: list[Entry]
    rejected: list[Rejected]
    superseded: list[tuple[Entry, Entry]]   # (older dropped, newer kept) for records sharing an id
    files: int


def _display_path(path: Path, root: Path) -> str:
    base = root.parent if root.is_dir() else root.parent
    try:
        return os.path.relpath(path, base)
    except ValueError:  # different drives on Windows
        return str(path)


def _assign_keys(entries: list[Entry]) -> None:
    used: set[str] = set()
    for e in entries:
        rid = e.rid
        key = rid.replace(":", "_") if _SAFE_KEY.match(rid) else "r-" + hashlib.sha256(rid.encode()).hexdigest()[:16]
        base, n = key, 2
        while key.lower() in used:  # case-insensitive file systems
            key, n = f"{base}-{n}", n + 1
        used.add(key.lower())
        e.key = key


#: Records per record page (a short summary line each in the page; their detail in the page's data file), on average
#: at most: a machine with more is split into 2, 4, 8, ... pages by a hash of the record id, so a record keeps its
#: page while its machine's count stays in the same power of two. One page per machine, not per norm and machine: a
#: submitted machine then adds one page, one data file and one JSON file whatever the number of norms (a page per
#: norm and machine made 87 files a machine at 29 norms, 165 MB of a 80-machine site; issue #38).
PAGE_RECORDS = 2000
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def norm_stem(name: str) -> str:
    """A norm's name in file names (its pages); odd names get a hash so they cannot escape."""
    return name if _NAME_RE.match(name) else f"n-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def slug(*parts) -> str:
    """A file-name-safe, collision-resistant form of ``parts`` (e.g. a hardware id)."""
    text = "-".join(str(p) for p in parts).lower()
    s = _SLUG_RE.sub("-", text).strip("-")[:60]
    return (s or "x") + "-" + hashlib.sha256(text.encode()).hexdigest()[:6]


def _assign_pages(entries: list[Entry]) -> None:
    """One record page per machine (hardware id), split into 2, 4, 8, ... buckets of about ``PAGE_RECORDS`` records
    at most. The page holds each record's anchor and summary line; its detail (flags with reasons, the reproduce
    command, config, metrics, provenance) is in the page's data file, ``data/machines/<page>.js``, loaded when a
    record is opened (``record_data``)."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(str(e.hw), []).append(e)
    for hw, group in groups.items():
        stem = f"records/{slug(hw)}"
        bits = 0
        while len(group) > PAGE_RECORDS << bits and bits < 16:
            bits += 1
        if not bits:
            for e in group:
                e.page = f"{stem}.html"
            continue
        of = f"of{1 << bits}.html"
        for e in group:   # the first 32 bits of the id's SHA-256, its top ``bits`` bits
            bucket = int.from_bytes(hashlib.sha256(e.rid.encode()).digest()[:4], "big") >> (32 - bits)
            e.page = f"{stem}-{bucket + 1}{of}"


def record_data_file(page: str) -> str:
    """The data file of a record page (site-relative): its records' detail, loaded on demand."""
    return "data/machines/" + page[len("records/"):-len(".html")] + ".js"


def pages_of(entries: list[Entry]) -> dict[str, list[Entry]]:
    """Record page -> its entries, in a stable order (kind, then id)."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.page, []).append(e)
    return {page: sorted(group, key=lambda e: (e.kind, e.rid)) for page, group in sorted(groups.items())}


def load_results(root: str | os.PathLike, cache=None, jobs: int = 1) -> Loaded:
    """The records that count under ``root`` (a directory or one file), as ``normbench.results.records_that_count``
    reads them for every ranking reader, with their site anchors and record pages; the rejected ones and the
    superseded copies as the site shows them. ``cache``: a ``results.readcache.ReadCache`` (the incremental build's);
    ``jobs``: processes to judge files in."""
    from normbench.results.counted import records_that_count

    root = Path(root)
    counted = records_that_count(root, cache=cache, jobs=jobs)

    shown: dict = {}   # a file's path as shown, once per file (its records share it)

    def entry(e) -> Entry:
        path = shown.get(e.path)
        if path is None:
            path = shown[e.path] = _display_path(e.path, root)
        return Entry(None, path, e.index, digest=e.digest, src=e)

    kept = [entry(e) for e in counted.entries]
    by_id = {k.rid: k for k in kept}
    superseded = [(entry(old), by_id[old.rid]) for old, _new in counted.superseded]
    rejected = [Rejected(_display_path(r.path, root), r.index, r.label, list(r.problems)) for r in counted.rejected]
    _assign_keys(kept)
    _assign_pages(kept)
    return Loaded(kept, rejected, superseded, counted.files)
