"""Measure the dispersion of normbench's CPU timer against torch.utils.benchmark's blocked_autorange, same ops.

A measurement, not a test (docs/measurement.md, "Dispersion"). For each op and trial, interleaved: the harness
(``normbench.measure.timers.cpu_time`` with the default TimerSettings, and with ``TimerSettings.quick()`` as
``bench --quick`` uses: per-call perf_counter samples) and
``torch.utils.benchmark.Timer.blocked_autorange(min_run_time=0.5)`` (blocks of many calls, one mean per block).
Reported per op: the within-trial relative IQR (IQR / median) of each, and the across-trial spread of the medians
(max / min over trials), with the load average at the start. Usage: python scripts/dispersion.py [--trials 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.utils.benchmark as tb

from normbench.measure.core import Case, Prepared
from normbench.measure.shapes import by_label
from normbench.measure.stats import summarize
from normbench.measure.timers import TimerSettings, cpu_time
from normbench.registry import get_norm

OPS = [("layernorm", "fwd"), ("rmsnorm", "fwd+bwd"), ("dyt", "fwd")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--shape", default="quick-8x128x512")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the raw numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = by_label(args.shape)
    out = {"load_start": os.getloadavg()[0], "cores": os.cpu_count(), "threads": args.threads, "ops": {}}
    for norm, pass_ in OPS:
        case = Case(norm, "eager", shape, "float32", pass_, "cpu", "hot", args.threads)
        prep = Prepared(get_norm(norm), "eager", shape, "float32", "cpu")
        fn, pre = prep.pass_fns(pass_)
        assert pre is None
        rows = []
        for trial in range(args.trials):
            load = os.getloadavg()[0]
            h = summarize(cpu_time(fn, TimerSettings()))
            q = summarize(cpu_time(fn, TimerSettings.quick()))
            m = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=args.threads).blocked_autorange(min_run_time=0.5)
            rows.append({"trial": trial, "load1": load,
                         "harness": {"median": h["median"], "iqr": h["iqr"], "reps": h["reps"], "min": h["min"]},
                         "quick": {"median": q["median"], "iqr": q["iqr"], "reps": q["reps"], "min": q["min"]},
                         "autorange": {"median": m.median, "iqr": m.iqr, "blocks": len(m.times),
                                       "per_block": m.number_per_run}})
            time.sleep(0.2)
        out["ops"][f"{norm}/{pass_}"] = rows
        hm = [r["harness"]["median"] for r in rows]
        qm = [r["quick"]["median"] for r in rows]
        am = [r["autorange"]["median"] for r in rows]
        fastest = min(min(r["harness"]["min"], r["quick"]["min"]) for r in rows)
        print(f"{norm}/{pass_} ({case.describe()}), load {statistics.fmean(r['load1'] for r in rows):.1f}:")
        print(f"  fastest single call seen: {fastest * 1e6:.1f} µs")
        for name, ms, key in (("harness  ", hm, "harness"), ("quick    ", qm, "quick"), ("autorange", am, "autorange")):
            rel = [r[key]["iqr"] / r[key]["median"] for r in rows]
            print(f"  {name} median {statistics.median(ms) * 1e6:9.1f} µs  within-trial IQR/median "
                  f"{100 * min(rel):5.1f}..{100 * max(rel):5.1f}% (median {100 * statistics.median(rel):5.1f}%)  "
                  f"across trials max/min {max(ms) / min(ms):.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
