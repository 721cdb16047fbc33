"""Record files on disk: layout, atomic merge-writes, reading with validation, and pandas loaders.

Layout (one JSON array of records per file; ``root`` is ``results/`` by default)::

    <root>/kernel/<hardware_id>/<norm>.json
    <root>/accuracy/<task>/<hardware_id>/<norm>.json

A write merges into the file by record id (a newer record with the same id replaces the older one) and
goes through a temporary file, ``fsync`` and ``os.replace``, so a killed run leaves either the old or the
new file, never a half-written one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from normbench.results.schema import describe, migrate, record_id, validate_record

try:  # advisory locking so two writers (bench and an ASV ingest, say) merge instead of overwrite
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class InvalidRecordError(ValueError):
    """One or more records failed validation; ``problems`` lists them."""

    def __init__(self, problems: list):
        self.problems = list(problems)
        head = "; ".join(str(p) for p in self.problems[:5])
        more = f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"invalid result record(s): {head}{more}")


@dataclass(frozen=True)
class Problem:
    """One problem found while reading records: the file, the record (if any) and what is wrong."""

    path: str
    record: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.record + ': ' if self.record else ''}{self.message}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", str(text).lower()).strip("-.") or "unknown"


def record_path(rec: dict, root: str | os.PathLike = "results") -> Path:
    """Where ``rec`` is stored under ``root`` (see the module docstring for the layout)."""
    root = Path(root)
    hw = _slug(rec["provenance"]["hardware_id"])
    norm = _slug(rec["norm"]["name"])
    if rec["kind"] == "kernel":
        return root / "kernel" / hw / f"{norm}.json"
    return root / "accuracy" / _slug(rec["config"]["task"]) / hw / f"{norm}.json"


def _read_file(path: Path) -> tuple[list | None, str | None]:
    """(records, None) or (None, problem) for one record file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return None, f"cannot be read: {exc}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"is not valid JSON ({exc}); a record file is a JSON array of records"
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None, f"must hold a JSON array of records, not {type(data).__name__}"
    return data, None


@contextlib.contextmanager
def _locked(directory: Path):
    if fcntl is None:
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that readers only ever see the old or the complete new content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp makes 0600 files; records are meant to be shared
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _dumps(records: list) -> str:
    return json.dumps(records, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_records(records: Iterable[dict], root: str | os.PathLike = "results") -> list[Path]:
    """Validate ``records`` and merge them into their files under ``root``; returns the files written.

    Nothing is written if any record is invalid (``InvalidRecordError`` lists every problem). A record
    without an ``id`` gets the standard one (``record_id``). Existing records in a file are kept; one with
    the same id as a new record is replaced by it. An existing file that is not valid JSON is moved aside
    to ``<name>.json.corrupt-<n>`` (never deleted) before the new file is written.
    """
    records = list(records)
    problems: list[str] = []
    for i, rec in enumerate(records):
        if isinstance(rec, dict) and "id" not in rec:
            try:
                rec["id"] = record_id(rec["kind"], rec["norm"]["name"], rec["config"],
                                      rec["provenance"]["hardware_id"], rec.get("impl_hash") or "")
            except (KeyError, TypeError):
                pass  # validation below names what is missing
        for p in validate_record(rec):
            problems.append(f"{describe(rec, i)}: {p}")
    if problems:
        raise InvalidRecordError(problems)
    by_path: dict[Path, list[dict]] = {}
    for rec in records:
        by_path.setdefault(record_path(rec, root), []).append(rec)
    written = []
    for path, new in by_path.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path.parent):
            existing: list = []
            if path.exists():
                existing, problem = _read_file(path)
                if problem is not None:
                    n = 0
                    while (aside := path.with_name(f"{path.name}.corrupt-{n}")).exists():
                        n += 1
                    os.replace(path, aside)
                    warnings.warn(f"{path} {problem}; moved it aside to {aside.name} and wrote a fresh file",
                                  stacklevel=2)
                    existing = []
            new_by_id = {r["id"]: r for r in new}
            merged, seen = [], set()
            for old in existing:
                rid = old.get("id") if isinstance(old, dict) else None
                if rid in new_by_id:
                    if rid not in seen:
                        merged.append(new_by_id[rid])
                        seen.add(rid)
                else:
                    merged.append(old)  # kept as is, even if invalid: never drop what was there
            merged.extend(r for rid, r in new_by_id.items() if rid not in seen)
            atomic_write_text(path, _dumps(merged))
        written.append(path)
    return written


