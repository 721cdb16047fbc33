"""Reading result records for the site: every file is read, every record validated, and nothing is dropped silently.

Valid records become ``Entry`` objects; invalid ones (bad JSON, failed validation, a record the site cannot
render) become ``Rejected`` items that the build prints and the site lists on its "rejected records" page.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


@dataclass
class Entry:
    """One valid record, where it came from, and the file name its copy gets in the site."""

    rec: dict
    path: str          # the record file, as the user would type it (e.g. results/kernel/cpu-x/layernorm.json)
    index: int         # position inside that file
    key: str = ""      # safe, unique name: the record's anchor on its page
    page: str = ""     # its record page, relative to the site root (records/<norm>--<device>[-<bucket>].html)

    @property
    def href(self) -> str:
        """The record's place on its record page, relative to the site root."""
        return f"{self.page}#{self.key}"

    @property
    def json_file(self) -> str:
        """The gzip-compressed JSON file (an array of the page's records, as validated) that holds this record."""
        return self.page[:-len(".html")] + ".json.gz"

    @property
    def kind(self) -> str:
        return self.rec["kind"]

    @property
    def rid(self) -> str:
        return str(self.rec.get("id"))


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


def _label(rec, index) -> str:
    try:
        from normbench.results.schema import describe

        return describe(rec, index)
    except Exception:  # a hostile record must not break the description either
        return f"record {index}"


MAX_DEPTH = 32


def _too_deep(obj, limit: int = MAX_DEPTH) -> bool:
    stack = [(obj, 0)]
    while stack:
        o, d = stack.pop()
        if d > limit:
            return True
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return False


def site_problems(rec: dict) -> list[str]:
    """What the site itself needs beyond the schema (so that a validator gap cannot crash the build)."""
    if _too_deep(rec):
        return [f"nested more than {MAX_DEPTH} levels deep; no normbench record is"]
    problems = []
    if rec.get("kind") not in ("kernel", "accuracy"):
        problems.append("kind must be kernel or accuracy")
    norm = rec.get("norm")
    if not isinstance(norm, dict) or not isinstance(norm.get("name"), str) or not norm["name"]:
        problems.append("norm.name must be a string")
    for part in ("config", "metrics", "provenance"):
        if not isinstance(rec.get(part), dict):
            problems.append(f"{part} must be an object")
    prov = rec.get("provenance")
    if isinstance(prov, dict) and not isinstance(prov.get("hardware_id"), str):
        problems.append("provenance.hardware_id must be a string")
    if not isinstance(rec.get("id"), str) or not rec.get("id"):
        problems.append("id must be a string")
    return problems


def _validate(rec) -> list[str]:
    try:
        from normbench.results import validate_record
    except ImportError:  # the results package is the authority; without it the site's own checks still run
        validate_record = None
    problems: list[str] = []
    if validate_record is not None:
        try:
            problems = list(validate_record(rec))
        except Exception as exc:  # the validator crashing on a record is itself a finding
            problems = [f"the validator failed on this record: {type(exc).__name__}: {exc}"]
    if not problems and isinstance(rec, dict):
        problems = site_problems(rec)
    elif not isinstance(rec, dict):
        problems = problems or [f"a record must be a JSON object, got {type(rec).__name__}"]
    return [str(p) for p in problems]


def _record_files(root: Path) -> list[Path]:
    try:
        from normbench.results import record_files

        return list(record_files(root))
    except ImportError:
        pass
    if root.is_file():
        return [root]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".json") and not f.startswith("."))
    return files


def _read(path: Path) -> tuple[list | None, str | None]:
    """The records of one file (compact ``.json.gz`` or plain ``.json``), or the problem reading it."""
    try:
        from normbench.results.store import read_record_file

        return read_record_file(path)
    except ImportError:
        pass
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot be read: {exc}"
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"is not valid JSON: {exc}"
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None, f"must hold a JSON array of records, not {type(data).__name__}"
    return data, None


def _timestamp(rec: dict) -> str:
    ts = rec.get("provenance", {}).get("timestamp")
    return ts if isinstance(ts, str) else ""


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


#: Records per record page at most (about 3-8 kB of HTML each): pages of a larger (norm, device) group are split
#: by the first hex digits of a hash of the record id, so a record keeps its page while its group's size stays in
#: the same power of 16.
PAGE_RECORDS = 250
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def norm_stem(name: str) -> str:
    """A norm's name in file names (its pages, its record pages); odd names get a hash so they cannot escape."""
    return name if _NAME_RE.match(name) else f"n-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def slug(*parts) -> str:
    """A file-name-safe, collision-resistant form of ``parts`` (e.g. a hardware id)."""
    text = "-".join(str(p) for p in parts).lower()
    s = _SLUG_RE.sub("-", text).strip("-")[:60]
    return (s or "x") + "-" + hashlib.sha256(text.encode()).hexdigest()[:6]


def _assign_pages(entries: list[Entry]) -> None:
    """One record page per (norm, device), split into buckets of at most ``PAGE_RECORDS`` records.

    One page per record made a 100k-record site 1.6 GB (page and JSON copy, ~11 kB a record, each repeating the
    navigation and the provenance); grouped, the provenance of a run is shown once per page."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        norm = e.rec.get("norm", {}).get("name")
        hw = e.rec.get("provenance", {}).get("hardware_id")
        groups.setdefault((str(norm), str(hw)), []).append(e)
    for (norm, hw), group in groups.items():
        stem = f"records/{norm_stem(norm)}--{slug(hw)}"
        digits = 0
        while len(group) > PAGE_RECORDS * 16 ** digits and digits < 4:
            digits += 1
        for e in group:
            bucket = hashlib.sha256(e.rid.encode()).hexdigest()[:digits]
            e.page = f"{stem}{'-' + bucket if bucket else ''}.html"


def pages_of(entries: list[Entry]) -> dict[str, list[Entry]]:
    """Record page -> its entries, in a stable order (kind, then id)."""
    out: dict[str, list[Entry]] = {}
    for e in sorted(entries, key=lambda e: (e.page, e.kind, e.rid)):
        out.setdefault(e.page, []).append(e)
    return out


def load_results(root: str | os.PathLike) -> Loaded:
    """Read every record under ``root`` (a directory or one file)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(
            f"no results at {root}: run `normbench bench --quick` (or `normbench train --quick`) first, "
            "or pass --results DIR"
        )
    files = _record_files(root)
    entries: list[Entry] = []
    rejected: list[Rejected] = []
    for path in files:
        shown = _display_path(path, root)
        data, problem = _read(path)
        if problem is not None:
            rejected.append(Rejected(shown, None, "file", [problem]))
            continue
        for i, rec in enumerate(data):
            problems = _validate(rec)
            if problems:
                rejected.append(Rejected(shown, i, _label(rec, i), problems))
            else:
                entries.append(Entry(rec, shown, i))
    # One id is one measurement: keep the newest copy and report the others.
    newest: dict[str, Entry] = {}
    superseded: list[tuple[Entry, Entry]] = []
    for e in entries:
        old = newest.get(e.rid)
        if old is None:
            newest[e.rid] = e
        elif _timestamp(e.rec) > _timestamp(old.rec):
            superseded.append((old, e))
            newest[e.rid] = e
        else:
            superseded.append((e, old))
    kept = list(newest.values())
    # A record of code that has since changed is shown, flagged stale, and never ranked.
    from normbench.results.prune import mark_stale

    mark_stale(e.rec for e in kept)
    _assign_keys(kept)
    _assign_pages(kept)
    return Loaded(kept, rejected, superseded, len(files))
