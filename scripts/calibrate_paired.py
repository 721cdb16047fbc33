"""Calibrate the head-to-head verdict (normbench.stats.paired_ratio) live on this machine.

Two arms, each timed with the interleaved timer and the head-to-head settings (normbench.measure.headtohead) on
the same inputs, repeated RUNS times:

* identical: the eager RMSNorm twice (two modules, same weights and input): the verdict should be "tie";
* planted: the eager RMSNorm against itself plus the same norm over 30 % more rows (extra work, not a sleep): the
  slower one's verdict should be "slower".

    python scripts/calibrate_paired.py [--runs 40] [--shape 32x1x4096] [--out tests/fixtures/paired_noise.json
                                       --arm decode [--keep 10]]

Prints the rates (they go in docs/measurement.md, "Head to head"). With ``--out`` it stores the run under ``--arm``
in that file (other arms kept): every run's verdict (``live_verdicts``) and the per-round times of the first
``--keep`` runs (all by default; the decode runs take 30 KB each), which tests/test_headtohead.py replays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import torch

    from normbench.discovery import REGISTRY
    from normbench.measure.headtohead import SLOW_ROUNDS, paired_settings
    from normbench.measure.shapes import parse_shape
    from normbench.measure.timers import TimerSettings, interleaved_time
    from normbench.stats import paired_ratio

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--shape", default="32x1x4096")
    ap.add_argument("--out", default=None)
    ap.add_argument("--arm", default=None, help="the key to store this calibration under in --out")
    ap.add_argument("--keep", type=int, default=None, help="per-round times of only the first KEEP runs")
    args = ap.parse_args()
    shape = parse_shape(args.shape)
    spec = REGISTRY.get("rmsnorm")
    torch.manual_seed(0)
    c = shape.dims[-1]
    a = spec.create(c, layout="tokens")
    b = spec.create(c, layout="tokens")
    b.load_state_dict(a.state_dict())
    x = torch.randn(shape.dims)
    rows = shape.dims[0] * shape.dims[1]
    extra = max(1, round(0.3 * rows))
    x_extra = torch.randn(extra, c)
    settings = paired_settings(TimerSettings.quick())

    def fa():
        with torch.no_grad():
            return a(x)

    def fb():
        with torch.no_grad():
            return b(x)

    def slow():
        with torch.no_grad():
            a(x_extra)
            return a(x)

    out = {"shape": list(shape.dims), "threads": torch.get_num_threads(), "load_before": os.getloadavg()[0],
           "identical": [], "planted": []}
    verdicts = {"identical": [], "planted": []}
    t0 = time.time()
    for i in range(args.runs):
        s = interleaved_time({"a": fa, "b": fb}, settings, seed=i, slow_rounds=SLOW_ROUNDS)
        out["identical"].append([s["a"], s["b"]])
        verdicts["identical"].append(paired_ratio(s["a"], s["b"]).verdict)
        s = interleaved_time({"slow": slow, "b": fb}, settings, seed=i, slow_rounds=SLOW_ROUNDS)
        out["planted"].append([s["slow"], s["b"]])
        p = paired_ratio(s["slow"], s["b"])
        verdicts["planted"].append(p.verdict)
    out["load_after"] = os.getloadavg()[0]
    out["wall_s"] = round(time.time() - t0, 1)
    out["verdicts"] = verdicts
    for arm, want in (("identical", "tie"), ("planted", "slower")):
        v = verdicts[arm]
        print(f"{arm}: {want} in {v.count(want)}/{len(v)} runs ({100 * v.count(want) / len(v):.0f}%); "
              f"others: { {k: v.count(k) for k in set(v) if k != want} }")
    print(f"shape {shape.dims}, load average {out['load_before']:.2f} before, {out['load_after']:.2f} after, "
          f"{out['wall_s']} s")
    if args.out:
        path = Path(args.out)
        stored = json.loads(path.read_text()) if path.exists() else {}
        arm = {"shape": out["shape"], "threads": out["threads"], "load_before": out["load_before"],
               "load_after": out["load_after"], "wall_s": out["wall_s"], "live_verdicts": verdicts,
               "identical": out["identical"][:args.keep], "planted": out["planted"][:args.keep]}
        stored[args.arm or "runs"] = arm
        path.write_text(json.dumps(stored) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
