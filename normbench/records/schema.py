"""The versioned result-record schema (kinds ``kernel``, ``accuracy``, ``endtoend``): record ids, flags, validation.

Schema v2 adds, at the top level of a record: ``impl_hash`` (16 hex digits naming the implementation measured; ``""``
means unknown, which is what a migrated v1 record carries), ``flags`` (sorted names from :data:`FLAGS`),
``flag_reasons`` (one sentence per flag) and ``check`` (the ``normbench check`` status of that implementation, or
null); and ``provenance.node`` (the host name; not part of the id). A record with any flag is never ranked; one with an
:data:`INVALID_FLAGS` flag is kept and shown as failed.

A record's structure (fields, types, ranges, vocabularies, patterns) is defined once, by :func:`json_schema`, which the
site publishes for submitters; :func:`validate_record` checks a record against it (jsonschema-rs where installed,
jsonschema for every problem and where it is not: the same verdicts, see ``structure_problems``) and then checks, in
code, only what JSON Schema cannot express (the GB/s arithmetic, the ceiling rules, the flags' order and reasons).
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import re
from typing import Any

from normbench.records.residency import RESIDENCIES

SCHEMA = "normbench.record"
SCHEMA_VERSION = 2
#: Every flag a record may carry; who sets each: non_finite, suspect, noisy, host_bound (the kernel core: host_bound
#: when a GPU timing could not keep the GPU's queue ahead of the host, so its events may hold the host's launch time:
#: ``normbench.measure.timers.host_bound_reason``), fell_back (the compile backend), unchecked, forced (the check
#: gate), diverged, tuning (accuracy runs); rehearsal (the kernel core, ``normbench.measure.group.build_record``, on
#: every record measured on the simulated GPU that ``NORMBENCH_REHEARSE=<scenario>`` swaps in: ``normbench.device``;
#: its reason names the scenario); low_clock (the kernel core: a GPU timing whose clock did not ramp to 95 % of the
#: device's maximum SM clock in its warm-up, or with a timed batch below 90 % of it: ``measure.clock.ClockWatch``);
#: host_sync (the kernel core: the timed call synchronises with the device, caught by ``measure.syncs``); stale and
#: legacy (never written: the one reader that ranks,
#: ``normbench.results.records_that_count``, marks a record whose code has since changed and a record without a check
#: verdict, a migrated schema-v1 one, when it reads them; the file is not changed).
FLAGS = ("non_finite", "fell_back", "noisy", "host_bound", "suspect", "unchecked", "forced", "diverged", "tuning",
         "rehearsal", "low_clock", "host_sync", "stale", "legacy")
#: Flags that make a record invalid: it is kept and shown as failed, never ranked.
INVALID_FLAGS = ("non_finite",)
CHECK_STATUSES = ("passed", "failed", "not_run")
IMPL_HASH_RE = re.compile(r"^[0-9a-f]{16}$")
KINDS = ("kernel", "accuracy", "endtoend")
PASSES = ("fwd", "bwd", "fwd+bwd")
TIMINGS = ("cold", "hot", "host")
DEVICES = ("cpu", "cuda")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{6,128}$")
HARDWARE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,95}$")
#: A bandwidth more than this many times the measured copy ceiling is not a fast kernel but a broken measurement.
#: (Hot, cache-resident timings legitimately exceed the DRAM copy ceiling by a few times; they are flagged suspect.)
FAR_ABOVE_CEILING = 10.0
#: Where a case's data lives (``metrics.cache_resident``) when it fits a cache.
CACHE_LEVELS = ("L2", "LLC")


def above_reference(gbps: float, ceiling_gbps: float, copy_same_size_gbps: float | None = None,
                    cache_resident: str | None = None) -> tuple[str, float] | None:
    """The reference a kernel record's bandwidth exceeds, ``(name, GB/s)``, or None: the ``suspect`` rule.

    A cache-resident case (``L2``/``LLC``) with a same-size copy timed in the same run and timing mode is judged
    against that copy (its data lives where the copy's does; the DRAM ceiling says nothing about it:
    docs/measurement.md, "Cache-resident cases"); every other case against the DRAM copy ceiling."""
    if cache_resident in CACHE_LEVELS and copy_same_size_gbps:
        return ("same-size copy", copy_same_size_gbps) if gbps > copy_same_size_gbps else None
    return ("copy ceiling", ceiling_gbps) if gbps > ceiling_gbps else None


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
#: An end-to-end record (kind ``endtoend``, since issue #37; ``normbench.measure.endtoend``): a model's whole step
#: with its own norm modules against the same model with ``best``'s policy applied, timed in paired rounds.
ENDTOEND_CONFIG = ("model", "built", "regime", "batch", "tokens", "context", "pass", "dtype", "device", "threads",
                   "policy")
ENDTOEND_METRICS = ("time_original_s", "time_policy_s", "paired", "norm_share_original", "norm_share_policy",
                    "rounds", "same_outputs")
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


def bound_by(record: dict) -> str | None:
    """What bounds a GPU kernel record's call: ``"host"`` when the host's median time in one call (``metrics.host_s``,
    measured without a synchronisation) exceeds the GPU's median time (``time_median_s``), so calls issued one after
    another (a decode step without CUDA graphs) run at the host's pace; ``"gpu"`` otherwise; None without ``host_s``."""
    met = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    host, gpu = met.get("host_s"), met.get("time_median_s")
    if not _is_num(host) or not _is_num(gpu) or host <= 0 or gpu <= 0:
        return None
    return "host" if host > gpu else "gpu"


