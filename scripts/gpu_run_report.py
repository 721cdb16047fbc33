"""What a GPU run's kernel records say about their own timing: the spread of each backend's repetitions, which
records the CPU and the GPU noise limits flag, and whether the medians grow with the work.

    python scripts/gpu_run_report.py tests/fixtures/gpu-runs/2026-11-27-h200

prints Markdown; docs/measurement.md ("GPU time and host time") holds its output for the first H200 run between
``<!-- normbench:generated h200-timing ... -->`` markers, and ``tests/test_gpu_noise.py`` checks that the two agree.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict

#: Cases at least this large (elements of the input: 4096 x 8192) have GPU work that outlasts the host's launches.
LARGE = 4096 * 8192


def load(directory: str) -> list[dict]:
    from normbench.records import iter_records

    return [r for _, r in iter_records(directory, kind="kernel", errors="raise")]


def is_large(rec: dict) -> bool:
    return math.prod(rec["config"]["shape"]) >= LARGE


def judged(rec: dict, limit: str) -> bool:
    """Whether the record's own spread flags it noisy under the CPU limit (``cpu``) or the GPU one (``gpu``)."""
    from normbench.measure import noise

    met = rec["metrics"]
    return any(w.startswith("the repetitions spread") for w in
               noise.reasons(met["noise"], "cuda" if limit == "gpu" else "cpu", met["time_iqr_s"]))


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def spread_table(recs: list[dict]) -> str:
    from normbench.measure import noise

    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in recs:
        groups[(r["config"]["backend"], is_large(r))].append(r)
    out = ["| backend | shapes | records | IQR / median, % (min, median, max) | noisy at the CPU limit "
           f"({100 * noise.REL_IQR_LIMIT:.0f} %) | noisy at the GPU limit ({100 * noise.GPU_REL_IQR_LIMIT:.0f} %) |",
           "| --- | --- | --- | --- | --- | --- |"]
    for (backend, large), rs in sorted(groups.items()):
        rel = sorted(r["metrics"]["noise"]["rel_iqr"] for r in rs)
        out.append(f"| {backend} | {'≥' if large else '<'} 4096×8192 | {len(rs)} | {_pct(rel[0])}, "
                   f"{_pct(statistics.median(rel))}, {_pct(rel[-1])} | {sum(judged(r, 'cpu') for r in rs)} | "
                   f"{sum(judged(r, 'gpu') for r in rs)} |")
    return "\n".join(out)


def growth_table(recs: list[dict], norm: str = "rmsnorm", pass_: str = "fwd") -> str:
    """Median µs per shape and backend for one norm and pass, beside the time the bytes would take at the ceiling."""
    rows: dict[str, dict] = {}
    for r in recs:
        cfg, met = r["config"], r["metrics"]
        if r["norm"]["name"] != norm or cfg["pass"] != pass_:
            continue
        row = rows.setdefault(cfg["shape_label"], {"elements": math.prod(cfg["shape"]),
                                                   "ideal": met["bytes_moved"] / (met["ceiling_gbps"] * 1e9)})
        row[cfg["backend"]] = met["time_median_s"]
    backends = sorted({b for row in rows.values() for b in row if b not in ("elements", "ideal")})
    out = [f"| shape | bytes at the copy ceiling, µs | {' | '.join(backends)} |",
           "| --- | --- | " + " | ".join("---" for _ in backends) + " |"]
    for label, row in sorted(rows.items(), key=lambda kv: (kv[1]["elements"], kv[0])):
        cells = [f"{row[b] * 1e6:.0f}" if b in row else "–" for b in backends]
        out.append(f"| {label} | {row['ideal'] * 1e6:.0f} | {' | '.join(cells)} |")
    return "\n".join(out)


def report(directory: str, recs: list[dict] | None = None) -> str:
    """The Markdown for the records under ``directory`` (or ``recs``, already loaded from it)."""
    recs = load(directory) if recs is None else recs
    others = [r for r in recs if r["config"]["backend"] != "eager"]
    large_eager = [r for r in recs if r["config"]["backend"] == "eager" and is_large(r)]
    kept = [r for r in large_eager if not judged(r, "gpu")]
    clean_max = max(r["metrics"]["noise"]["rel_iqr"] for r in kept)
    dropped = "; ".join(f"{r['norm']['name']} {r['config']['shape_label']} {r['config']['pass']} "
                        f"({_pct(r['metrics']['noise']['rel_iqr'])} %)"
                        for r in sorted(large_eager, key=lambda r: -r["metrics"]["noise"]["rel_iqr"]) if r not in kept)
    lines = [
        f"{len(recs)} records; {sum('noisy' in r['flags'] for r in recs)} were flagged `noisy` when measured (by the "
        "CPU limit). Their own spread, by backend and size:",
        "",
        spread_table(recs),
        "",
        f"The GPU limit flags all {len(others)} Triton, compile and Liger records (the least spread among them: "
        f"{_pct(min(r['metrics']['noise']['rel_iqr'] for r in others))} %) and keeps {len(kept)} of the "
        f"{len(large_eager)} eager records at 4096×8192 and above (those kept spread by at most {_pct(clean_max)} %; "
        f"flagged: {dropped or 'none'}).",
        "",
        "RMSNorm forward, median µs per backend: the Python-launched backends do not grow with the work.",
        "",
        growth_table(recs),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", help="a directory (or file) of kernel records from one GPU run")
    args = p.parse_args(argv)
    print(report(args.directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
