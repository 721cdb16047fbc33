"""Record files on disk: layout, atomic merge-writes, reading with validation, and pandas loaders.

Layout (``root`` is ``results/`` by default)::

    <root>/kernel/<hardware_id>/<norm>.json.gz
    <root>/accuracy/<task>/<hardware_id>/<norm>.json.gz
    <root>/endtoend/<hardware_id>/<model>.json.gz      (kind endtoend: one file per catalog model)

A record file is compact (``normbench.records`` format 1): gzip (deterministic: no name, mtime 0) of one JSON object
holding each distinct provenance and norm metadata once, and the records with references to them::

    {"format": "normbench.records", "format_version": 1,
     "provenance": [{...provenance without timestamp...}, ...], "norms": [{...norm metadata...}, ...],
     "records": [{...record without provenance and norm..., "_prov": 0, "_ts": "2025-...Z", "_norm": 0}, ...]}

Reading expands every record back to the full record (``_prov`` -> ``provenance`` with its ``timestamp``
``_ts``, ``_norm`` -> ``norm``), so loaders and validation see exactly what was written. Plain ``*.json`` files
holding a JSON array of full records (schema v1's layout, or records written by hand) are read too; a write to a
norm's file merges the plain file beside it into the compact one and then removes it (nothing is dropped: records
that cannot be compacted are stored whole).

A write merges into the file by record id (a newer record with the same id replaces the older one), holds an
``flock`` on the directory (so concurrent writers merge instead of overwrite) and goes through a temporary file,
``fsync`` and ``os.replace``, so a killed run leaves either the old or the new file, never a half-written one.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import re
import secrets
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from normbench.processes import phase
from normbench.records.schema import describe, migrate, record_id, validate_record

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


COMPACT_SUFFIX = ".json.gz"
LEGACY_SUFFIX = ".json"
FORMAT = "normbench.records"
FORMAT_VERSION = 1


def record_path(rec: dict, root: str | os.PathLike = "results") -> Path:
    """Where ``rec`` is stored under ``root`` (see the module docstring for the layout)."""
    root = Path(root)
    hw = _slug(rec["provenance"]["hardware_id"])
    norm = _slug(rec["norm"]["name"])
    if rec["kind"] == "kernel":
        return root / "kernel" / hw / f"{norm}{COMPACT_SUFFIX}"
    if rec["kind"] == "endtoend":  # one file per model: its regimes and passes
        return root / "endtoend" / hw / f"{_slug(rec['config']['model'])}{COMPACT_SUFFIX}"
    return root / "accuracy" / _slug(rec["config"]["task"]) / hw / f"{norm}{COMPACT_SUFFIX}"


def _legacy_path(path: Path) -> Path:
    """The plain ``<norm>.json`` beside a compact ``<norm>.json.gz``."""
    return path.with_name(path.name[: -len(COMPACT_SUFFIX)] + LEGACY_SUFFIX)


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact(records: list) -> dict:
    """The compact file object for ``records`` (each provenance and norm once); see the module docstring."""
    provs: dict[str, int] = {}
    norms: dict[str, int] = {}
    prov_list, norm_list, out = [], [], []
    for rec in records:
        if not (isinstance(rec, dict) and isinstance(rec.get("provenance"), dict) and isinstance(rec.get("norm"), dict)
                and not ({"_prov", "_ts", "_norm"} & set(rec))):
            out.append(rec)  # stored whole: never drop or reshape what cannot be compacted
            continue
        prov = dict(rec["provenance"])
        has_ts = "timestamp" in prov
        ts = prov.pop("timestamp", None)
        pk, nk = _canon(prov), _canon(rec["norm"])
        if pk not in provs:
            provs[pk] = len(prov_list)
            prov_list.append(prov)
        if nk not in norms:
            norms[nk] = len(norm_list)
            norm_list.append(rec["norm"])
        slim = {}
        for k, v in rec.items():  # references take the place of the fields, so expanding restores the order
            if k == "provenance":
                slim["_prov"] = provs[pk]
                if has_ts:
                    slim["_ts"] = ts
            elif k == "norm":
                slim["_norm"] = norms[nk]
            else:
                slim[k] = v
        out.append(slim)
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "provenance": prov_list, "norms": norm_list,
            "records": out}


def _json_copy(v):
    """A deep copy of a value ``json.loads`` made (dicts, lists and immutable scalars, nothing shared): what
    ``copy.deepcopy`` makes, at a fraction of its cost (no memo, no dispatch per type; a tenth of reading a record)."""
    t = type(v)
    if t is dict:
        return {k: _json_copy(x) for k, x in v.items()}
    if t is list:
        return [_json_copy(x) for x in v]
    return copy.deepcopy(v) if t not in _SCALARS else v


_SCALARS = frozenset((str, int, float, bool, type(None)))


def expand(data: dict) -> list:
    """The full records of a compact file object (inverse of :func:`compact`); raises ``ValueError`` if malformed."""
    if data.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"compact format version {data.get('format_version')!r} is not {FORMAT_VERSION}; "
                         "upgrade normbench")
    provs, norms, records = data.get("provenance"), data.get("norms"), data.get("records")
    if not (isinstance(provs, list) and isinstance(norms, list) and isinstance(records, list)):
        raise ValueError("a compact record file needs lists 'provenance', 'norms' and 'records'")
    out = []
    for rec in records:
        if isinstance(rec, dict) and "_prov" in rec:
            rec = dict(rec)
            pi, ni = rec["_prov"], rec.get("_norm")
            if not (isinstance(pi, int) and 0 <= pi < len(provs) and isinstance(ni, int) and 0 <= ni < len(norms)):
                raise ValueError(f"record {rec.get('id')!r} refers to provenance {pi!r} / norm {ni!r}, "
                                 "which the file does not have")
            prov = _json_copy(provs[pi])  # each record owns its copy: editing one must not edit the others
            if "_ts" in rec:
                prov = {"timestamp": rec.pop("_ts"), **prov}
            rec = {("provenance" if k == "_prov" else "norm" if k == "_norm" else k):
                   (prov if k == "_prov" else _json_copy(norms[ni]) if k == "_norm" else v) for k, v in rec.items()}
        out.append(rec)
    return out


def _decode(raw: bytes, path: Path) -> tuple[list | None, str | None]:
    if path.name.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            return None, f"is not a readable gzip file ({exc}); a {COMPACT_SUFFIX} record file is gzip'd JSON"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"is not valid JSON ({exc}); a record file is a JSON array of records"
    except RecursionError:
        return None, "is nested too deeply to be a record file"
    if isinstance(data, dict) and data.get("format") == FORMAT:
        try:
            return expand(data), None
        except ValueError as exc:
            return None, f"is a malformed compact record file: {exc}"
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None, f"must hold a JSON array of records, not {type(data).__name__}"
    return data, None


def read_record_file(path: str | os.PathLike) -> tuple[list | None, str | None]:
    """(records, None) or (None, problem) for one record file, compact (``.json.gz``) or plain (``.json``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"cannot be read: {exc}"
    return _decode(raw, path)


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
    atomic_write_bytes(path, text.encode("utf-8"))


def dump_compact(records: list) -> bytes:
    """The bytes of a compact record file for ``records`` (deterministic: same records, same bytes)."""
    text = json.dumps(compact(records), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers only ever see the old or the complete new content."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"   # named before it is made: always removable
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        phase("write")  # the test-only hook: an interruption with the temporary file written, not yet in place
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


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
            legacy = _legacy_path(path)
            existing: list = []
            for source in (legacy, path):  # the plain file first: the compact one is newer
                if source.exists():
                    old, problem = read_record_file(source)
                    if problem is not None:
                        n = 0
                        while (aside := source.with_name(f"{source.name}.corrupt-{n}")).exists():
                            n += 1
                        os.replace(source, aside)
                        warnings.warn(f"{source} {problem}; moved it aside to {aside.name} and wrote a fresh file",
                                      stacklevel=2)
                        continue
                    existing.extend(old)
            new_by_id = {r["id"]: r for r in new}
            merged, seen, kept = [], set(), set()
            for old in existing:
                rid = old.get("id") if isinstance(old, dict) else None
                if rid in new_by_id:
                    if rid not in seen:
                        merged.append(new_by_id[rid])
                        seen.add(rid)
                elif isinstance(rid, str) and rid in kept:
                    continue  # the same record in the plain file and the compact one (a merge cut short)
                else:
                    merged.append(old)  # kept as is, even if invalid: never drop what was there
                    if isinstance(rid, str):
                        kept.add(rid)
            merged.extend(r for rid, r in new_by_id.items() if rid not in seen)
            atomic_write_bytes(path, dump_compact(merged))
            if legacy.exists():
                # Only now: every record of the plain file is in the compact file just written.
                os.unlink(legacy)
                _fsync_dir(path.parent)
        written.append(path)
    return written


def record_files(root: str | os.PathLike) -> list[Path]:
    """The record files at ``root``: the file itself, or every ``*.json.gz`` and ``*.json`` below a directory.

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
        files.extend(Path(dirpath) / f for f in sorted(filenames)
                     if f.endswith((LEGACY_SUFFIX, COMPACT_SUFFIX)) and f[0] not in "._")
    return files


MAX_DEPTH = 32


def _too_deep(obj, limit: int = MAX_DEPTH) -> bool:
    """Whether any value of ``obj`` lies deeper than ``limit``. Level by level, without a (value, depth) pair per
    value: every record read is checked, and the pairs were a tenth of reading a record."""
    level, depth = [obj], 0
    while level:
        if depth > limit:
            return True
        below: list = []
        for o in level:
            if isinstance(o, dict):
                below.extend(o.values())
            elif isinstance(o, list):
                below.extend(o)
        level, depth = below, depth + 1
    return False


def _structural_problems(rec: dict) -> list[str]:
    """What every reader needs beyond the schema, checked again so that a validator gap cannot crash a reader."""
    problems = []
    if rec.get("kind") not in ("kernel", "accuracy", "endtoend"):
        problems.append("kind must be kernel, accuracy or endtoend")
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


def record_problems(rec) -> list[str]:
    """Every reason ``rec`` is not a valid record (empty when it is): the schema, then the structural checks. A
    validator that crashes on a hostile record is itself a finding, never a crash of the reader."""
    if not isinstance(rec, dict):
        return [f"a record must be a JSON object, got {type(rec).__name__}"]
    if _too_deep(rec):
        return [f"nested more than {MAX_DEPTH} levels deep; no normbench record is"]
    try:
        problems = [str(p) for p in validate_record(rec)]
    except Exception as exc:
        problems = [f"the validator failed on this record: {type(exc).__name__}: {exc}"]
    return problems or _structural_problems(rec)


@dataclass
class Scanned:
    """One record read from a file: valid (``record``, migrated to the current schema) or not (``problems``); or an
    unreadable file (``index`` None)."""

    path: Path
    index: int | None
    record: dict | None
    problems: list[str] = field(default_factory=list)
    raw: object = None     # the record as read

    @property
    def label(self) -> str | None:
        """The record as messages name it (index, id, norm); None for a whole file."""
        return None if self.index is None else describe(self.raw, self.index)


def scan(root, kind: str | None = None) -> Iterator[Scanned]:
    """Every record file at ``root`` (a file or a directory) in sorted path order, and in it every record in file
    order: valid ones migrated, invalid ones (and unreadable files) with every problem. The one walk over stored
    records that ``iter_records``, ``validate`` and the ranking reader (``normbench.results``) share."""
    for path in record_files(root):
        yield from scan_file(path, kind)


def twin_of(path: Path) -> Path | None:
    """The compact ``<norm>.json.gz`` beside a plain ``<norm>.json`` (whose records, if it exists, are read from it
    instead: a merge into it was cut short before the plain file went); None for a compact file."""
    if path.name.endswith(LEGACY_SUFFIX) and not path.name.endswith(COMPACT_SUFFIX):
        return path.with_name(path.name[: -len(LEGACY_SUFFIX)] + COMPACT_SUFFIX)
    return None


def scan_file(path: Path, kind: str | None = None, raw: bytes | None = None,
              twin_raw: bytes | None = None) -> Iterator[Scanned]:
    """``scan`` of one record file; ``raw`` (and ``twin_raw``, the bytes of ``twin_of(path)`` or None where it does not
    exist) when the caller has read them already (so what is judged is exactly the bytes it hashed)."""
    path = Path(path)
    if raw is None:
        records, problem = read_record_file(path)
    else:
        records, problem = _decode(raw, path)
    if problem is not None:
        yield Scanned(path, None, None, [problem])
        return
    merged_ids: set = set()
    twin = twin_of(path)
    if twin is not None:
        if raw is None and twin.exists():
            twin_recs, _ = read_record_file(twin)
        elif raw is not None and twin_raw is not None:
            twin_recs, _ = _decode(twin_raw, twin)
        else:
            twin_recs = None
        merged_ids = {r.get("id") for r in twin_recs or () if isinstance(r, dict)}
    for i, rec in enumerate(records):
        if merged_ids and isinstance(rec, dict) and rec.get("id") in merged_ids:
            continue
        if kind is not None and isinstance(rec, dict) and rec.get("kind") != kind:
            continue
        problems = record_problems(rec)
        if problems:
            yield Scanned(path, i, None, problems, raw=rec)
        else:
            yield Scanned(path, i, migrate(rec), raw=rec)


def _scan(root, kind=None) -> Iterator[tuple[Path, dict | None, Problem | None]]:
    for s in scan(root, kind):
        if s.problems:
            for p in s.problems:
                yield s.path, None, Problem(str(s.path), s.label, p)
        else:
            yield s.path, s.record, None


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


def frame(pairs) -> "pandas.DataFrame":  # noqa: F821
    """A pandas DataFrame of ``(path, record)`` pairs, one row per record (see ``flatten``)."""
    import pandas as pd

    rows = [flatten(rec, path) for path, rec in pairs]
    if not rows:
        return pd.DataFrame(columns=["id", "kind", "norm", "record_path"])
    return pd.DataFrame(rows)


def load(root: str | os.PathLike = "results", kind: str = "kernel", errors: str = "warn"):
    """The valid records of ``kind`` at ``root`` **as stored**, as a pandas DataFrame (see ``flatten``): duplicates
    of an id and records of code that has since changed included, as ``validate``, ``compare`` and ``prune`` see them.
    To rank, use ``normbench.results.load``: the records that count (one per id, stale and legacy ones flagged)."""
    return frame(iter_records(root, kind, errors=errors))


@dataclass
class MigrationReport:
    """What :func:`migrate_files` did: files rewritten, records upgraded to the current schema, records kept whole."""

    files: list = field(default_factory=list)
    upgraded: int = 0
    records: int = 0
    kept_invalid: list = field(default_factory=list)


def migrate_files(root: str | os.PathLike = "results") -> MigrationReport:
    """Rewrite every record file at ``root`` in the current schema and the compact format.

    Each record of an older schema version is migrated (``schema.migrate``: same id, ``impl_hash`` "" for unknown,
    flags derived from its data); a plain ``<norm>.json`` becomes ``<norm>.json.gz`` (merged with one already there)
    and is removed only once the compact file holding all of its records is on disk. Records that are invalid stay as
    they are, whole (``kept_invalid`` names them); unreadable files are left untouched. Nothing is dropped.
    """
    from normbench.records.schema import SCHEMA_VERSION, migrate

    report = MigrationReport()
    paths = record_files(root)
    targets: dict[Path, list[Path]] = {}
    for path in paths:
        if path.name.endswith(COMPACT_SUFFIX):
            targets.setdefault(path, []).append(path)
        else:
            target = path.with_name(path.name[: -len(LEGACY_SUFFIX)] + COMPACT_SUFFIX)
            targets.setdefault(target, []).insert(0, path)
    for target, sources in targets.items():
        with _locked(target.parent):
            merged, seen, unreadable = [], set(), False
            for source in sources:
                records, problem = read_record_file(source)
                if problem is not None:
                    report.kept_invalid.append(f"{source}: {problem} (file left as it is)")
                    unreadable = True
                    continue
                for i, rec in enumerate(records):
                    rid = rec.get("id") if isinstance(rec, dict) else None
                    if isinstance(rid, str) and rid in seen:
                        continue
                    if isinstance(rid, str):
                        seen.add(rid)
                    problems = validate_record(rec)
                    if problems:
                        report.kept_invalid.append(f"{source}: {describe(rec, i)}: {problems[0]}")
                    elif rec.get("schema_version") != SCHEMA_VERSION:
                        rec = migrate(rec)
                        report.upgraded += 1
                    merged.append(rec)
            if unreadable:
                continue
            data = dump_compact(merged)
            if not (target.exists() and target.read_bytes() == data):
                atomic_write_bytes(target, data)
            for source in sources:
                if source != target and source.exists():
                    os.unlink(source)
            _fsync_dir(target.parent)
            report.files.append(target)
            report.records += len(merged)
    return report
