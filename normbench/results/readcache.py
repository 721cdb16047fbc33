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
other code. The cache is a directory of pickles, one per file judged, written atomically; deleting it is always
safe (the next read judges every file again). Pickles are read only from the directory the caller names: it is
the user's own build cache, as trusted as the code that wrote it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path

#: Bumped when what a cache entry holds changes.
FORMAT = 1
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
    from importlib import metadata

    out = []
    for name in names:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} absent")
    return out


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


class ReadCache:
    """Judged record files under ``directory`` (``records_that_count(cache=...)``): ``get``/``put`` by file digest,
    for the code of this process (``judge_key``). ``used`` names the entries this process read or wrote; ``prune``
    removes the others (called by a build once it has read everything)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.key = judge_key()
        self.used: set[str] = set()
        self.hits = 0
        self.misses = 0

    def _name(self, digest: str, kind: str | None) -> str:
        return hashlib.sha256(f"{self.key}\0{digest}\0{kind}".encode()).hexdigest() + ".pkl"

    def get(self, digest: str, kind: str | None):
        name = self._name(digest, kind)
        self.used.add(name)
        try:
            data = (self.dir / name).read_bytes()
            value = pickle.loads(data)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError):
            self.misses += 1
            return None
        if not (isinstance(value, tuple) and len(value) == 2 and value[0] == (self.key, digest, kind)):
            self.misses += 1
            return None
        self.hits += 1
        return value[1]

    def put(self, digest: str, kind: str | None, items) -> None:
        name = self._name(digest, kind)
        self.used.add(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(((self.key, digest, kind), items), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.dir / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def prune(self) -> int:
        """Remove the entries this process did not use (another code's, files since changed); how many."""
        n = 0
        if not self.dir.is_dir():
            return 0
        for p in self.dir.iterdir():
            if p.name not in self.used:
                try:
                    p.unlink()
                    n += 1
                except OSError:
                    pass
        return n