def is_invalid(record: dict) -> bool:
    """True when the record carries an invalid flag (:data:`INVALID_FLAGS`): shown as failed, never ranked."""
    return any(f in INVALID_FLAGS for f in record_flags(record))


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


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



# --- the record's structure, defined once as JSON Schema --------------------------------------------------------------

def _type(name: str, nullable: bool) -> str | list[str]:
    return [name, "null"] if nullable else name


def _js_num(minimum=None, *, exclusive=False, nullable=False, integer=False) -> dict:
    s: dict = {"type": _type("integer" if integer else "number", nullable)}
    if minimum is not None:
        s["exclusiveMinimum" if exclusive else "minimum"] = minimum
    return s


def _js_str(*, nullable=False, choices=None, pattern=None) -> dict:
    if choices is not None:
        return {"enum": list(choices) + ([None] if nullable else [])}
    s: dict = {"type": _type("string", nullable), "minLength": 1}
    if pattern is not None:
        s["pattern"] = pattern.pattern
    return s


def _js_obj(required, props: dict, *, nullable=False) -> dict:
    return {"type": _type("object", nullable), "required": list(required), "properties": props}


def _when(condition: dict, then: dict) -> dict:
    """``then`` applies to records whose fields hold the values in ``condition`` ({field: subschema})."""
    return {"if": {"properties": condition, "required": list(condition)}, "then": then}


