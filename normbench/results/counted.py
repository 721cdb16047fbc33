"""The records that count: the one reader every ranking uses (site, claims, generated docs, ``results.load``).

Stored records (``normbench.records``) may hold several copies of one id (a re-run, a merge of two results
folders), records of code that has since changed, and migrated schema-v1 records that never went through the check
gate. Whatever ranks reads them through :func:`records_that_count`, so every ranking stands on the same records:

- **one record per id**: the newest by ``provenance.timestamp``; on a tie, the copy read last (files in sorted path
  order, records in file order: a re-write appends). The others are reported as ``superseded``, never dropped
  silently;
- **stale**: made by code that has since changed (``results.staleness``), flagged ``stale`` in memory;
- **legacy**: a kernel record without a check verdict (``check: null``, a migrated schema-v1 record), flagged
  ``legacy`` in memory (accuracy records have always carried their verdict).

Flagged records are shown and never ranked. The files are not changed. ``validate``, ``compare``, ``prune`` and
``migrate`` read records as stored instead (``normbench.records``).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from normbench.records.schema import add_flag
from normbench.records.store import InvalidRecordError, Problem, frame, record_files, scan_file, twin_of
from normbench.results.readcache import Unread, record_head

LEGACY_REASON = ("migrated schema-v1 record: its implementation was never run through `normbench check` "
                 "(check: null), so it is shown and never ranked")


class Entry:
    """One record that counts, the file it was read from and its position there.

    ``rid``, ``kind``, ``timestamp``, ``hw`` and ``norm`` (``record_head``) are at hand; ``rec`` is the record itself.
    An entry read from the read cache gets its record on first use (``readcache.FileRecords``: a file's records are
    unpickled together when one of them is first read, with the flags this reader gave it): a build that reads one
    changed machine's records does not unpickle the other machines' (issue #38)."""

    __slots__ = ("_rec", "_src", "_pos", "_marks", "path", "index", "digest", "rid", "kind", "timestamp", "hw",
                 "norm")

    def __init__(self, rec: dict | None, path: Path, index: int, digest: str = "", *, head: tuple | None = None,
                 src=None, pos: int = 0):
        if rec is None and src is None:
            raise ValueError("an entry needs its record or where to read it (src)")
        self._rec, self._src, self._pos, self._marks = rec, src, pos, None
        self.path, self.index, self.digest = path, index, digest
        self.rid, self.kind, self.timestamp, self.hw, self.norm = head if head is not None else record_head(rec)

    @property
    def rec(self) -> dict:
        rec = self._rec
        if rec is None:
            rec = self._rec = self._src.record(self._pos)
            self._src = None
            if self._marks is not None:
                _flag(rec, *self._marks)
                self._marks = None
        return rec

    def mark(self, why: str | None, legacy: bool) -> None:
        """Flag the record ``stale`` (``why``) and/or ``legacy``: now if it is read, else when it is."""
        if self._rec is None:
            self._marks = (why, legacy)
        else:
            _flag(self._rec, why, legacy)

    def __repr__(self) -> str:
        return f"Entry({self.rid!r}, {str(self.path)!r}, {self.index})"


def _flag(rec: dict, why: str | None, legacy: bool) -> None:
    """The reader's flags on a copy that counts: stale first, then legacy."""
    if why:
        add_flag(rec, "stale", why)
    if legacy and "legacy" not in (rec.get("flags") or ()):
        add_flag(rec, "legacy", LEGACY_REASON)


@dataclass
class Rejected:
    """A file (``index`` None) or a record that is not a valid record, with every reason."""

    path: Path
    index: int | None
    label: str
    problems: list[str] = field(default_factory=list)


@dataclass
class Counted:
    """What :func:`records_that_count` read: the records that count, the invalid ones, the superseded copies."""

    entries: list[Entry]
    rejected: list[Rejected]
    superseded: list[tuple[Entry, Entry]]    # (older copy left out, the copy that counts), per duplicated id
    files: int

    @property
    def records(self) -> list[dict]:
        return [e.rec for e in self.entries]

    def problems(self) -> list[Problem]:
        return [Problem(str(r.path), None if r.index is None else r.label, p)
                for r in self.rejected for p in r.problems]


def newest_per_id(entries: list[Entry]) -> tuple[list[Entry], list[tuple[Entry, Entry]]]:
    """The deduplication rule: per id the newest copy, a tie going to the copy read last; (kept, superseded)."""
    best: dict[str, Entry] = {}
    superseded: list[tuple[Entry, Entry]] = []
    for e in entries:
        old = best.get(e.rid)
        if old is None:
            best[e.rid] = e
        elif e.timestamp >= old.timestamp:
            superseded.append((old, e))
            best[e.rid] = e
        else:
            superseded.append((e, old))
    return list(best.values()), superseded


def one_per_id(records) -> list[dict]:
    """``newest_per_id`` over plain records (in the order given, as if read in that order)."""
    here = Path()
    kept, _ = newest_per_id([Entry(r, here, i) for i, r in enumerate(records)])
    return [e.rec for e in kept]


def is_legacy(rec: dict) -> bool:
    """A kernel record without a check verdict (``check: null``): a migrated schema-v1 record, never checked."""
    return rec.get("kind") == "kernel" and rec.get("check") is None


def _read(path: Path) -> tuple[bytes | None, bytes | None]:
    """A record file's bytes and its compact twin's (None: unreadable, or no twin)."""
    try:
        raw = path.read_bytes()
    except OSError:
        raw = None
    twin = twin_of(path)
    twin_raw = None
    if twin is not None:
        try:
            twin_raw = twin.read_bytes()
        except OSError:
            twin_raw = None
    return raw, twin_raw


def _judge(path: Path, kind: str | None, judge: bool, raw: bytes, twin_raw: bytes | None, stale_cache: dict) -> list:
    """The items of one readable record file: (index, record, problems, label, stale reason, legacy) in file order."""
    from normbench.processes import phase
    from normbench.results.staleness import stale_flag_reason

    phase("judge")
    items = []
    for s in scan_file(path, kind, raw=raw, twin_raw=twin_raw):
        if s.problems:
            items.append((s.index, None, s.problems, s.label or "file", None, False))
            continue
        rec = s.record
        why = stale_flag_reason(rec, stale_cache) if judge else None
        legacy = judge and is_legacy(rec)
        items.append((s.index, rec, [], None, why, legacy))
    return items


def _cached(path: Path, kind: str | None, judge: bool, cache) -> tuple:
    """(digest, items, bytes, twin's bytes) of one record file: its items where it is unreadable (judged by
    ``scan_file``, never cached); ``...`` where ``cache`` has an entry for it (read later, ``cache.get``); else None,
    to be judged."""
    raw, twin_raw = _read(path)
    if raw is None:  # unreadable: judged by scan_file, never cached
        return "", [(s.index, s.record, s.problems, s.label, None, False) for s in scan_file(path, kind)], None, None
    from normbench.results.readcache import file_digest

    digest = file_digest(raw, twin_raw)
    if cache is not None and judge and cache.has(digest, kind):
        return digest, ..., raw, twin_raw
    return digest, None, raw, twin_raw


# A forked judging process finds its files here (set just before the fork), keeps its own stale cache and writes
# what it judged into the read cache (``_CACHE``) itself: the parent would otherwise pickle every record again.
_TODO: list | None = None
_STALE: dict = {}
_CACHE = None


def _judge_at(i: int) -> tuple[list, dict]:
    path, kind, judge, raw, twin_raw, digest = _TODO[i]
    items = _judge(path, kind, judge, raw, twin_raw, _STALE)
    if _CACHE is not None:
        _CACHE.put(digest, kind, items)
    return items, _STALE


def _judged_files(paths: list[Path], kind: str | None, judge: bool, cache, jobs: int) -> list[tuple[str, list]]:
    """(digest, items) of every path, in order: items are (index, record, problems, label, stale reason, legacy) in
    file order, from ``cache`` where it holds the file's bytes judged by this code (``readcache``); the others are
    judged, in ``jobs`` forked processes where there are several (parsing, validation and the stale judgement cost
    about a millisecond a record), while this process reads the cached ones."""
    global _TODO, _STALE, _CACHE
    import sys

    from normbench.processes import Pool, can_fork, phase

    keep = cache is not None and judge and hasattr(cache, "hashes")
    # forked workers write what they judge into a read cache themselves (``_judge_at``); this process marks it used
    workers_put = cache is not None and judge and hasattr(cache, "kept")
    stale_cache: dict = cache.hashes() if keep else {}
    known = len(stale_cache)
    done = [_cached(path, kind, judge, cache) for path in paths]
    todo = [i for i, d in enumerate(done) if d[1] is None]
    fork = can_fork() and "vl_convert" not in sys.modules and jobs > 1 and len(todo) > 1
    phase("read")
    out: list = [None] * len(done)

    def load_cached() -> None:
        for i, d in enumerate(done):
            if d[1] is ...:
                items = cache.get(d[0], kind)
                out[i] = (d[0], items) if items is not None else None   # unreadable entry: judged below
            elif d[1] is not None:
                out[i] = (d[0], d[1])

    if fork:
        _TODO, _STALE = [(paths[i], kind, judge, done[i][2], done[i][3], done[i][0]) for i in todo], stale_cache
        _CACHE = cache if workers_put else None
        try:
            with Pool(_judge_at, min(jobs, len(todo)), what="judging pool") as pool:
                results = pool.results(range(len(todo)))
                # The workers are forked and already have their first tasks: this process is free meanwhile.
                load_cached()
                judged = {}
                for k, (items, hashes) in results:
                    judged[todo[k]] = items
                    stale_cache.update(hashes)
        finally:
            _TODO, _STALE, _CACHE = None, {}, None
    else:
        load_cached()
        judged = {i: _judge(paths[i], kind, judge, done[i][2], done[i][3], stale_cache) for i in todo}
    for i in range(len(done)):
        if i in judged:
            items = judged[i]
        elif out[i] is None:   # in the cache's directory but not readable there
            items = _judge(paths[i], kind, judge, done[i][2], done[i][3], stale_cache)
        else:
            continue
        out[i] = (done[i][0], items)
        if i in judged and fork and workers_put:   # the worker that judged it wrote it
            cache.kept(done[i][0], kind)
        elif cache is not None and judge:
            cache.put(done[i][0], kind, items)
    if keep and len(stale_cache) != known:
        cache.keep_hashes(stale_cache)
    return out


def records_that_count(root: str | os.PathLike = "results", kind: str | None = None, judge: bool = True,
                       cache=None, jobs: int = 1) -> Counted:
    """Read every record file at ``root`` (a directory or one file): the records that count (one per id, stale and
    legacy ones flagged), the rejected ones and the superseded copies. ``judge=False`` skips the stale and legacy
    judgement (it imports the norm and model code to hash it). ``cache`` (a ``readcache.ReadCache``) keeps each
    file's validated and judged records under its bytes' hash and the judging code's, so an unchanged file is not
    read again; the outcome is the same with or without it. ``jobs`` > 1: the files to judge are judged in that many
    forked processes (the same outcome)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(
            f"no results at {root}: run `normbench bench --quick` (or `normbench train --quick`) first, "
            "or pass the results directory")
    entries: list[Entry] = []
    rejected: list[Rejected] = []
    marks: dict[int, tuple[str | None, bool]] = {}
    paths: set[Path] = set()
    files = record_files(root)
    for path, (digest, items) in zip(files, _judged_files(files, kind, judge, cache, jobs)):
        if items:
            paths.add(path)
        for index, rec, problems, label, why, legacy in items:
            if problems:
                rejected.append(Rejected(path, index, label or "file", list(problems)))
            else:
                if isinstance(rec, Unread):   # from the read cache: read on first use
                    e = Entry(None, path, index, digest, head=rec.head, src=rec.src, pos=rec.pos)
                else:
                    e = Entry(rec, path, index, digest)
                entries.append(e)
                if why or legacy:
                    marks[id(e)] = (why, legacy)
    kept, superseded = newest_per_id(entries)
    # Only the copies that count are flagged: stale first, then legacy.
    for e in kept:
        why, legacy = marks.get(id(e), (None, False))
        if why or legacy:
            e.mark(why, legacy)
    return Counted(kept, rejected, superseded, len(paths))


def load(root: str | os.PathLike = "results", kind: str = "kernel", errors: str = "warn", as_stored: bool = False):
    """The records of ``kind`` at ``root`` that count, as a pandas DataFrame (one row per record, see
    ``records.flatten``): one per id, ``flags`` holding ``stale`` / ``legacy`` where ``records_that_count`` put them,
    so a ranking of the rows whose ``flags`` are empty agrees with the site's and ``normbench claims``'.
    ``as_stored=True`` gives the records exactly as stored (``normbench.records.load``).

    Invalid records are never skipped silently: ``errors="warn"`` (default) warns about each, ``"raise"`` raises
    ``InvalidRecordError`` at the first, ``"ignore"`` skips them."""
    if errors not in ("warn", "raise", "ignore"):
        raise ValueError(f"errors must be 'warn', 'raise' or 'ignore', not {errors!r}")
    if as_stored:
        from normbench.records.store import load as load_as_stored

        return load_as_stored(root, kind, errors=errors)
    counted = records_that_count(root, kind)
    problems = counted.problems()
    if problems and errors == "raise":
        raise InvalidRecordError(problems[:1])
    if errors == "warn":
        for p in problems:
            warnings.warn(f"skipping invalid result: {p}", stacklevel=2)
    return frame((e.path, e.rec) for e in counted.entries)
