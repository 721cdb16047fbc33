"""The versioned result-record schema (kinds ``kernel`` and ``accuracy``): record ids, flags and validation.

Schema v2 adds, at the top level of a record: ``impl_hash`` (16 hex digits naming the implementation measured; ``""``
means unknown, which is what a migrated v1 record carries), ``flags`` (sorted names from :data:`FLAGS`),
``flag_reasons`` (one sentence per flag) and ``check`` (the ``normbench check`` status of that implementation, or
null); and ``provenance.node`` (the host name; not part of the id). A record with any flag is never ranked; one with an
:data:`INVALID_FLAGS` flag is kept and shown as failed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from typing import Any

SCHEMA = "normbench.record"
SCHEMA_VERSION = 2
#: Every flag a record may carry; who sets each: non_finite, suspect, noisy (the kernel core), fell_back (the compile
#: backend), unchecked, forced (the check gate), diverged, tuning (accuracy runs).
FLAGS = ("non_finite", "fell_back", "noisy", "suspect", "unchecked", "forced", "diverged", "tuning")
#: Flags that make a record invalid: it is kept and shown as failed, never ranked.
INVALID_FLAGS = ("non_finite",)
CHECK_STATUSES = ("passed", "failed", "not_run")
IMPL_HASH_RE = re.compile(r"^[0-9a-f]{16}$")
KINDS = ("kernel", "accuracy")
PASSES = ("fwd", "bwd", "fwd+bwd")
TIMINGS = ("cold", "hot", "host")
DEVICES = ("cpu", "cuda")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{6,128}$")
HARDWARE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,95}$")
#: A bandwidth more than this many times the measured copy ceiling is not a fast kernel but a broken measurement.
#: (Hot, cache-resident timings legitimately exceed the DRAM copy ceiling by a few times; they are flagged suspect.)
FAR_ABOVE_CEILING = 10.0
#: Relative tolerance when recomputing GB/s and percent of ceiling from a record's own fields.
RECOMPUTE_RTOL = 1e-3

TOP_FIELDS = ("schema", "schema_version", "kind", "id", "norm", "config", "metrics", "provenance")
TOP_FIELDS_V2 = ("impl_hash", "flags", "flag_reasons", "check")
PROVENANCE_FIELDS = ("timestamp", "normbench_version", "git_commit", "python", "torch", "triton", "platform",
                     "hardware", "hardware_id", "plugins", "command")
HARDWARE_FIELDS = ("cpu", "cores", "threads", "gpu", "gpu_memory_gb", "driver", "cuda")
NORM_FIELDS = ("name", "title", "family", "kind", "layouts")
KERNEL_CONFIG = ("backend", "layout", "shape", "num_features", "dtype", "pass", "device", "timing", "threads",
                 "shape_class")
KERNEL_METRICS = ("time_median_s", "time_iqr_s", "reps", "bytes_moved", "gbps", "ceiling_gbps", "pct_of_ceiling",
                  "datasheet_peak_gbps", "peak_mem_bytes", "saved_bytes", "err")
#: v1 kernel records carried the above-ceiling verdict as booleans; v2 carries it as the ``suspect`` flag.
KERNEL_METRICS_V1 = ("suspect", "suspect_reason")
ACCURACY_CONFIG = ("task", "task_offline", "model", "placement", "seed", "recipe", "quick", "device", "batch_size")
ACCURACY_METRICS = ("metric", "higher_is_better", "final", "best", "steps", "wall_time_s", "target",
                    "time_to_target_s", "steps_to_target", "diverged", "diverged_step", "curve")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


#: Config entries that describe how a result is derived rather than what was measured; not part of the id.
ID_IGNORED_CONFIG = ("bytes_model",)


def record_id(kind: str, norm: str, config: dict, hardware_id: str, impl_hash: str = "") -> str:
    """The stable id of a measurement: a hash of its kind, norm name, config, hardware id and implementation hash.

    Two runs of the same measurement of the same implementation on the same hardware get the same id, so a re-run
    can skip it (and a newer write of it replaces the older one); a changed implementation gets a new id, so it is
    measured again and never merged with the old results. ``impl_hash=""`` (unknown, pre-v2) hashes exactly as
    schema v1 did, so migrated v1 records keep their ids.
    """
    config = {k: v for k, v in config.items() if k not in ID_IGNORED_CONFIG}
    key = [kind, norm, config, hardware_id] + ([impl_hash] if impl_hash else [])
    digest = hashlib.sha256(_canonical(key).encode()).hexdigest()
    return f"{kind[:1]}-{digest[:20]}"


def make_record(kind: str, norm: dict, config: dict, metrics: dict, provenance: dict, *, impl_hash: str = "",
                flags=(), flag_reasons: dict | None = None, check: dict | None = None) -> dict:
    """Assemble a record (``norm`` is ``spec.to_dict()``); the id is derived from kind, norm, config, hardware and
    ``impl_hash``. ``flags`` without a reason in ``flag_reasons`` get a generic one (validation wants a reason)."""
    reasons = dict(flag_reasons or {})
    for f in flags:
        reasons.setdefault(f, f"flagged {f}")
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "id": record_id(kind, norm.get("name", ""), config, provenance.get("hardware_id", ""), impl_hash),
        "impl_hash": impl_hash,
        "norm": norm,
        "config": config,
        "metrics": metrics,
        "provenance": provenance,
        "flags": sorted(set(flags) | set(reasons)),
        "flag_reasons": {f: reasons[f] for f in sorted(reasons)},
        "check": check,
    }


def add_flag(record: dict, flag: str, reason: str) -> None:
    """Flag ``record`` (in place): ``flag`` joins ``record["flags"]`` (sorted, unique) with ``reason``.

    A second reason for a flag already set is appended to the first, so no explanation is lost.
    """
    if flag not in FLAGS:
        raise ValueError(f"unknown flag {flag!r}; flags are {', '.join(FLAGS)}")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"flag {flag!r} needs a reason saying why")
    flags = set(record.get("flags") or ())
    flags.add(flag)
    record["flags"] = sorted(flags)
    reasons = dict(record.get("flag_reasons") or {})
    old = reasons.get(flag)
    reasons[flag] = reason if not old or old == reason or reason in old else f"{old}; {reason}"
    record["flag_reasons"] = {f: reasons[f] for f in sorted(reasons)}


def record_flags(record: dict) -> list[str]:
    """The flags of ``record``: its ``flags`` field, or for a v1 record the flags its data implies (see migrate)."""
    if isinstance(record.get("flags"), list):
        return list(record["flags"])
    return list(implied_flags(record))


def is_ranked(record: dict) -> bool:
    """False when the record carries any flag: only clean records are ranked."""
    return not record_flags(record)


def is_invalid(record: dict) -> bool:
    """True when the record carries an invalid flag (:data:`INVALID_FLAGS`): shown as failed, never ranked."""
    return any(f in INVALID_FLAGS for f in record_flags(record))


def _err_nonfinite(err) -> list[str]:
    parts = []
    if isinstance(err, dict):
        for part, stats in err.items():
            if isinstance(stats, dict) and (stats.get("nonfinite") or any(
                    _is_num(v) and not math.isfinite(v) for v in stats.values())):
                parts.append(part)
    return parts


def implied_flags(record: dict) -> dict[str, str]:
    """The flags a record's own data implies, with reasons: how a v1 record's flags are derived on migration.

    Kernel: ``metrics.suspect`` -> ``suspect``; a non-finite output or gradient in ``metrics.err`` -> ``non_finite``.
    Accuracy: ``metrics.diverged`` -> ``diverged``.
    """
    out: dict[str, str] = {}
    met = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    if record.get("kind") == "kernel":
        if met.get("suspect") is True:
            out["suspect"] = met.get("suspect_reason") or "above the measured copy ceiling"
        bad = _err_nonfinite(met.get("err"))
        if bad:
            out["non_finite"] = "non-finite values in " + ", ".join(bad) + " (the output or gradient is NaN or inf)"
    elif record.get("kind") == "accuracy" and met.get("diverged") is True:
        step = met.get("diverged_step")
        out["diverged"] = "training diverged" + (f" at step {step}" if step is not None else "")
    return out


def migrate(record: dict) -> dict:
    """A schema v1 record as a v2 record (a new dict; v2 records are returned unchanged).

    The id is kept (an empty ``impl_hash`` hashes as v1 did); ``impl_hash`` is ``""`` (unknown, pre-v2), ``check`` is
    null, ``provenance.node`` null (not recorded), and the flags are those its data implies (:func:`implied_flags`);
    a kernel record's ``metrics.suspect``/``suspect_reason`` move into the ``suspect`` flag.
    """
    if not isinstance(record, dict) or record.get("schema_version") != 1:
        return record
    rec = dict(record)
    rec["schema_version"] = SCHEMA_VERSION
    rec.setdefault("impl_hash", "")
    reasons = implied_flags(rec)
    rec["flags"] = sorted(reasons)
    rec["flag_reasons"] = {f: reasons[f] for f in sorted(reasons)}
    rec.setdefault("check", None)
    if isinstance(rec.get("provenance"), dict):
        rec["provenance"] = {**rec["provenance"]}
        rec["provenance"].setdefault("node", None)
    if rec.get("kind") == "kernel" and isinstance(rec.get("metrics"), dict):
        # the v1 booleans now live in flags (suspect -> flag 'suspect' with its reason)
        rec["metrics"] = {k: v for k, v in rec["metrics"].items() if k not in KERNEL_METRICS_V1}
    return rec


# --- small typed checks; each appends a problem naming the field ---------------------------------------------------

def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(problems, d, key, where, *, minimum=None, strict_min=False, nullable=False, integer=False):
    if key not in d:
        return None  # reported once by _missing
    v = d[key]
    path = f"{where}.{key}"
    if v is None:
        if not nullable:
            problems.append(f"{path} is null; it must be a number")
        return None
    if integer and (not isinstance(v, int) or isinstance(v, bool)):
        problems.append(f"{path} must be an integer, got {v!r}")
        return None
    if not _is_num(v):
        problems.append(f"{path} must be a number, got {v!r}")
        return None
    if not math.isfinite(v):
        problems.append(f"{path} must be finite, got {v!r}")
        return None
    if minimum is not None and (v <= minimum if strict_min else v < minimum):
        rel = ">" if strict_min else ">="
        problems.append(f"{path} must be {rel} {minimum}, got {v!r}")
        return None
    return v


def _str(problems, d, key, where, *, nullable=False, choices=None, pattern=None):
    if key not in d:
        return None  # reported once by _missing
    v = d[key]
    path = f"{where}.{key}"
    if v is None:
        if not nullable:
            problems.append(f"{path} is null; it must be a string")
        return None
    if not isinstance(v, str) or (not v and not nullable):
        problems.append(f"{path} must be a non-empty string, got {v!r}")
        return None
    if choices is not None and v not in choices:
        problems.append(f"{path} must be one of {', '.join(choices)}; got {v!r}")
        return None
    if pattern is not None and not pattern.match(v):
        problems.append(f"{path} {v!r} is malformed (must match {pattern.pattern})")
        return None
    return v


def _bool(problems, d, key, where):
    if key not in d:
        return None  # reported once by _missing
    v = d[key]
    if not isinstance(v, bool):
        problems.append(f"{where}.{key} must be true or false, got {v!r}")
        return None
    return v


def _missing(problems, d, fields, where):
    for f in fields:
        if f not in d:
            problems.append(f"{where}.{f} is missing")


def _check_timestamp(problems, value, where):
    if not isinstance(value, str):
        problems.append(f"{where} must be an ISO-8601 UTC timestamp string, got {value!r}")
        return
    try:
        ts = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{where} {value!r} is not an ISO-8601 timestamp")
        return
    if ts.utcoffset() is None:
        problems.append(f"{where} {value!r} has no timezone; write UTC (suffix Z)")


def _check_norm(problems, norm):
    if not isinstance(norm, dict):
        problems.append("norm must be the norm's metadata object (spec.to_dict()), got " + type(norm).__name__)
        return
    _missing(problems, norm, NORM_FIELDS, "norm")
    _str(problems, norm, "name", "norm", pattern=NAME_RE)
    _str(problems, norm, "title", "norm")
    _str(problems, norm, "family", "norm")
    _str(problems, norm, "kind", "norm")
    layouts = norm.get("layouts")
    if "layouts" in norm and (not isinstance(layouts, list) or not layouts
                              or not all(isinstance(x, str) for x in layouts)):
        problems.append(f"norm.layouts must be a non-empty list of layout names, got {layouts!r}")


def _check_provenance(problems, prov):
    if not isinstance(prov, dict):
        problems.append("provenance must be an object (normbench.results.provenance())")
        return
    _missing(problems, prov, PROVENANCE_FIELDS, "provenance")
    if "timestamp" in prov:
        _check_timestamp(problems, prov["timestamp"], "provenance.timestamp")
    for key in ("normbench_version", "python", "torch", "platform"):
        if key in prov:
            _str(problems, prov, key, "provenance")
    for key in ("git_commit", "triton"):
        if key in prov:
            _str(problems, prov, key, "provenance", nullable=True)
    if "hardware_id" in prov:
        _str(problems, prov, "hardware_id", "provenance", pattern=HARDWARE_ID_RE)
    if "plugins" in prov and not isinstance(prov["plugins"], dict):
        problems.append("provenance.plugins must be an object {distribution: version}")
    if prov.get("node") is not None and not isinstance(prov["node"], str):
        problems.append(f"provenance.node must be the host name as a string (or null), got {prov['node']!r}")
    if "command" in prov and not isinstance(prov["command"], str):
        problems.append("provenance.command must be the command line as a string")
    hw = prov.get("hardware")
    if "hardware" not in prov:
        return
    if not isinstance(hw, dict):
        problems.append("provenance.hardware must be an object")
        return
    _missing(problems, hw, HARDWARE_FIELDS, "provenance.hardware")
    _str(problems, hw, "cpu", "provenance.hardware")
    _num(problems, hw, "cores", "provenance.hardware", minimum=1, integer=True)
    _num(problems, hw, "threads", "provenance.hardware", minimum=1, integer=True)
    _str(problems, hw, "gpu", "provenance.hardware", nullable=True)
    _num(problems, hw, "gpu_memory_gb", "provenance.hardware", minimum=0, nullable=True)
    _str(problems, hw, "driver", "provenance.hardware", nullable=True)
    _str(problems, hw, "cuda", "provenance.hardware", nullable=True)


def _check_err(problems, err):
    if not isinstance(err, dict):
        problems.append("metrics.err must be an object {'y': {...}, 'dx': {...}, 'dw': {...}}")
        return
    for part, stats in err.items():
        if stats is None:
            continue
        if not isinstance(stats, dict):
            problems.append(f"metrics.err.{part} must be an object with max_abs and max_rel, or null")
            continue
        for key in ("max_abs", "max_rel"):
            _num(problems, stats, key, f"metrics.err.{part}", minimum=0, nullable=True)


def _check_kernel(problems, cfg, met, version=SCHEMA_VERSION, flags=()):
    _missing(problems, cfg, KERNEL_CONFIG, "config")
    _str(problems, cfg, "backend", "config", pattern=NAME_RE)
    _str(problems, cfg, "layout", "config", choices=("tokens", "images"))
    shape = cfg.get("shape")
    if not isinstance(shape, list) or not shape or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           and s > 0 for s in shape):
        problems.append(f"config.shape must be a non-empty list of positive integers, got {shape!r}")
    _num(problems, cfg, "num_features", "config", minimum=1, integer=True)
    _str(problems, cfg, "dtype", "config", choices=("float32", "bfloat16", "float16", "float64"))
    _str(problems, cfg, "pass", "config", choices=PASSES)
    _str(problems, cfg, "device", "config", choices=DEVICES)
    _str(problems, cfg, "timing", "config", choices=TIMINGS)
    _num(problems, cfg, "threads", "config", minimum=1, integer=True)
    _str(problems, cfg, "shape_class", "config")

    _missing(problems, met, KERNEL_METRICS + (KERNEL_METRICS_V1 if version == 1 else ()), "metrics")
    t = _num(problems, met, "time_median_s", "metrics", minimum=0, strict_min=True)
    _num(problems, met, "time_iqr_s", "metrics", minimum=0)
    _num(problems, met, "reps", "metrics", minimum=1, integer=True)
    nbytes = _num(problems, met, "bytes_moved", "metrics", minimum=0, integer=True)
    gbps = _num(problems, met, "gbps", "metrics", minimum=0)
    ceiling = _num(problems, met, "ceiling_gbps", "metrics", minimum=0, strict_min=True, nullable=True)
    pct = _num(problems, met, "pct_of_ceiling", "metrics", minimum=0, nullable=True)
    _num(problems, met, "datasheet_peak_gbps", "metrics", minimum=0, strict_min=True, nullable=True)
    suspect = _bool(problems, met, "suspect", "metrics") if "suspect" in met else None
    if version >= 2:
        suspect = "suspect" in flags
    reason = met.get("suspect_reason")
    if reason is not None and not isinstance(reason, str):
        problems.append(f"metrics.suspect_reason must be a string or null, got {reason!r}")
    if version == 1 and suspect and not reason:
        problems.append("metrics.suspect is true but metrics.suspect_reason does not say why")
    _num(problems, met, "peak_mem_bytes", "metrics", minimum=0, integer=True, nullable=True)
    _num(problems, met, "saved_bytes", "metrics", minimum=0, integer=True, nullable=True)
    if "err" in met:
        _check_err(problems, met["err"])
    bm = cfg.get("bytes_model")
    if bm is not None and (not isinstance(bm, dict) or not isinstance(bm.get("formula"), str)):
        problems.append("config.bytes_model must be an object with the formula name and its parameters")

    # GB/s and percent of ceiling must follow from the record's own time, bytes and ceiling.
    if t and nbytes is not None and gbps is not None:
        expect = nbytes / t / 1e9
        if not math.isclose(gbps, expect, rel_tol=RECOMPUTE_RTOL, abs_tol=1e-9):
            problems.append(f"metrics.gbps {gbps:.6g} does not equal bytes_moved / time_median_s = {expect:.6g} GB/s")
    if pct is not None:
        if ceiling is None:
            problems.append("metrics.pct_of_ceiling is set but metrics.ceiling_gbps is null")
        elif gbps is not None:
            expect = 100.0 * gbps / ceiling
            if not math.isclose(pct, expect, rel_tol=RECOMPUTE_RTOL, abs_tol=1e-6):
                problems.append(f"metrics.pct_of_ceiling {pct:.6g} does not equal 100·gbps/ceiling_gbps = {expect:.6g}")
    if gbps is not None and ceiling is not None and pct is not None:
        if gbps > FAR_ABOVE_CEILING * ceiling:
            problems.append(f"metrics.gbps {gbps:.6g} is far above the measured ceiling {ceiling:.6g} GB/s "
                            f"(more than {FAR_ABOVE_CEILING:g}x): a broken measurement, not a result")
        elif gbps > ceiling and suspect is False:
            how = ("set metrics.suspect and metrics.suspect_reason" if version == 1
                   else "add the flag 'suspect' with its reason")
            problems.append(f"metrics.gbps {gbps:.6g} is above the ceiling {ceiling:.6g} GB/s but the record is not "
                            f"flagged suspect ({how})")


def _check_accuracy(problems, cfg, met):
    _missing(problems, cfg, ACCURACY_CONFIG, "config")
    for key in ("recipe_hash", "model_hash"):  # schema v2; optional so accuracy records of v1 stay valid
        if key in cfg and not isinstance(cfg[key], str):
            problems.append(f"config.{key} must be a string, got {cfg[key]!r}")
    _str(problems, cfg, "task", "config")
    _bool(problems, cfg, "task_offline", "config")
    _str(problems, cfg, "model", "config")
    _str(problems, cfg, "placement", "config", nullable=True)
    _num(problems, cfg, "seed", "config", integer=True)
    if "recipe" in cfg and not isinstance(cfg["recipe"], dict):
        problems.append("config.recipe must be an object")
    _bool(problems, cfg, "quick", "config")
    _str(problems, cfg, "device", "config")
    _num(problems, cfg, "batch_size", "config", minimum=1, integer=True)

    _missing(problems, met, ACCURACY_METRICS, "metrics")
    _str(problems, met, "metric", "metrics")
    _bool(problems, met, "higher_is_better", "metrics")
    for key in ("final", "best", "target"):
        _num(problems, met, key, "metrics", nullable=True)
    _num(problems, met, "steps", "metrics", minimum=0, integer=True)
    _num(problems, met, "wall_time_s", "metrics", minimum=0)
    _num(problems, met, "time_to_target_s", "metrics", minimum=0, nullable=True)
    _num(problems, met, "steps_to_target", "metrics", minimum=0, integer=True, nullable=True)
    diverged = _bool(problems, met, "diverged", "metrics")
    _num(problems, met, "diverged_step", "metrics", minimum=0, integer=True, nullable=True)
    if diverged is False and met.get("diverged_step") is not None:
        problems.append("metrics.diverged_step is set but metrics.diverged is false")
    curve = met.get("curve")
    if "curve" not in met:
        return
    if not isinstance(curve, list):
        problems.append("metrics.curve must be a list of [step, train_loss, eval_metric|null]")
        return
    for i, point in enumerate(curve):
        where = f"metrics.curve[{i}]"
        if not isinstance(point, list) or len(point) != 3:
            problems.append(f"{where} must be [step, train_loss, eval_metric|null], got {point!r}")
            break
        step, loss, ev = point
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            problems.append(f"{where}[0] (step) must be a non-negative integer, got {step!r}")
            break
        bad = [v for v in (loss, ev) if v is not None and (not _is_num(v) or not math.isfinite(v))]
        if bad:
            problems.append(f"{where} has a non-finite or non-numeric value {bad[0]!r}; store null for a diverged loss")
            break


def _check_v2(problems, rec) -> list[str]:
    """The v2 top-level fields; returns the record's flags (those that are well-formed)."""
    _missing(problems, rec, TOP_FIELDS_V2, "record")
    if "impl_hash" in rec:
        h = rec["impl_hash"]
        if not isinstance(h, str) or (h and not IMPL_HASH_RE.match(h)):
            problems.append(f"record.impl_hash must be 16 lowercase hex digits, or \"\" for unknown; got {h!r}")
    flags = rec.get("flags")
    good: list[str] = []
    if "flags" in rec:
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            problems.append(f"record.flags must be a list of flag names, got {flags!r}")
        else:
            unknown = [f for f in flags if f not in FLAGS]
            if unknown:
                problems.append(f"record.flags has unknown flag(s) {', '.join(unknown)}; flags are {', '.join(FLAGS)}")
            if flags != sorted(set(flags)):
                problems.append(f"record.flags must be sorted and unique, got {flags!r}")
            good = [f for f in flags if f in FLAGS]
    reasons = rec.get("flag_reasons")
    if "flag_reasons" in rec:
        if not isinstance(reasons, dict):
            problems.append(f"record.flag_reasons must be an object {{flag: reason}}, got {reasons!r}")
        else:
            for f in good:
                r = reasons.get(f)
                if not isinstance(r, str) or not r.strip():
                    problems.append(f"record.flag_reasons.{f} must say why the record is flagged {f}")
            extra = [f for f in reasons if not isinstance(flags, list) or f not in flags]
            if extra:
                problems.append(f"record.flag_reasons has reasons for flags not set: {', '.join(map(str, extra))}")
    if "check" in rec and rec["check"] is not None:
        chk = rec["check"]
        if not isinstance(chk, dict):
            problems.append(f"record.check must be an object or null, got {chk!r}")
        else:
            _missing(problems, chk, ("status", "impl_hash", "detail"), "check")
            _str(problems, chk, "status", "check", choices=CHECK_STATUSES)
            if "impl_hash" in chk and not isinstance(chk["impl_hash"], str):
                problems.append(f"check.impl_hash must be a string, got {chk['impl_hash']!r}")
            if chk.get("detail") is not None and not isinstance(chk["detail"], str):
                problems.append(f"check.detail must be a string or null, got {chk['detail']!r}")
    return good