def json_schema() -> dict:
    """The record schema as JSON Schema (draft 2020-12): the one definition of a record's structure (its fields, their
    types, ranges, vocabularies and patterns, the v1 and v2 differences). The site publishes it for submitters' tools;
    :func:`validate_record` checks records against it and then checks only what JSON Schema cannot express."""
    err_part = {"type": ["object", "null"], "properties": {
        "max_abs": _js_num(0, nullable=True), "max_rel": _js_num(0, nullable=True)}}
    kernel = {
        "config": _js_obj(KERNEL_CONFIG, {
            "backend": _js_str(pattern=NAME_RE), "layout": _js_str(choices=("tokens", "images")),
            "shape": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 1}},
            "num_features": _js_num(1, integer=True),
            "dtype": _js_str(choices=("float32", "bfloat16", "float16", "float64")),
            "pass": _js_str(choices=PASSES), "device": _js_str(choices=DEVICES), "timing": _js_str(choices=TIMINGS),
            "threads": _js_num(1, integer=True), "shape_class": _js_str(),
            "bytes_model": _js_obj(("formula",), {"formula": {"type": "string"}}, nullable=True)}),
        "metrics": _js_obj(KERNEL_METRICS, {
            "time_median_s": _js_num(0, exclusive=True), "time_iqr_s": _js_num(0), "reps": _js_num(1, integer=True),
            "bytes_moved": _js_num(0, integer=True), "gbps": _js_num(0),
            "ceiling_gbps": _js_num(0, exclusive=True, nullable=True), "pct_of_ceiling": _js_num(0, nullable=True),
            "datasheet_peak_gbps": _js_num(0, exclusive=True, nullable=True),
            "peak_mem_bytes": _js_num(0, integer=True, nullable=True),
            "saved_bytes": _js_num(0, integer=True, nullable=True),
            "err": {"type": "object", "additionalProperties": err_part},
            "suspect": {"type": "boolean"}, "suspect_reason": {"type": ["string", "null"]},
            # Issue #28 (optional: older records lack them): the same-size copy reference and cache residency.
            "copy_same_size_gbps": _js_num(0, exclusive=True, nullable=True),
            "pct_of_same_size_copy": _js_num(0, nullable=True),
            "copy_same_size": _js_obj(("bytes_moved", "time_median_s", "reps", "method"), {
                "bytes_moved": _js_num(0, integer=True), "time_median_s": _js_num(0, exclusive=True),
                "time_iqr_s": _js_num(0), "reps": _js_num(1, integer=True), "method": _js_str()}, nullable=True),
            "working_set_bytes": _js_num(0, integer=True, nullable=True),
            "cache_bytes": _js_obj((), {"l2_bytes": _js_num(1, integer=True, nullable=True),
                                        "llc_bytes": _js_num(1, integer=True, nullable=True),
                                        "source": {"type": "string"}}, nullable=True),
            "cache_resident": _js_str(choices=RESIDENCIES, nullable=True),
            # Issue #35 (optional: older records and CPU records lack them): the host's median seconds in one call,
            # measured without a synchronisation (GPU records), and the keep-ahead check of the GPU timing.
            "host_s": _js_num(0, exclusive=True, nullable=True),
            "keep_ahead": _js_obj(("batches", "retries", "failed"), {
                "batches": _js_num(0, integer=True), "retries": _js_num(0, integer=True),
                "failed": _js_num(0, integer=True), "spin_clock_hz": _js_num(0, exclusive=True, nullable=True),
                "spin_s": _js_num(0)}, nullable=True)}),
    }
    curve_value = {"type": ["number", "null"], "description": "null where training diverged"}
    curve_point = {"type": "array", "minItems": 3, "maxItems": 3, "description": "[step, train_loss, eval_metric]",
                   "prefixItems": [{"type": "integer", "minimum": 0}, curve_value, curve_value]}
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
    share = _js_num(0, nullable=True)
    endtoend = {
        "config": _js_obj(ENDTOEND_CONFIG, {
            "model": _js_str(), "built": {"type": "object", "description": "the model actually built and run"},
            "regime": _js_str(), "batch": _js_num(1, integer=True), "tokens": _js_num(1, integer=True),
            "context": _js_num(0, integer=True), "pass": _js_str(choices=PASSES), "dtype": _js_str(),
            "device": _js_str(), "threads": _js_num(1, integer=True),
            "policy": {"type": "object", "description": "where the policy came from: best's command, its record "
                                                        "ids (evidence) and the choices it made here"}}),
        "metrics": _js_obj(ENDTOEND_METRICS, {
            "time_original_s": _js_num(0, exclusive=True), "time_policy_s": _js_num(0, exclusive=True),
            "paired": _js_obj(("ratio", "ci", "n", "verdict"), {
                "ratio": _js_num(0, exclusive=True), "ci": {"type": "array", "minItems": 2, "maxItems": 2,
                                                            "items": _js_num(0)},
                "n": _js_num(1, integer=True), "verdict": _js_str(choices=("faster", "slower", "tie", "undecided"))}),
            "norm_share_original": share, "norm_share_policy": share,
            "norm_time_original_s": share, "norm_time_policy_s": share,
            "rounds": _js_num(1, integer=True), "same_outputs": {"type": "object"}}),
    }
    hardware = _js_obj(HARDWARE_FIELDS, {
        "cpu": _js_str(), "cores": _js_num(1, integer=True), "threads": _js_num(1, integer=True),
        "gpu": _js_str(nullable=True), "gpu_memory_gb": _js_num(0, nullable=True), "driver": _js_str(nullable=True),
        "cuda": _js_str(nullable=True)})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "normbench-record.schema.json",
        "title": f"{SCHEMA} v{SCHEMA_VERSION}",
        "description": "One normbench result record (kind kernel, accuracy or endtoend). Generated from "
                       "normbench/records/schema.py; `normbench validate FILE` checks this schema, with numbers "
                       "finite and integers written without a fraction, and then the rules JSON Schema cannot "
                       "express: metrics.gbps = bytes_moved / time_median_s / 1e9, pct_of_ceiling = 100 * gbps / "
                       "ceiling_gbps (and null while ceiling_gbps is), pct_of_same_size_copy = 100 * gbps / "
                       "copy_same_size_gbps, a result above the ceiling (unless cache-resident, L2 or LLC, "
                       "and within its same-size copy) must carry the "
                       "'suspect' flag and one more than 10x above the ceiling is rejected, flags are sorted with a "
                       "reason for each flag set and none for a flag not set, the timestamp has a timezone, and "
                       "diverged_step is null unless diverged.",
        "type": "object",
        "required": list(TOP_FIELDS),
        "properties": {
            "schema": {"const": SCHEMA},
            "schema_version": {"type": "integer", "minimum": 1, "maximum": SCHEMA_VERSION},
            "kind": {"enum": list(KINDS)},
            "id": _js_str(pattern=ID_RE),
            "impl_hash": {"type": "string", "pattern": r"^([0-9a-f]{16})?$",
                          "description": "16 lowercase hex digits naming the implementation, or \"\" for unknown"},
            "flags": {"type": "array", "items": {"enum": list(FLAGS)}, "uniqueItems": True},
            "flag_reasons": {"type": "object", "propertyNames": {"enum": list(FLAGS)},
                             "additionalProperties": {"type": "string", "pattern": r"\S",
                                                      "description": "a sentence saying why the record is flagged"}},
            "check": _js_obj(("status", "impl_hash", "detail"), {
                "status": {"enum": list(CHECK_STATUSES)}, "impl_hash": {"type": "string"},
                "detail": {"type": ["string", "null"]}}, nullable=True),
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
                "node": {"type": ["string", "null"], "description": "the host name"},
                "command": {"type": "string"}, "hardware": hardware}),
        },
        "allOf": [
            # Schema v2 adds the implementation hash, the flags with their reasons and the check status.
            {"if": {"properties": {"schema_version": {"minimum": 2}}}, "then": {"required": list(TOP_FIELDS_V2)}},
            _when({"kind": {"const": "kernel"}}, {"properties": kernel}),
            _when({"kind": {"const": "accuracy"}}, {"properties": accuracy}),
            _when({"kind": {"const": "endtoend"}}, {"properties": endtoend}),
            # v1 kernel records carried the above-ceiling verdict as booleans in metrics.
            _when({"schema_version": {"const": 1}, "kind": {"const": "kernel"}},
                  {"properties": {"metrics": {"required": list(KERNEL_METRICS_V1)}}}),
        ],
    }


