"""How well does a yardstick cancel the machine's drift? The pass / reference ratio of ``Relative.time_in_refs``'
cases, in calm and stressed phases, against two yardsticks: a copy of the input (the first ``time_in_copies``) and
torch's own op of the norm's kind (``suites/asv/kernels.py::reference_pass``, what ``time_in_refs`` uses).

Each phase takes ``--samples`` samples per case and yardstick, as ``RefClock`` does: the reference timed just before
and just after a block of passes, in process CPU time, one thread. A stressed phase runs a single-threaded matrix
multiply loop beside it (a busy sibling core: arithmetic contention, which slows a norm's pass more than a copy).
A good yardstick keeps each case's median ratio still across phases: the table prints max/min over all phases.

    .venv/bin/python scripts/asv_reference_drift.py --rounds 2 --out /tmp/drift.json

Ctrl-C stops the stress process and exits. Issue #40; docs/measurement.md, "ASV".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STRESS = "import numpy as np\na = np.random.rand(300, 300)\nwhile True:\n    a @ a\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--norms", default="rmsnorm,layernorm,dyt")
    ap.add_argument("--shape", default="quick-8x128x512", help="a shape of the ASV grid (default: its quick case)")
    ap.add_argument("--rounds", type=int, default=2, help="calm + stressed phase pairs (default 2)")
    ap.add_argument("--samples", type=int, default=15, help="samples per case, yardstick and phase (default 15)")
    ap.add_argument("--out", type=Path, help="write the medians per phase and the summary as JSON")
    args = ap.parse_args(argv)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from normbench.measure import kernel_suite as suite

    spec = importlib.util.spec_from_file_location("nb_asv_kernels", REPO / "suites" / "asv" / "kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    clock = time.process_time

    def per_call(fn, calls):
        t0 = clock()
        for _ in range(calls):
            fn()
        return (clock() - t0) / calls

    cases = {}
    for norm in args.norms.split(","):
        for pass_ in ("fwd", "fwd+bwd"):
            case = suite.case_for(norm, "eager", args.shape, "float32", pass_, harness="asv")
            prep, fn, _pre, sync = suite.prepare(case, retain_graph=True)
            x = prep.inputs[0].detach()
            dst = x.clone()
            refs = {"copy": lambda dst=dst, x=x: dst.copy_(x),
                    "torch op": kernels.reference_pass(kernels.reference_kind(norm), x, pass_, sync)}
            cases[(norm, pass_)] = (fn, refs)

    def sample(fn, ref):
        calls = max(1, int(0.002 / max(per_call(ref, 1), 1e-7)))
        before = per_call(ref, calls)
        t = per_call(fn, 5)
        return t / ((before + per_call(ref, calls)) / 2)

    for fn, refs in cases.values():  # warm up
        for ref in refs.values():
            sample(fn, ref)

    phases = []
    stress = None
    try:
        for _ in range(args.rounds):
            for tag in ("calm", "stressed"):
                if tag == "stressed":
                    stress = subprocess.Popen([sys.executable, "-c", STRESS],
                                              env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
                    time.sleep(0.5)
                medians = {f"{n} {p} / {r}": statistics.median(sample(fn, ref) for _ in range(args.samples))
                           for (n, p), (fn, refs) in cases.items() for r, ref in refs.items()}
                phases.append({"phase": tag, "load1": os.getloadavg()[0], "medians": medians})
                if stress is not None:
                    stress.kill()
                    stress.wait()
                    stress = None
    except KeyboardInterrupt:
        return 130
    finally:
        if stress is not None:
            stress.kill()
            stress.wait()

    summary = {}
    print(f"{'case / yardstick':36s} " + " ".join(f"{p['phase'][:6]:>8s}" for p in phases) + "   max/min")
    for key in phases[0]["medians"]:
        vals = [p["medians"][key] for p in phases]
        summary[key] = max(vals) / min(vals)
        print(f"{key:36s} " + " ".join(f"{v:8.2f}" for v in vals) + f"   {summary[key]:.2f}")
    print("load average per phase: " + ", ".join(f"{p['load1']:.1f}" for p in phases))
    if args.out:
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps({"shape": args.shape, "samples": args.samples, "phases": phases,
                                   "max_over_min": summary}, indent=1))
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
