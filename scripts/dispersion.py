"""Measure the dispersion of normbench's timer against torch.utils.benchmark's blocked_autorange, same ops.

A measurement, not a test (docs/measurement.md, "Dispersion"; issue #12 item 4). For each op and trial, interleaved:
the harness (``normbench.measure.timers.cpu_time``, or ``cuda_time`` with CUDA events and the L2 flush on a GPU,
with the default TimerSettings, and with ``TimerSettings.quick()`` as ``bench --quick`` uses: per-call samples) and
``torch.utils.benchmark.Timer.blocked_autorange(min_run_time=0.5)`` (blocks of many calls, one mean per block; it
synchronizes CUDA itself). Reported per op: the within-trial relative IQR (IQR / median) of each, and the
across-trial spread of the medians (max / min over trials), with the load average. Only the across-trial spread
compares like with like (the two IQRs are of different samples: single calls against block means).

Run it on a quiet machine (it refuses when the 1-minute load is above 0.5 per core, unless ``--busy-ok``):

    python scripts/dispersion.py [--trials 7] [--device cpu|cuda] [--ops layernorm/fwd rmsnorm/fwd+bwd ...]
                                 [--shape quick-8x128x512] [--dtype float32] [--markdown] [--json out.json]

``--markdown`` prints the table docs/measurement.md holds (one row per op), to paste with the date, machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.utils.benchmark as tb

from normbench.discovery import get_norm
from normbench.measure.group import Prepared
from normbench.measure.shapes import by_label
from normbench.measure.summary import summarize
from normbench.measure.timers import TimerSettings, cpu_time, cuda_time

OPS = ("layernorm/fwd", "rmsnorm/fwd+bwd", "dyt/fwd")
TIMERS = ("harness", "quick", "autorange")


def _harness(fn, settings: TimerSettings, device: str) -> dict:
    if device.startswith("cuda"):
        samples, _ = cuda_time(fn, settings, device, cold=True)
    else:
        samples = cpu_time(fn, settings)
    s = summarize(samples)
    return {"median": s["median"], "iqr": s["iqr"], "reps": s["reps"], "min": s["min"]}


def _autorange(fn, threads: int) -> dict:
    m = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=0.5)
    return {"median": m.median, "iqr": m.iqr, "blocks": len(m.times), "per_block": m.number_per_run}


def measure(op: str, args) -> list[dict]:
    norm, _, pass_ = op.partition("/")
    prep = Prepared(get_norm(norm), "eager", by_label(args.shape), args.dtype, args.device)
    fn, pre = prep.pass_fns(pass_ or "fwd")
    if pre is not None:
        raise SystemExit(f"{op}: needs an untimed step before each call; pick another op")
    rows = []
    for trial in range(args.trials):
        load = os.getloadavg()[0]
        rows.append({"trial": trial, "load1": load,
                     "harness": _harness(fn, TimerSettings(), args.device),
                     "quick": _harness(fn, TimerSettings.quick(), args.device),
                     "autorange": _autorange(fn, args.threads)})
        time.sleep(0.2)
    return rows


def summary(rows: list[dict]) -> dict:
    """Per timer: median of the trial medians, within-trial IQR/median (median, min, max), across-trial max/min."""
    out = {"fastest_call": min(min(r["harness"]["min"], r["quick"]["min"]) for r in rows),
           "load": statistics.fmean(r["load1"] for r in rows)}
    for key in TIMERS:
        medians = [r[key]["median"] for r in rows]
        rel = [r[key]["iqr"] / r[key]["median"] for r in rows]
        out[key] = {"median": statistics.median(medians), "rel_iqr": statistics.median(rel), "rel_iqr_min": min(rel),
                    "rel_iqr_max": max(rel), "across": max(medians) / min(medians)}
    return out


def _us(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s >= 1e-2 else f"{s * 1e6:.0f} µs"


def markdown(results: dict) -> str:
    lines = ["| op | fastest call | harness median (IQR/median in a trial: median, range) | across trials max/min | "
             "`--quick` across trials | autorange median (IQR/median) | across trials max/min |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for op, s in results.items():
        h, q, a = s["harness"], s["quick"], s["autorange"]
        lines.append(
            f"| {op.replace('/', ' ')} | {_us(s['fastest_call'])} | {_us(h['median'])} ({100 * h['rel_iqr']:.0f} %, "
            f"{100 * h['rel_iqr_min']:.0f}–{100 * h['rel_iqr_max']:.0f} %) | {h['across']:.2f} | {q['across']:.2f} | "
            f"{_us(a['median'])} ({100 * a['rel_iqr']:.0f} %, {100 * a['rel_iqr_min']:.0f}–"
            f"{100 * a['rel_iqr_max']:.0f} %) | {a['across']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--ops", nargs="+", default=list(OPS), help="norm/pass, e.g. layernorm/fwd rmsnorm/fwd+bwd")
    ap.add_argument("--shape", default="quick-8x128x512")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--markdown", action="store_true", help="print the docs/measurement.md table")
    ap.add_argument("--json", default=None, help="also write the raw numbers here")
    ap.add_argument("--busy-ok", action="store_true", help="measure even when the machine is busy")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > 0.5 * cores and not args.busy_ok:
        print(f"load average {load:.1f} on {cores} cores: the machine is busy, and this measures noise. Run it on a "
              "quiet machine (or pass --busy-ok to measure anyway and say so).", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    raw = {"load_start": load, "cores": cores, "threads": args.threads, "device": args.device, "shape": args.shape,
           "dtype": args.dtype, "trials": args.trials, "ops": {}}
    results = {}
    for op in args.ops:
        rows = measure(op, args)
        raw["ops"][op] = rows
        s = results[op] = summary(rows)
        print(f"{op} ({args.shape}, {args.dtype}, {args.device}), load {s['load']:.1f}:")
        print(f"  fastest single call seen: {_us(s['fastest_call'])}")
        for key in TIMERS:
            t = s[key]
            print(f"  {key:9s} median {_us(t['median']):>10s}  within-trial IQR/median {100 * t['rel_iqr_min']:5.1f}.."
                  f"{100 * t['rel_iqr_max']:5.1f}% (median {100 * t['rel_iqr']:5.1f}%)  across trials max/min "
                  f"{t['across']:.3f}", flush=True)
    raw["load_end"] = os.getloadavg()[0]
    if args.markdown:
        print(f"\nload average {raw['load_start']:.1f} at the start, {raw['load_end']:.1f} at the end; "
              f"{args.trials} trials, {args.threads} thread(s), {args.dtype}, shape {args.shape}, eager\n")
        print(markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