# --- validation: the schema, then the rules it cannot express ---------------------------------------------------------

@functools.cache
def _validator():
    """A draft 2020-12 validator of :func:`json_schema`, built once. Its types follow JSON as Python loads it: a number
    is finite (``json`` reads NaN and Infinity, which JSON has not) and an integer is an ``int`` (``1.0`` is not).
    This is the reference: every problem a record is told about comes from it."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    types = base.TYPE_CHECKER.redefine_many({
        "number": lambda _, v: _is_num(v) and math.isfinite(v),
        "integer": lambda _, v: isinstance(v, int) and not isinstance(v, bool),
    })
    return jsonschema.validators.extend(base, type_checker=types)(json_schema())


# The fast path (``normbench.records.fastpath``): the same schema compiled by jsonschema-rs; it only ever answers
# "valid", and a record it does not call valid goes to the reference above, which finds every problem.
# ``NORMBENCH_VALIDATOR``: ``auto`` (default: the fast path where jsonschema-rs is installed), ``jsonschema`` (the
# reference only), ``both`` (both on every record, raising where the fast path accepts what the reference rejects: the
# test suite runs so).

_FAST: dict[int, Any] = {}


def _fast_validator():
    """The jsonschema-rs validator (``normbench.records.fastpath``) of the schema the reference validator holds
    (rebuilt with it), or None where jsonschema-rs is not installed."""
    from normbench.records import fastpath

    ref = _validator()
    key = id(ref)
    if key not in _FAST:
        _FAST.clear()
        _FAST[key] = (ref, fastpath.compile_schema(ref.schema))
    return _FAST[key][1]


def _mode() -> str:
    import os

    return os.environ.get("NORMBENCH_VALIDATOR", "auto")


def _fast_valid(rec) -> bool:
    """True only where the fast path is sure the record's structure is valid (the reference would agree)."""
    from normbench.records.fastpath import plain

    fast = _fast_validator()
    if fast is None or not plain(rec):
        return False
    try:
        return fast.is_valid(rec)
    except Exception:   # anything it cannot take goes to the reference
        return False


