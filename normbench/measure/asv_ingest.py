"""ASV glue: the ``Metrics`` suite's grid measurement, and ingesting ASV result files into normbench records.

During ``asv run`` the suite writes, next to ASV's own results (``.asv/normbench``):

* ``records/``: full normbench kernel records from the measurement core (``harness: "asv"``), with provenance
  including the GPU, driver and CUDA fields that ASV's machine file has no place for;
* ``machine/<hostname>.json``: the provenance and copy ceiling of the machine.

``normbench ingest-asv`` then reads the ASV result files (``.asv/results/<machine>/<commit>-<env>.json``): for every
parameter set of ``kernels.Kernel.time_kernel`` with a result it writes to ``results/``

* the core's record for the same parameters, with ASV's own numbers added (``metrics.asv``: median, IQR and
  repeats of ASV's timer, ASV's process peak memory, commit, machine), or,
* when the core did not measure it (``asv run -b time_kernel``), a record built from ASV's timing alone
  (``timing: "hot"`` since ASV's loop does not flush caches; bytes from the bytes model, ceiling and hardware
  from the machine side file; error and memory above inputs null).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from normbench.measure import kernel_suite

TIME_BENCH = "kernels.Kernel.time_kernel"
PEAKMEM_BENCH = "kernels.Kernel.peakmem_kernel"


def measure_grid(params: list[list[str]]) -> dict:
    """Measure every combination of ``params`` with the core; write records to the side directory.

    Returns ``{"results": {combo: metrics subset}, "skipped": {combo: reason}}`` for the ``track_`` benchmarks.
    """
    from normbench.measure.group import Unsupported, make_context, measure_group
    from normbench.measure.timers import TimerSettings
    from normbench.records.store import write_records

    combos = list(itertools.product(*params))
    cases, skipped = {}, {}
    for combo in combos:
        key = kernel_suite.combo_key(*combo)
        try:
            cases[key] = kernel_suite.case_for(*combo, harness="asv", timer="events")
        except Unsupported as exc:
            skipped[key] = str(exc)
    results = {}
    if not cases:
        return {"results": results, "skipped": skipped}
    device = next(iter(cases.values())).device
    quick = all(s.startswith("quick-") for s in params[2])
    ctx = make_context(device, TimerSettings.quick() if quick else TimerSettings(), command=["asv", "run"])
    kernel_suite.write_machine_sidecar(ctx)
    kernel_suite.write_impl_sidecar(params)
    groups: dict[tuple, list] = {}
    for key, case in cases.items():
        groups.setdefault(case.group, []).append((key, case))
    root = kernel_suite.sidecar_root() / "records"
    for members in groups.values():
        try:
            records = measure_group([c for _, c in members], ctx)
        except Unsupported as exc:
            for key, _ in members:
                skipped[key] = str(exc)
            continue
        except Exception as exc:  # one broken norm must not sink the others
            for key, _ in members:
                skipped[key] = f"failed: {type(exc).__name__}: {exc}"
            continue
        for rec in records:
            kernel_suite.stamp(rec)
        write_records(records, root)
        for (key, _), rec in zip(members, records):
            m = rec["metrics"]
            results[key] = {k: m.get(k) for k in ("gbps", "pct_of_ceiling", "pct_of_same_size_copy",
                                                  "cache_resident", "peak_mem_bytes", "saved_bytes",
                                                  "time_median_s")}
    return {"results": results, "skipped": skipped}


# --- reading ASV's files --------------------------------------------------------------------------------------------

def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def read_asv_result(path: Path) -> dict:
    """One ASV result file as ``{"commit", "machine", "env", "benchmarks": {name: [entry per param set]}}``.

    Each entry is ``{"params": tuple, "value", "q25", "q75", "repeat", "number"}`` (``value`` ``None`` if the
    parameter set was skipped or failed). Understands ASV's v2 result format (asv 0.5/0.6).
    """
    data = json.loads(path.read_text())
    columns = data.get("result_columns") or []
    out = {"commit": data.get("commit_hash"), "machine": (data.get("params") or {}).get("machine"),
           "env": data.get("env_name"), "date": data.get("date"), "benchmarks": {}}
    for name, row in (data.get("results") or {}).items():
        rec = dict(zip(columns, row)) if isinstance(row, list) else {}
        params = rec.get("params") or []
        values = rec.get("result")
        if values is None:
            continue
        combos = list(itertools.product(*params)) if params else [()]
        values = values if isinstance(values, list) else [values]

        def col(key, i):
            seq = rec.get(key)
            return _num(seq[i]) if isinstance(seq, list) and i < len(seq) else None

        entries = []
        for i, combo in enumerate(combos):
            v = values[i] if i < len(values) else None
            entries.append({
                "params": tuple(_unquote(p) for p in combo),
                "value": _num(v),
                "q25": col("stats_q_25", i),
                "q75": col("stats_q_75", i),
                "repeat": col("stats_repeat", i),
                "number": col("stats_number", i),
            })
        out["benchmarks"][name] = entries
    return out


def _unquote(p):
    # ASV stores parameter values as their repr: "'layernorm'".
    if isinstance(p, str) and len(p) >= 2 and p[0] == p[-1] and p[0] in "'\"":
        return p[1:-1]
    return p


def result_files(asv_results: Path) -> list[Path]:
    files = []
    for machine_dir in sorted(p for p in Path(asv_results).iterdir() if p.is_dir()):
        files += sorted(f for f in machine_dir.glob("*.json") if f.name != "machine.json")
    return files


def _machine_sidecar(sidecar: Path, machine: str | None) -> dict | None:
    d = sidecar / "machine"
    if not d.is_dir():
        return None
    files = sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for f in files:
        if machine and f.stem == machine:
            return json.loads(f.read_text())
    return json.loads(files[0].read_text()) if files else None


def _impl_hashes(sidecar: Path, commit: str | None, env: str | None) -> dict | None:
    """``{"norm|backend": impl_hash}`` the suite recorded for the ASV run ``<commit>-<env>``; ``None`` if none."""
    path = sidecar / "impl" / f"{commit}-{env}.json"
    try:
        return json.loads(path.read_text())["hashes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record_from_asv(entry: dict, asv: dict, machine: dict, impl_hash: str = "") -> dict:
    """A kernel record from ASV's timing alone (no core measurement of this parameter set)."""
    import torch

    from normbench.discovery import REGISTRY
    from normbench.measure import bytes_model as bm
    from normbench.measure.group import Prepared
    from normbench.measure.timers import timing_label
    from normbench.records.schema import make_record

    norm, backend, shape, dtype, pass_ = entry["params"]
    case = kernel_suite.case_for(norm, backend, shape, dtype, pass_, harness="asv")
    prov = dict(machine["provenance"])
    spec = REGISTRY.get(norm)
    # The bytes model needs the module's parameter and buffer sizes: build the eager module on the CPU.
    prep = Prepared(spec, "eager", case.shape, dtype, "cpu")
    model = prep.bytes_model()
    config = case.config(spec)
    device = "cuda" if prov["hardware"].get("gpu") else "cpu"
    # ASV's loop is host-timed and flushes nothing: "host" on a GPU, "hot" on a CPU.
    config.update(timing=timing_label(device, "host", cold=False), device=device,
                  threads=prov["hardware"].get("threads") or torch.get_num_threads(), bytes_model=model)
    t = entry["value"]
    nbytes = bm.bytes_moved(model["formula"], pass_, model["params"])
    gbps = nbytes / t / 1e9
    ceiling = machine.get("ceiling_gbps")
    pct = 100 * gbps / ceiling if ceiling and model["memory_bound"] else None
    suspect = pct is not None and pct > 100
    iqr = (entry["q75"] - entry["q25"]) if entry["q25"] is not None and entry["q75"] is not None else 0.0
    metrics = {
        "time_median_s": t, "time_iqr_s": max(0.0, iqr), "reps": int(entry["repeat"] or 1),
        "bytes_moved": nbytes, "gbps": gbps, "ceiling_gbps": ceiling, "ceiling_method": machine.get("ceiling_method"),
        "pct_of_ceiling": pct, "datasheet_peak_gbps": machine.get("datasheet_peak_gbps"),
        "peak_mem_bytes": None, "saved_bytes": None, "err": {"y": None, "dx": None, "dw": None},
        "timer": "asv", "asv": asv,
    }
    prov["command"] = "asv run (ingested by normbench ingest-asv)"
    flags = {"suspect": "above the measured copy ceiling (ASV timing is hot)"} if suspect else {}
    # ``impl_hash``: what the suite recorded while ASV ran this commit ("" = unknown: the code here may differ).
    return make_record("kernel", spec.to_dict(), config, metrics, prov, impl_hash=impl_hash, flags=flags,
                       flag_reasons=flags)


