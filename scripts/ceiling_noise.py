"""How often the copy ceiling alone would flag a whole run noisy, and how many records runs flagged, on this machine.

    python scripts/ceiling_noise.py probe [--n 30] [--disturb] [--markdown]
    python scripts/ceiling_noise.py runs DIR [DIR ...] [--markdown]

``probe`` measures the CPU ceiling ``--n`` times each way: one measurement of 5 copies (the rule until 2026-11-26),
one of ``ceiling.CPU_REPS`` copies, and ``ceiling.steady`` (``CPU_REPS`` copies, taken again up to ``ATTEMPTS`` times
while its spread is above ``noise.CEILING_SPREAD_LIMIT``: today's rule), and prints the spread's median and
maximum and the fraction of measurements above the limit (each of which would flag every record judged by it).
``--disturb`` runs a neighbour meanwhile: another process copying 64 MiB buffers on one thread for 50 ms out of
every 250 ms (a shared VM's memory-bandwidth neighbour, not a CPU hog: the load rule does not see it).

``runs`` counts, per results directory (one ``bench`` run each), the kernel records and those flagged ``noisy``, by
reason (docs/measurement.md, "Noise").
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _neighbour(stop) -> None:
    import torch

    torch.set_num_threads(1)
    src = torch.ones(16 * 2**20)
    dst = torch.empty_like(src)
    while not stop.is_set():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.05:
            dst.copy_(src)
        time.sleep(0.2)


def probe(n: int, disturb: bool, markdown: bool) -> None:
    import torch

    from normbench.measure import ceiling, noise

    spawn = mp.get_context("spawn")
    stop = spawn.Event()
    proc = None
    if disturb:
        proc = spawn.Process(target=_neighbour, args=(stop,), daemon=True)
        proc.start()
        time.sleep(1.0)
    ways = {"5 copies (until 2026-11-26)": lambda: ceiling.measure_cpu(reps=5),
            f"{ceiling.CPU_REPS} copies": lambda: ceiling.measure_cpu(reps=ceiling.CPU_REPS),
            f"{ceiling.CPU_REPS} copies, retried (today)": lambda: ceiling.steady(ceiling.measure_cpu)}
    spreads: dict = {k: [] for k in ways}
    gbps: dict = {k: [] for k in ways}
    load0 = os.getloadavg()[0]
    try:
        for _ in range(n):
            for name, fn in ways.items():  # interleaved, so every way sees the same moments
                c = fn()
                spreads[name].append(c.spread)
                gbps[name].append(c.gbps)
    finally:
        stop.set()
        if proc is not None:
            proc.join(5)
    limit = noise.CEILING_SPREAD_LIMIT
    print(f"{n} measurements each, {torch.get_num_threads()} threads, neighbour: {'yes' if disturb else 'no'}, "
          f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
    rows = []
    for name in ways:
        s, g = spreads[name], gbps[name]
        above = sum(x > limit for x in s)
        rows.append((name, f"{min(g):.1f}–{max(g):.1f}", f"{100 * statistics.median(s):.1f} %",
                     f"{100 * max(s):.1f} %", f"{above}/{n} ({100 * above / n:.0f} %)"))
    head = ("ceiling measurement", "GB/s", "spread: median", "spread: max", f"spread above {100 * limit:.0f} %")
    _table(head, rows, markdown)


def runs(dirs: list[str], markdown: bool) -> None:
    from normbench.records.store import iter_records

    rows = []
    for d in dirs:
        n = noisy = 0
        why: collections.Counter = collections.Counter()
        for _, rec in iter_records(d, "kernel"):
            n += 1
            reason = (rec.get("flag_reasons") or {}).get("noisy")
            if reason:
                noisy += 1
                for part in reason.split("; "):
                    why["ceiling spread" if "copy ceiling" in part else
                        "background load" if part.startswith("background") else "own IQR"] += 1
        rows.append((d, str(n), f"{noisy} ({100 * noisy / max(n, 1):.1f} %)",
                     ", ".join(f"{k} {v}" for k, v in sorted(why.items())) or "-"))
    _table(("run", "records", "noisy", "reasons"), rows, markdown)


def _table(head, rows, markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join("---" for _ in head) + " |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in (head, *rows):
            print("  ".join(r))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--disturb", action="store_true")
    p.add_argument("--markdown", action="store_true")
    r = sub.add_parser("runs")
    r.add_argument("dirs", nargs="+")
    r.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.what == "probe":
        probe(args.n, args.disturb, args.markdown)
    else:
        runs(args.dirs, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