def record_files(root: str | os.PathLike) -> list[Path]:
    """The record files at ``root``: the file itself, or every ``*.json`` below a directory.

    Names starting with ``.`` (temporary files) or ``_`` (side files such as ``_skipped.json``) are not records.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no results at {root}: run `normbench bench` or pass the results directory")
    if root.is_file():
        return [root]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".json") and f[0] not in "._")
    return files


def _scan(root, kind=None) -> Iterator[tuple[Path, dict | None, Problem | None]]:
    for path in record_files(root):
        records, problem = _read_file(path)
        if problem is not None:
            yield path, None, Problem(str(path), None, problem)
            continue
        for i, rec in enumerate(records):
            if kind is not None and isinstance(rec, dict) and rec.get("kind") != kind:
                continue
            problems = validate_record(rec)
            if problems:
                for p in problems:
                    yield path, None, Problem(str(path), describe(rec, i), p)
            else:
                yield path, migrate(rec), None


def iter_records(root: str | os.PathLike = "results", kind: str | None = None,
                 errors: str = "warn") -> Iterator[tuple[Path, dict]]:
    """Yield ``(path, record)`` for every valid record at ``root`` (a file or a directory), optionally of one kind.

    Records of an older schema version are yielded migrated to the current one (``schema.migrate``), so readers see
    one format; the files are not changed.

    Invalid records and unreadable files are never skipped silently: ``errors="warn"`` (default) warns about
    each and goes on, ``"raise"`` raises ``InvalidRecordError`` at the first, ``"ignore"`` skips them (use
    ``load_report`` to list them).
    """
    if errors not in ("warn", "raise", "ignore"):
        raise ValueError(f"errors must be 'warn', 'raise' or 'ignore', not {errors!r}")
    for path, rec, problem in _scan(root, kind):
        if problem is not None:
            if errors == "raise":
                raise InvalidRecordError([problem])
            if errors == "warn":
                warnings.warn(f"skipping invalid result: {problem}", stacklevel=2)
            continue
        yield path, rec


def load_report(root: str | os.PathLike = "results", kind: str | None = None) -> list[Problem]:
    """Every problem with the record files at ``root``; empty when all of them are valid."""
    return [p for _, _, p in _scan(root, kind) if p is not None]


def count_records(root: str | os.PathLike = "results") -> tuple[int, list[Problem]]:
    """(number of valid records, problems) at ``root``."""
    n, problems = 0, []
    for _, rec, p in _scan(root):
        if p is not None:
            problems.append(p)
        else:
            n += 1
    return n, problems


def existing_ids(root: str | os.PathLike = "results", kind: str | None = None) -> set[str]:
    """Ids of the valid records at ``root`` (empty if ``root`` does not exist yet): the work already done."""
    if not Path(root).exists():
        return set()
    return {rec["id"] for _, rec in iter_records(root, kind, errors="ignore")}


_PROV_COLUMNS = ("timestamp", "normbench_version", "git_commit", "git_dirty", "python", "torch", "triton", "platform",
                 "node", "hardware_id", "command")


def flatten(rec: dict, path: str | os.PathLike | None = None) -> dict:
    """One DataFrame row for a record: config and metrics as columns, nested metrics joined with ``_``."""
    norm = rec["norm"]
    row = {
        "id": rec["id"],
        "kind": rec["kind"],
        "norm": norm["name"],
        "norm_title": norm.get("title"),
        "norm_family": norm.get("family"),
        "norm_kind": norm.get("kind"),
        "norm_package": norm.get("package"),
        "norm_meta": norm,
        "impl_hash": rec.get("impl_hash", ""),
        "flags": tuple(rec.get("flags") or ()),
        "flag_reasons": dict(rec.get("flag_reasons") or {}),
        "check_status": (rec.get("check") or {}).get("status"),
    }
    for key, value in rec["config"].items():
        if key == "shape":
            value = tuple(value)
        row[key] = value
    for key, value in rec["metrics"].items():
        if isinstance(value, dict):
            for sub, v in value.items():
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        row[f"{key}_{sub}_{k2}"] = v2
                elif v is not None or key != "err":  # err.dx is null for fwd: its columns stay NaN
                    row[f"{key}_{sub}"] = v
        else:
            row[key] = value
    prov = rec["provenance"]
    for key in _PROV_COLUMNS:
        row[key] = prov.get(key)
    for key, value in (prov.get("hardware") or {}).items():
        row[f"hw_{key}"] = value
    row["plugins"] = prov.get("plugins")
    row["record_path"] = str(path) if path is not None else None
    return row


def load(root: str | os.PathLike = "results", kind: str = "kernel", errors: str = "warn"):
    """The valid records of ``kind`` at ``root`` as a pandas DataFrame, one row per record (see ``flatten``)."""
    import pandas as pd

    rows = [flatten(rec, path) for path, rec in iter_records(root, kind, errors=errors)]
    if not rows:
        return pd.DataFrame(columns=["id", "kind", "norm", "record_path"])
    return pd.DataFrame(rows)
