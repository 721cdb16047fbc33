"""A cache of judged record files for :func:`normbench.results.records_that_count` (the site's incremental build).

Reading a record file means gunzip, JSON, validation against the schema, migration and the stale judgement (which
hashes today's norm, model and recipe code). The outcome is a function of the file's bytes and of the code that
judges them, so it is stored under a key made of both:

- the file: a SHA-256 of its bytes (and of the compact twin a plain ``.json`` is read against, ``store.twin_of``),
  and the ``kind`` asked for;
- the code (``judge_key``): every file of the ``normbench`` package outside ``normbench/site`` (records, schema,
  migration, the norms, kernels, baselines and adapters, models and recipes whose hashes staleness compares),
  normbench's version, the torch, Triton and timm versions installed (a record without its own versions is judged
  at them) and every installed plugin distribution of the ``normbench.norms`` entry points (name, version and its
  files' hashes as its wheel recorded them).

A changed byte anywhere in either gives another key, so a cached judgement is never served for other bytes or
other code. The cache is a directory of pickles, one per file judged (each valid record's head apart from the
records, which stay pickled until one is read: ``FileRecords``), written atomically; deleting it is always
safe (the next read judges every file again). Pickles are read only from the directory the caller names: it is
the user's own build cache, as trusted as the code that wrote it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import secrets
from pathlib import Path

from normbench.versions import dist_version

#: Bumped when what a cache entry holds changes (2: a file's records pickled apart from what is read of each).
FORMAT = 2
_PACKAGE = Path(__file__).resolve().parents[1]


def _tree_digest(root: Path, skip: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                             and (f"{rel}/{d}" if rel != "." else d) not in skip)
        for f in sorted(filenames):
            if f.endswith((".pyc", ".pyo")) or f.startswith("."):
                continue
            p = Path(dirpath) / f
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            try:
                h.update(p.read_bytes())
            except OSError:
                h.update(b"<unreadable>")
            h.update(b"\0")
    return h.hexdigest()


def _dist_versions(*names: str) -> list[str]:
    return [f"{n}=={v}" if (v := dist_version(n)) else f"{n} absent" for n in names]


def _plugins() -> list[str]:
    """Every distribution offering ``normbench.norms`` entry points, but normbench: name, version, and the hashes its
    RECORD file lists (an installed wheel's files)."""
    from importlib import metadata

    out = []
    try:
        eps = metadata.entry_points(group="normbench.norms")
    except Exception:  # pragma: no cover - a broken environment: judged uncached below anyway
        return ["<entry points unreadable>"]
    seen = set()
    for ep in sorted(eps, key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        name = getattr(dist, "name", None) or "?"
        out.append(f"{ep.name}={ep.value} ({name})")
        if dist is None or name in seen or name == "normbench":
            continue
        seen.add(name)
        out.append(f"{name}=={dist.version}")
        try:
            out.append(hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest())
        except Exception:
            out.append("<no RECORD>")
    return out


_JUDGE_KEY: str | None = None


def judge_key() -> str:
    """The code that judges records, as one hash (see the module docstring); computed once per process."""
    global _JUDGE_KEY
    if _JUDGE_KEY is None:
        parts = [f"format {FORMAT}", _tree_digest(_PACKAGE, skip=("site",)),
                 *_dist_versions("normbench", "torch", "triton", "timm"), *_plugins()]
        _JUDGE_KEY = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return _JUDGE_KEY


def file_digest(raw: bytes, twin_raw: bytes | None) -> str:
    """A record file's identity for the cache: its bytes and those of its compact twin (None: none)."""
    h = hashlib.sha256(raw)
    h.update(b"\0twin\0" + (twin_raw if twin_raw is not None else b"<none>"))
    return h.hexdigest()


class PickleDir:
    """Values under keys in one directory, a pickle per key named by a hash of ``namespace`` (the code the values
    are a function of) and the key, stored with both so a mismatch is a miss, never a wrong value; written
    atomically; ``used`` names what this process read or wrote and ``prune`` removes the rest. ``directory`` None:
    a store that keeps nothing. Shared by the reader's cache and the site's figure and download stores."""

    def __init__(self, directory: str | os.PathLike | None, namespace: str):
        self.dir = None if directory is None else Path(directory)
        self.namespace = namespace
        self.used: set[str] = set()
        if self.dir is not None:
            _DIRS.add(self.dir)
            _sweep(self.dir)   # what a writer killed by SIGKILL (no clean-up at all) left in an earlier run

    def _name(self, key) -> str:
        return hashlib.sha256(f"{self.namespace}\0{key!r}".encode("utf-8", "surrogatepass")).hexdigest() + ".pkl"

    def get(self, key):
        """The value stored under ``key``, or None."""
        if self.dir is None:
            return None
        name = self._name(key)
        self.used.add(name)
        try:
            stored, value = pickle.loads((self.dir / name).read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError):
            return None
        return value if stored == (self.namespace, key) else None

    def has(self, key) -> bool:
        """Whether an entry for ``key`` is on disk (``get`` may still find it unreadable or another key's)."""
        return self.dir is not None and (self.dir / self._name(key)).is_file()

    def put(self, key, value) -> None:
        if self.dir is None:
            return
        name = self._name(key)
        self.used.add(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        # named before it is made (an interruption between the two leaves nothing unnamed), with the writer's pid:
        # a pool worker ended by SIGTERM's default action skips the ``except`` below, and ``sweep_orphans`` in the
        # process that ran the pool removes what such a writer left
        tmp = self.dir / f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            with open(tmp, "xb") as f:
                pickle.dump(((self.namespace, key), value), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.dir / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def prune(self, keep: set[str] | None = None) -> int:
        """Remove the entries not in ``keep`` (default: those this process did not use); how many."""
        keep = self.used if keep is None else keep
        n = 0
        if self.dir is None or not self.dir.is_dir():
            return 0
        for p in self.dir.iterdir():
            if p.name not in keep:
                try:
                    p.unlink()
                    n += 1
                except OSError:
                    pass
        return n


#: Every ``PickleDir`` directory this process opened (and its forked workers inherited): ``sweep_orphans`` looks there.
_DIRS: set[Path] = set()


def _gone(pid: int) -> bool:
    """Whether no process ``pid`` exists (a zombie, not yet reaped, still does: a pool's teardown joins first)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:   # another user's process: not ours, so not gone
        return False
    except OverflowError:   # no process has such a number
        return True
    return False


def _sweep(directory: Path) -> int:
    n = 0
    with contextlib.suppress(OSError):
        for p in directory.glob(".tmp-*"):
            pid = p.name.split("-")[1]
            if pid.isdigit() and int(pid) != os.getpid() and _gone(int(pid)):
                p.unlink(missing_ok=True)
                n += 1
    return n


def sweep_orphans() -> int:
    """Remove the temporary files that writers no longer alive left in this process's ``PickleDir`` directories
    (a forked pool worker killed mid-``put``: SIGTERM's default action, SIGKILL); how many. Called by the process
    that ran the pool once its workers are joined (``site build``, after its judging pool and its page pool); a
    ``PickleDir`` opened on a directory sweeps it too."""
    return sum(_sweep(d) for d in list(_DIRS))


def record_head(rec: dict) -> tuple:
    """What every reader asks of every record, without reading the rest: (id as text, kind, timestamp or "",
    hardware id, norm name) (``counted.Entry``)."""
    prov, norm = rec.get("provenance"), rec.get("norm")
    ts = prov.get("timestamp") if isinstance(prov, dict) else None
    return (str(rec.get("id")), rec.get("kind"), ts if isinstance(ts, str) else "",
            prov.get("hardware_id") if isinstance(prov, dict) else None,
            norm.get("name") if isinstance(norm, dict) else None)


class FileRecords:
    """The valid records of one cached file, kept pickled until one of them is read: then all of them are
    unpickled together (``counted.Entry.rec``). A build reads what a page shows of an unchanged machine from the
    site's own caches, so most of a rebuild's files are never unpickled."""

    __slots__ = ("_blob", "_recs")

    def __init__(self, blob: bytes):
        self._blob, self._recs = blob, None

    def record(self, pos: int) -> dict:
        if self._recs is None:
            self._recs, self._blob = pickle.loads(self._blob), None
        return self._recs[pos]


class Unread:
    """A valid record in a judged file's items (``ReadCache.get``) that is not unpickled yet: its head
    (``record_head``) and where to read it."""

    __slots__ = ("head", "src", "pos")

    def __init__(self, head: tuple, src: FileRecords, pos: int):
        self.head, self.src, self.pos = head, src, pos


class ReadCache(PickleDir):
    """Judged record files under ``directory`` (``records_that_count(cache=...)``): ``get``/``put`` by file digest
    and kind, for the code of this process (``judge_key``); ``prune`` (called by a build once it has read everything)
    removes what this build did not use."""

    def __init__(self, directory: str | os.PathLike):
        super().__init__(directory, judge_key())
        self.hits = 0
        self.misses = 0

    def get(self, digest: str, kind: str | None):
        """The judged items of a file, as ``put`` was given them but for each valid record: an ``Unread`` (its
        head, and its record read on first use); None where there is no entry."""
        value = super().get((digest, kind))
        try:
            heads, blob = value
            src = FileRecords(blob)
            items = [(i, None if head is None else Unread(head, src, pos), problems, label, why, legacy)
                     for i, head, pos, problems, label, why, legacy in heads]
        except (TypeError, ValueError):   # none, or not this format's
            self.misses += 1
            return None
        self.hits += 1
        return items

    def hashes(self) -> dict:
        """The stale judgement's hashes of today's code (``staleness.stale_reason``'s cache: implementation and model
        hashes by norm, backend and library versions), as the last build left them: a function of the judging code
        alone, which this cache's namespace is. A rebuild then judges changed files without importing the norms."""
        value = PickleDir.get(self, ("stale judgement hashes",))
        return dict(value) if isinstance(value, dict) else {}

    def keep_hashes(self, hashes: dict) -> None:
        PickleDir.put(self, ("stale judgement hashes",), dict(hashes))

    def has(self, digest: str, kind: str | None) -> bool:
        found = super().has((digest, kind))
        if not found:
            self.misses += 1
        return found

    def put(self, digest: str, kind: str | None, items) -> None:
        """Keep a file's judged items (index, record or None, problems, label, stale reason, legacy): each valid
        record's head apart, the records pickled together (``FileRecords``)."""
        recs, heads = [], []
        for i, rec, problems, label, why, legacy in items:
            if rec is None or problems:
                heads.append((i, None, None, problems, label, why, legacy))
            else:
                heads.append((i, record_head(rec), len(recs), problems, label, why, legacy))
                recs.append(rec)
        super().put((digest, kind), (heads, pickle.dumps(recs, protocol=pickle.HIGHEST_PROTOCOL)))

    def kept(self, digest: str, kind: str | None) -> None:
        """Count the entry of ``(digest, kind)`` as used by this process (another process, a judging worker of
        ``records_that_count``, wrote it): ``prune`` keeps it."""
        if self.dir is not None:
            self.used.add(self._name((digest, kind)))
