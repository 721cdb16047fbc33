"""Does torch.compile stay compiled across a sweep of widths and alternating dtypes? (docs/measurement.md)

    python scripts/compile_probe.py {plain|reset|dynamic|limit} [WIDTHS] [--device cuda]

Prints, per case, the graphs Dynamo built and the eager/compiled time ratio (a rough timing: read the graphs).
"""

import argparse
import time

import torch
from torch._dynamo.utils import counters

import normbench
from normbench.kernels.compile_watch import CompiledNorm

p = argparse.ArgumentParser()
p.add_argument("mode", choices=("plain", "reset", "dynamic", "limit"))
p.add_argument("widths", nargs="?", default="512,768,1024,2048,4096,5120,8192,12288,16384")
p.add_argument("--device", default="cpu")
p.add_argument("--rows", type=int, default=256)
a = p.parse_args()
if a.mode == "limit":
    torch._dynamo.config.recompile_limit = 64
spec = normbench.get_norm("rmsnorm")
sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)


def timed(f, n=20):
    f()
    sync()
    t = time.perf_counter()
    for _ in range(n):
        f()
    sync()
    return (time.perf_counter() - t) / n


for c in (int(w) for w in a.widths.split(",")):
    for dt in (torch.float32, torch.bfloat16):
        if a.mode == "reset":
            torch._dynamo.reset()
        eager = spec.create(c).to(a.device, dt)
        m = CompiledNorm(eager, **({"dynamic": True} if a.mode == "dynamic" else {}))
        x = torch.randn(a.rows, c, dtype=dt, device=a.device, requires_grad=True)
        before = counters["stats"]["unique_graphs"]
        m.watch.mark()
        m(x).sum().backward()
        ratio = timed(lambda: eager(x)) / timed(lambda: m(x))
        rep = m.watch.report()
        print(f"{a.mode} C={c} {str(dt)[6:]} new_graphs={counters['stats']['unique_graphs'] - before} "
              f"stayed_compiled={rep.stayed_compiled} eager/compile={ratio:.2f}", flush=True)