def _stamp_cached(rec: dict) -> None:
    """A record built from ASV's timing alone gets the norm's cached check verdict (``unchecked`` if none passed)."""
    from normbench.check import cached_status, stamp
    from normbench.discovery import REGISTRY
    from normbench.measure.baselines import GATE

    backend, device = rec["config"]["backend"], rec["config"].get("device") or "cpu"
    try:
        status = cached_status(REGISTRY.get(rec["norm"]["name"]), [(backend, device)], provider=GATE)
    except (KeyError, ValueError):  # the norm's plugin is not installed here: nothing vouches for it
        status = None
    ok = status is not None and status.verdict(backend, device).passed
    stamp(rec, status if ok else None, backend, forced=False)


def ingest(asv_results=".asv/results", sidecar=None, out="results") -> tuple[int, list[str]]:
    """Write normbench records for the ASV results found; returns (records written, problems)."""
    from normbench.records.store import iter_records

    asv_results = Path(asv_results)
    if not asv_results.is_dir():
        raise FileNotFoundError(f"no ASV results at {asv_results}: run `asv run` first (see docs/measurement.md)")
    sidecar = Path(sidecar) if sidecar else asv_results.parent / "normbench"
    core = {}  # (combo, impl_hash) -> the newest core record: one per implementation (asv continuous runs two)
    if (sidecar / "records").is_dir():
        for _, rec in iter_records(sidecar / "records", kind="kernel"):
            c = rec["config"]
            key = (kernel_suite.combo_key(rec["norm"]["name"], c["backend"], c.get("shape_label", ""), c["dtype"],
                                   c["pass"]), rec.get("impl_hash", ""))
            if key not in core or rec["provenance"]["timestamp"] > core[key]["provenance"]["timestamp"]:
                core[key] = rec
    problems: list[str] = []
    records: dict[str, dict] = {}
    files = result_files(asv_results)
    if not files:
        problems.append(f"no ASV result files under {asv_results}: did `asv run` get --set-commit-hash?")
    for path in files:
        try:
            res = read_asv_result(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable ASV result ({exc})")
            continue
        times = res["benchmarks"].get(TIME_BENCH, [])
        peaks = {e["params"]: e["value"] for e in res["benchmarks"].get(PEAKMEM_BENCH, [])}
        machine = _machine_sidecar(sidecar, res["machine"])
        hashes = _impl_hashes(sidecar, res["commit"], res["env"])
        if hashes is None and times:
            problems.append(f"{path}: no implementation hashes for this run in {sidecar}/impl (ASV ran a normbench "
                            "that does not record them, or on another machine): its records get impl_hash \"\" "
                            "(unknown)")
        for entry in times:
            if entry["value"] is None or len(entry["params"]) != 5:
                continue
            key = kernel_suite.combo_key(*entry["params"])
            h = (hashes or {}).get("|".join(entry["params"][:2]), "")
            asv = {"time_median_s": entry["value"],
                   "time_iqr_s": (entry["q75"] - entry["q25"]) if entry["q25"] is not None
                   and entry["q75"] is not None else None,
                   "repeat": entry["repeat"], "number": entry["number"],
                   "peakmem_rss_bytes": peaks.get(entry["params"]), "commit": res["commit"],
                   "machine": res["machine"], "env": res["env"], "result_file": str(path)}
            if (key, h) in core:  # the core measured the same code in the same run
                rec = json.loads(json.dumps(core[(key, h)]))
                rec["metrics"]["asv"] = asv
            elif machine is not None:
                try:
                    rec = _record_from_asv(entry, asv, machine, h)
                    _stamp_cached(rec)
                except Exception as exc:
                    problems.append(f"{path}: {key}: cannot build a record ({type(exc).__name__}: {exc})")
                    continue
            else:
                problems.append(f"{path}: {key}: no machine side file in {sidecar}/machine; run the Kernel "
                                "benchmarks' setup (asv run) on this machine first")
                continue
            records[rec["id"]] = rec
    return write_ingested(records, out, problems)


def write_ingested(records: dict, out, problems: list[str]) -> tuple[int, list[str]]:
    """Write the records an ingest built (by id) to ``out``: (how many, problems); none written when one is invalid."""
    from normbench.records.store import InvalidRecordError, write_records

    if not records:
        return 0, problems
    try:
        write_records(records.values(), out)
    except InvalidRecordError as exc:
        return 0, problems + [str(p) for p in exc.problems]
    return len(records), problems