def validate_record(rec: Any) -> list[str]:
    """Every problem with ``rec`` as a normbench record, each naming the field; an empty list means valid."""
    problems: list[str] = []
    if not isinstance(rec, dict):
        return [f"a record must be a JSON object, got {type(rec).__name__}"]
    _missing(problems, rec, TOP_FIELDS, "record")
    if "schema" in rec and rec["schema"] != SCHEMA:
        problems.append(f"record.schema must be {SCHEMA!r}, got {rec['schema']!r}")
    version = rec.get("schema_version")
    if "schema_version" in rec:
        if not isinstance(version, int) or isinstance(version, bool):
            problems.append(f"record.schema_version must be an integer, got {version!r}")
        elif version > SCHEMA_VERSION:
            problems.append(f"record.schema_version {version} is newer than this normbench understands "
                            f"({SCHEMA_VERSION}); upgrade normbench")
        elif version < 1:
            problems.append(f"record.schema_version must be >= 1, got {version}")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        version = SCHEMA_VERSION
    flags = _check_v2(problems, rec) if version >= 2 else list(implied_flags(rec))
    kind = rec.get("kind")
    if "kind" in rec and kind not in KINDS:
        problems.append(f"record.kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if "id" in rec:
        _str(problems, rec, "id", "record", pattern=ID_RE)
    if "norm" in rec:
        _check_norm(problems, rec["norm"])
    if "provenance" in rec:
        _check_provenance(problems, rec["provenance"])
    cfg, met = rec.get("config"), rec.get("metrics")
    if "config" in rec and not isinstance(cfg, dict):
        problems.append("record.config must be an object")
    if "metrics" in rec and not isinstance(met, dict):
        problems.append("record.metrics must be an object")
    if isinstance(cfg, dict) and isinstance(met, dict):
        if kind == "kernel":
            _check_kernel(problems, cfg, met, version, flags)
        elif kind == "accuracy":
            _check_accuracy(problems, cfg, met)
    return problems


def describe(rec: Any, index: int | None = None) -> str:
    """A short label for a record in messages: its index, id and norm."""
    parts = [f"record {index}" if index is not None else "record"]
    if isinstance(rec, dict):
        if isinstance(rec.get("id"), str):
            parts.append(f"id={rec['id']}")
        norm = rec.get("norm")
        if isinstance(norm, dict) and isinstance(norm.get("name"), str):
            parts.append(f"norm={norm['name']}")
    return " ".join(parts)


# --- the published JSON Schema ---------------------------------------------------------------------------------------

def _js_num(minimum=None, *, exclusive=False, nullable=False, integer=False) -> dict:
    s: dict = {"type": "integer" if integer else "number"}
    if minimum is not None:
        s["exclusiveMinimum" if exclusive else "minimum"] = minimum
    return {"anyOf": [s, {"type": "null"}]} if nullable else s


def _js_str(*, nullable=False, choices=None, pattern=None) -> dict:
    s: dict = {"type": "string", "minLength": 1}
    if choices is not None:
        s = {"enum": list(choices)}
    if pattern is not None:
        s["pattern"] = pattern.pattern
    return {"anyOf": [s, {"type": "null"}]} if nullable else s


def _js_obj(required, props: dict) -> dict:
    return {"type": "object", "required": list(required), "properties": props}


def json_schema() -> dict:
    """The record schema as JSON Schema (draft 2020-12), built from this module's field lists, vocabularies and
    patterns, for submitters' tools; ``normbench validate`` (:func:`validate_record`) checks the same fields plus what
    JSON Schema cannot say (GB/s and percent of ceiling recomputed from the record's own numbers, the ceiling rules)."""
    err_part = {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "max_abs": _js_num(0, nullable=True), "max_rel": _js_num(0, nullable=True)}}]}
    kernel = {
        "config": _js_obj(KERNEL_CONFIG, {
            "backend": _js_str(pattern=NAME_RE), "layout": _js_str(choices=("tokens", "images")),
            "shape": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}},
            "num_features": _js_num(1, integer=True),
            "dtype": _js_str(choices=("float32", "bfloat16", "float16", "float64")),
            "pass": _js_str(choices=PASSES), "device": _js_str(choices=DEVICES), "timing": _js_str(choices=TIMINGS),
            "threads": _js_num(1, integer=True), "shape_class": _js_str(),
            "bytes_model": {"anyOf": [{"type": "null"}, _js_obj(("formula",), {"formula": {"type": "string"}})]}}),
        "metrics": _js_obj(KERNEL_METRICS, {
            "time_median_s": _js_num(0, exclusive=True), "time_iqr_s": _js_num(0), "reps": _js_num(1, integer=True),
            "bytes_moved": _js_num(0, integer=True), "gbps": _js_num(0),
            "ceiling_gbps": _js_num(0, exclusive=True, nullable=True), "pct_of_ceiling": _js_num(0, nullable=True),
            "datasheet_peak_gbps": _js_num(0, exclusive=True, nullable=True),
            "peak_mem_bytes": _js_num(0, integer=True, nullable=True),
            "saved_bytes": _js_num(0, integer=True, nullable=True),
            "err": {"type": "object", "additionalProperties": err_part},
            "suspect": {"type": "boolean"}, "suspect_reason": {"type": ["string", "null"]}}),
    }
    curve_point = {"type": "array", "minItems": 3, "maxItems": 3, "prefixItems": [
        {"type": "integer", "minimum": 0}, {"type": ["number", "null"]}, {"type": ["number", "null"]}]}
    accuracy = {
        "config": _js_obj(ACCURACY_CONFIG, {
            "task": _js_str(), "task_offline": {"type": "boolean"}, "model": _js_str(),
            "placement": _js_str(nullable=True), "seed": _js_num(integer=True), "recipe": {"type": "object"},
            "quick": {"type": "boolean"}, "device": _js_str(), "batch_size": _js_num(1, integer=True),
            "recipe_hash": {"type": "string"}, "model_hash": {"type": "string"}}),
        "metrics": _js_obj(ACCURACY_METRICS, {
            "metric": _js_str(), "higher_is_better": {"type": "boolean"}, "final": _js_num(nullable=True),
            "best": _js_num(nullable=True), "target": _js_num(nullable=True), "steps": _js_num(0, integer=True),
            "wall_time_s": _js_num(0), "time_to_target_s": _js_num(0, nullable=True),
            "steps_to_target": _js_num(0, integer=True, nullable=True), "diverged": {"type": "boolean"},
            "diverged_step": _js_num(0, integer=True, nullable=True),
            "curve": {"type": "array", "items": curve_point}}),
    }
    hardware = _js_obj(HARDWARE_FIELDS, {
        "cpu": _js_str(), "cores": _js_num(1, integer=True), "threads": _js_num(1, integer=True),
        "gpu": _js_str(nullable=True), "gpu_memory_gb": _js_num(0, nullable=True), "driver": _js_str(nullable=True),
        "cuda": _js_str(nullable=True)})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "normbench-record.schema.json",
        "title": f"{SCHEMA} v{SCHEMA_VERSION}",
        "description": "One normbench result record (kind kernel or accuracy). Generated from "
                       "normbench/results/schema.py; `normbench validate FILE` checks the same fields plus the rules "
                       "JSON Schema cannot express (metrics.gbps = bytes_moved / time_median_s / 1e9, "
                       "pct_of_ceiling = 100 * gbps / ceiling_gbps, a result above the ceiling must carry the "
                       "'suspect' flag, a reason for every flag).",
        "type": "object",
        "required": list(TOP_FIELDS),
        "properties": {
            "schema": {"const": SCHEMA},
            "schema_version": {"type": "integer", "minimum": 1, "maximum": SCHEMA_VERSION},
            "kind": {"enum": list(KINDS)},
            "id": _js_str(pattern=ID_RE),
            "impl_hash": {"type": "string", "pattern": r"^([0-9a-f]{16})?$"},
            "flags": {"type": "array", "items": {"enum": list(FLAGS)}, "uniqueItems": True},
            "flag_reasons": {"type": "object", "propertyNames": {"enum": list(FLAGS)},
                             "additionalProperties": {"type": "string", "minLength": 1}},
            "check": {"anyOf": [{"type": "null"}, _js_obj(("status", "impl_hash", "detail"), {
                "status": {"enum": list(CHECK_STATUSES)}, "impl_hash": {"type": "string"},
                "detail": {"type": ["string", "null"]}})]},
            "norm": _js_obj(NORM_FIELDS, {
                "name": _js_str(pattern=NAME_RE), "title": _js_str(), "family": _js_str(), "kind": _js_str(),
                "layouts": {"type": "array", "minItems": 1, "items": {"type": "string"}}}),
            "config": {"type": "object"},
            "metrics": {"type": "object"},
            "provenance": _js_obj(PROVENANCE_FIELDS, {
                "timestamp": {"type": "string", "format": "date-time"},
                **{k: _js_str() for k in ("normbench_version", "python", "torch", "platform")},
                "git_commit": _js_str(nullable=True), "triton": _js_str(nullable=True),
                "hardware_id": _js_str(pattern=HARDWARE_ID_RE), "plugins": {"type": "object"},
                "node": {"type": ["string", "null"]}, "command": {"type": "string"}, "hardware": hardware}),
        },
        "allOf": [
            # Schema v2 adds the implementation hash, the flags with their reasons and the check status.
            {"if": {"properties": {"schema_version": {"minimum": 2}}}, "then": {"required": list(TOP_FIELDS_V2)}},
            {"if": {"properties": {"kind": {"const": "kernel"}}}, "then": {"properties": kernel}},
            {"if": {"properties": {"kind": {"const": "accuracy"}}}, "then": {"properties": accuracy}},
        ],
    }