def structure_problems(rec: Any) -> list[str]:
    """Every problem :func:`json_schema` finds with ``rec``, each naming the field, in field order."""
    mode = _mode()
    if mode != "jsonschema" and mode != "both" and _fast_valid(rec):
        return []
    found = {(_path_order(e.absolute_path), p) for e in _validator().iter_errors(rec) for p in _schema_problems(e)}
    problems = [p for _, p in sorted(found)]
    if mode == "both" and _fast_validator() is not None and _fast_valid(rec) and problems:
        raise AssertionError(f"jsonschema-rs accepts a record that jsonschema rejects: {problems}")
    return problems


_TYPE_NAMES = {"number": "a number", "integer": "an integer", "string": "a string", "boolean": "true or false",
               "object": "an object", "array": "a list", "null": "null"}
#: What a JSON Schema keyword of :func:`json_schema` requires, in words (``w``: the keyword's value).
_RULES = {
    "type": lambda w: "must be " + " or ".join(_TYPE_NAMES[t] for t in ([w] if isinstance(w, str) else w)),
    "const": lambda w: f"must be {w!r}",
    "enum": lambda w: "must be one of " + ", ".join("null" if x is None else str(x) for x in w),
    "minimum": lambda w: f"must be >= {w}",
    "exclusiveMinimum": lambda w: f"must be > {w}",
    "maximum": lambda w: f"must be <= {w}",
    "minLength": lambda w: "must be a non-empty string" if w == 1 else f"must be at least {w} characters long",
    "minItems": lambda w: "must be a non-empty list" if w == 1 else f"must have at least {w} items",
    "maxItems": lambda w: f"must have at most {w} items",
    "uniqueItems": lambda w: "must not repeat an item",
}


#: The record's sections: a field inside one is named from the section (``config.dtype``), any other from the record.
_SECTIONS = ("norm", "config", "metrics", "provenance", "check")


def _field(path) -> str:
    """A field as problems name it: ``config.dtype``, ``metrics.curve[3]``, ``record.flags``, ``record``."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return text[1:] if len(path) > 1 and path[0] in _SECTIONS else "record" + text


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _schema_problems(error) -> list[str]:
    """What a jsonschema ``ValidationError`` of :func:`json_schema` says, as problems naming the field: one per missing
    field, else the field, what it must be and what it is (``config.dtype must be one of float32, ...; got 'float8'``).
    """
    path, want, got = list(error.absolute_path), error.validator_value, error.instance
    if error.validator == "required":
        return [f"{_field(path + [key])} is missing" for key in want if key not in got]
    where = _field(path)
    hint = f" ({error.schema['description']})" if path and "description" in error.schema else ""
    if error.validator == "pattern":
        return [f"{where} {_shown(got)} is malformed{hint or f' (must match {want})'}"]
    if error.validator == "type" and _is_num(got) and not math.isfinite(got):
        rule = "must be finite"
    elif error.validator in _RULES:
        rule = _RULES[error.validator](want)
    else:
        return [f"{where}: {error.message}"]
    if "propertyNames" in error.absolute_schema_path:  # the value is one of the object's keys
        return [f"{where} key {_shown(got)} {rule}"]
    return [f"{where} {rule}{hint}; got {_shown(got)}"]


def _path_order(path) -> tuple:
    return tuple(f"{p:012d}" if isinstance(p, int) else p for p in path)


def _timestamp_problems(value: str) -> list[str]:
    try:
        ts = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return [f"provenance.timestamp {value!r} is not an ISO-8601 timestamp"]
    if ts.utcoffset() is None:
        return [f"provenance.timestamp {value!r} has no timezone; write UTC (suffix Z)"]
    return []


def _flag_problems(flags: list[str], reasons: dict[str, str]) -> list[str]:
    problems = []
    if flags != sorted(flags):
        problems.append(f"record.flags must be sorted; got {flags!r}")
    problems += [f"record.flag_reasons.{f} must say why the record is flagged {f}" for f in flags if f not in reasons]
    unset = [f for f in reasons if f not in flags]
    if unset:
        problems.append(f"record.flag_reasons has reasons for flags not set: {', '.join(unset)}")
    return problems


def _kernel_problems(met: dict, suspect: bool, v1: bool) -> list[str]:
    """GB/s and percent of ceiling recomputed from the record's own numbers, and the ceiling rules."""
    problems = []
    gbps, ceiling, pct = met["gbps"], met["ceiling_gbps"], met["pct_of_ceiling"]
    expect = met["bytes_moved"] / met["time_median_s"] / 1e9
    if not math.isclose(gbps, expect, rel_tol=RECOMPUTE_RTOL, abs_tol=1e-9):
        problems.append(f"metrics.gbps {gbps:.6g} does not equal bytes_moved / time_median_s = {expect:.6g} GB/s")
    if v1 and suspect and not met["suspect_reason"]:
        problems.append("metrics.suspect is true but metrics.suspect_reason does not say why")
    copy_gbps, copy_pct = met.get("copy_same_size_gbps"), met.get("pct_of_same_size_copy")
    if copy_pct is not None:
        if copy_gbps is None:
            problems.append("metrics.pct_of_same_size_copy is set but metrics.copy_same_size_gbps is null")
        elif not math.isclose(copy_pct, 100.0 * gbps / copy_gbps, rel_tol=RECOMPUTE_RTOL, abs_tol=1e-6):
            problems.append(f"metrics.pct_of_same_size_copy {copy_pct:.6g} does not equal "
                            f"100·gbps/copy_same_size_gbps = {100.0 * gbps / copy_gbps:.6g}")
    if pct is None:
        return problems
    if ceiling is None:
        return problems + ["metrics.pct_of_ceiling is set but metrics.ceiling_gbps is null"]
    expect = 100.0 * gbps / ceiling
    if not math.isclose(pct, expect, rel_tol=RECOMPUTE_RTOL, abs_tol=1e-6):
        problems.append(f"metrics.pct_of_ceiling {pct:.6g} does not equal 100·gbps/ceiling_gbps = {expect:.6g}")
    if gbps > FAR_ABOVE_CEILING * ceiling:
        problems.append(f"metrics.gbps {gbps:.6g} is far above the measured ceiling {ceiling:.6g} GB/s "
                        f"(more than {FAR_ABOVE_CEILING:g}x): a broken measurement, not a result")
    elif not suspect and gbps > ceiling:
        # Required above the DRAM ceiling unless the case is cache-resident and within its same-size copy. Below the
        # DRAM ceiling the flag is never required: records made before the same-size rule (2026-11-26) stay valid;
        # the measuring code also flags a cache-resident case above its copy there (above_reference).
        above = above_reference(gbps, ceiling, copy_gbps, met.get("cache_resident"))
        if above:
            how = "set metrics.suspect and metrics.suspect_reason" if v1 else "add the flag 'suspect' with its reason"
            what = ("the ceiling" if above[0] == "copy ceiling"
                    else f"the same-size copy (cache-resident: {met.get('cache_resident')})")
            problems.append(f"metrics.gbps {gbps:.6g} is above {what} {above[1]:.6g} GB/s but the record is not "
                            f"flagged suspect ({how})")
    return problems


def _rule_problems(rec: dict) -> list[str]:
    """What JSON Schema cannot express, checked on a record whose structure is valid: the timestamp's timezone, the
    flags' order and reasons, the kernel arithmetic and ceiling rules, and ``diverged_step`` only when diverged."""
    problems = _timestamp_problems(rec["provenance"]["timestamp"])
    v1 = rec["schema_version"] == 1
    if not v1:
        problems += _flag_problems(rec["flags"], rec["flag_reasons"])
    met = rec["metrics"]
    if rec["kind"] == "kernel":
        problems += _kernel_problems(met, met["suspect"] if v1 else "suspect" in rec["flags"], v1)
    elif rec["kind"] == "accuracy" and not met["diverged"] and met["diverged_step"] is not None:
        problems.append("metrics.diverged_step is set but metrics.diverged is false")
    return problems


def validate_record(rec: Any) -> list[str]:
    """Every problem with ``rec`` as a normbench record, each naming the field; an empty list means valid.

    The structure is checked against :func:`json_schema` (every problem, in field order); a record whose structure is
    valid is then checked by the rules JSON Schema cannot express. A record of a newer schema version gets one
    problem, to upgrade normbench: its structure is not this version's to judge.
    """
    version = rec.get("schema_version") if isinstance(rec, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return [f"record.schema_version {version} is newer than this normbench understands ({SCHEMA_VERSION}); "
                "upgrade normbench"]
    problems = structure_problems(rec)
    if problems:
        return problems
    return _rule_problems(rec)
