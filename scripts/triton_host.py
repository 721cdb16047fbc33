"""The Triton backend's host work per call, with its kernel launches stubbed: counts (pass/fail in a test) and time
against a floor module (a benchmark, never a test).

No GPU is needed and nothing is launched: the kernels go through ``normbench.kernels._env.use_launcher`` with a
``StubLauncher`` that takes CPU tensors, records each launch and answers device queries as an H200 would (132 SMs,
60 MiB of L2); ``--bench`` uses ``NoopLauncher``, which counts nothing (its counting would be host time of neither
module). The tensors are small CPU tensors: the ATen ops a call makes (allocations, the sums of the parameter
gradients' partials) then cost about their dispatch, as on a GPU. (Not the ``meta`` device: many of its kernels are
Python decompositions, far slower than a CUDA op's dispatch.) Triton is imported for the compiler (not the
interpreter), so autotuning is on, as on a GPU; its autotuner never times anything here: ``StubLauncher.tune``
picks the first configuration, once per new key.

    python scripts/triton_host.py --counts [--json]        # per call after warm-up: launches, ATen ops, tuner runs, ...
    python scripts/triton_host.py --bench [--json out]     # host µs per call: Triton module vs the floor module,
                                                           # interleaved round by round (medians); forward
                                                           # recording autograd, forward under no_grad, backward

The floor module has the Triton module's signature and outputs: a no-op ``autograd.Function`` whose forward returns
``empty_like`` outputs and whose backward returns ``empty_like`` gradients. Its time is what any autograd module with
those outputs pays; the Triton module's time over it is the host work of normbench's path (docs/kernels.md, "Host
path"). The boundary is the launch: Triton's own JIT dispatch (binding arguments, its cache lookup, the driver
call) is not in either number.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import statistics
import sys
import types

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("triton_host.py measures the compiled path: unset TRITON_INTERPRET")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

DEVICE = "cpu"
#: (norm, shape, dtype, what the case exercises); shapes are small: the host path does not grow with them.
CASES = [
    ("rmsnorm", (8, 4096), torch.bfloat16, "decode, fused"),
    # a narrow row: on a CPU, the ATen ops then cost about their dispatch alone (at C = 4096 the sums of the
    # parameter gradients' partials are real CPU work, which a GPU does asynchronously)
    ("rmsnorm", (8, 256), torch.bfloat16, "decode, narrow"),
    ("layernorm", (8, 256), torch.bfloat16, "decode, narrow"),
    ("rmsnorm", (4096, 1024), torch.bfloat16, "prefill, fused"),
    ("layernorm", (8, 4096), torch.bfloat16, "decode, fused"),
    ("layernorm", (4, 16384), torch.bfloat16, "fused forward, wide (one-kernel) backward"),
    ("rmsnorm", (4, 32768), torch.bfloat16, "wide forward and backward"),
    ("add_rmsnorm", (8, 4096), torch.bfloat16, "residual, decode"),
    ("dyt", (8, 4096), torch.bfloat16, "point-wise, decode"),
    ("softmax", (8, 4096), torch.bfloat16, "softmax (triton_online), on-chip rows"),
]
#: The backend a case runs (default "triton").
BACKENDS = {"softmax": "triton_online"}

#: At most this many ATen ops per call after warm-up (counted by TorchDispatchMode), forward / backward:
#: forward allocates y (and s); backward allocates dx, each parameter's gradient (in its dtype) and, where more
#: than one program reduces, one float32 buffer of partial sums, which a second launch sums into the gradients.
#: A saved output (add+RMSNorm's s, softmax's y) costs autograd a detach in each direction. No width adds to it:
#: no forward keeps row statistics (every backward, the wide ones too, computes them again from x).
MAX_ATEN = {
    "rmsnorm": (1, 3), "layernorm": (1, 4), "add_rmsnorm": (3, 4), "dyt": (1, 5), "softmax": (2, 2),
}



class StubLauncher:
    """A launcher (``normbench.kernels._env.Launcher``'s interface) that launches nothing and counts."""

    devices = ("cpu", "cuda")

    def __init__(self):
        self.counts = collections.Counter()
        self.kwargs_ids: list[int] = []

    def launch(self, kernel, grid, args, kwargs):
        self.counts["launch"] += 1
        self.kwargs_ids.append(id(kwargs))

    def tune(self, tuner, grid, args, kwargs):
        self.counts["tune"] += 1
        self.counts["launch"] += 1  # the autotuner launches the configuration it chose
        return tuner.configs[0]

    def compile(self, kernel, args, kwargs):
        self.counts["compile"] += 1
        return None

    def device_properties(self, device):
        self.counts["device_properties"] += 1
        return types.SimpleNamespace(name="stub H200", multi_processor_count=132, L2_cache_size=60 * 2**20)


class NoopLauncher(StubLauncher):
    """``StubLauncher`` whose launch does nothing at all: what ``--bench`` times (the boundary is the launch, so
    the stub's own counting, a Counter update and a list append per launch, is in neither module's time)."""

    def launch(self, kernel, grid, args, kwargs):
        pass


class _AtenOps(TorchDispatchMode):
    def __init__(self, counts):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.counts["aten"] += 1
        self.counts[f"aten:{func}"] += 1
        return func(*args, **(kwargs or {}))


def _watch(counts):
    """Count what must not happen per call after warm-up: device queries, imports, autotuner and JIT runs."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    def counted(name, fn):
        def wrapper(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return wrapper

    torch.cuda.get_device_properties = counted("get_device_properties", torch.cuda.get_device_properties)
    importlib.import_module = counted("import_module", importlib.import_module)
    Autotuner.run = counted("autotuner", Autotuner.run)
    Heuristics.run = counted("heuristics", Heuristics.run)
    JITFunction.run = counted("jit_run", JITFunction.run)


class _FloorFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, n_out, x, *rest):
        ctx.shapes = [(t.shape, t.dtype) if isinstance(t, torch.Tensor) else None for t in (x, *rest)]
        outs = tuple(torch.empty_like(x) for _ in range(n_out))
        return outs if n_out > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grads):
        g = grads[0]
        return (None,) + tuple(None if s is None else torch.empty(s[0], dtype=s[1], device=g.device)
                               for s in ctx.shapes)


class Floor(torch.nn.Module):
    """The floor: the Triton module's parameters and outputs, and an autograd function that computes nothing.

    Its parameters are its own (``p0``, ``p1``, ...), read from ``_parameters`` as the Triton module reads its own:
    a ``ParameterList`` would add about 4 µs per call of iteration to the floor and flatter the ratio."""

    def __init__(self, module: torch.nn.Module, n_out: int):
        super().__init__()
        for i, p in enumerate(module.parameters()):
            self.register_parameter(f"p{i}", p)
        self.n_out = n_out

    def forward(self, x, *rest):
        return _FloorFn.apply(self.n_out, x, *rest, *self._parameters.values())


class ListFloor(torch.nn.Module):
    """The floor as it was before 2026-11-27: its parameters in a ``ParameterList`` (``--floor list``, to compare
    with figures taken then)."""

    def __init__(self, module: torch.nn.Module, n_out: int):
        super().__init__()
        self.params = torch.nn.ParameterList([p for p in module.parameters()])
        self.n_out = n_out

    def forward(self, x, *rest):
        return _FloorFn.apply(self.n_out, x, *rest, *self.params)


FLOORS = {"lean": Floor, "list": ListFloor}


def _case(norm: str, shape, dtype, floor_kind: str = "lean"):
    import normbench

    spec = normbench.get_norm(norm)
    module = spec.create(shape[-1], backend=BACKENDS.get(norm, "triton")).to(device=DEVICE, dtype=dtype)
    x = torch.randn(shape, device=DEVICE).to(dtype).requires_grad_(True)
    inputs = [x]
    if norm.startswith("add_"):
        inputs.append(torch.randn(shape, device=DEVICE).to(dtype).requires_grad_(True))
    n_out = 2 if norm.startswith("add_") else 1
    floor = FLOORS[floor_kind](module, n_out).to(device=DEVICE, dtype=dtype)
    return module, floor, inputs, n_out


def _grads(module, inputs, out):
    outs = out if isinstance(out, tuple) else (out,)
    params = [p for p in module.parameters() if p.requires_grad]
    return outs, [*inputs, *params], [torch.ones_like(o) for o in outs]


def counts(warmup: int = 3) -> dict:
    """Per case: what one forward and one backward do after ``warmup`` calls of each."""
    from normbench.kernels import _env

    stub = StubLauncher()
    report = {}
    with _env.use_launcher(stub):
        with _AtenOps(collections.Counter()):  # the mode's own first use imports modules: not the path's
            torch.empty(1) + 1
        _watch(stub.counts)
        for norm, shape, dtype, what in CASES:
            module, _, inputs, n_out = _case(norm, shape, dtype)
            for _ in range(warmup):
                outs, wrt, dys = _grads(module, inputs, module(*inputs))
                torch.autograd.grad(outs, wrt, dys)
            row = {"norm": norm, "shape": list(shape), "dtype": str(dtype).split(".")[-1], "what": what,
                   "max_aten": list(MAX_ATEN[norm]), "n_out": n_out}
            out = None
            for step in ("fwd", "bwd"):
                if step == "bwd":
                    grad_args = _grads(module, inputs, out)
                stub.counts.clear()
                stub.kwargs_ids.clear()
                with _AtenOps(stub.counts):
                    if step == "fwd":
                        out = module(*inputs)
                    else:
                        torch.autograd.grad(*grad_args)
                ids = list(stub.kwargs_ids)
                row[step] = dict(stub.counts)
                row[step + "_kwargs_ids"] = ids
            # the same call again: a cached plan passes the very same launch parameters
            stub.kwargs_ids.clear()
            out = module(*inputs)
            torch.autograd.grad(*_grads(module, inputs, out))
            row["same_plan"] = stub.kwargs_ids == row["fwd_kwargs_ids"] + row["bwd_kwargs_ids"]
            # inference (decode runs under no_grad): nothing is saved for a backward, so no autograd work either
            with torch.no_grad():
                stub.counts.clear()
                with _AtenOps(stub.counts):
                    module(*inputs)
                row["infer"] = dict(stub.counts)
            report[f"{norm} {'x'.join(map(str, shape))}"] = row
        # a new shape gets its own plan (one tuner run per kernel), and the old shape's plan is still there
        module, _, inputs, _ = _case("rmsnorm", (16, 4096), torch.bfloat16)
        stub.counts.clear()
        module(*inputs)
        new_shape = stub.counts["tune"]
        module2, _, inputs2, _ = _case("rmsnorm", (8, 4096), torch.bfloat16)
        stub.counts.clear()
        module2(*inputs2)
        report["_plans"] = {"new_shape_tunes": new_shape, "old_shape_tunes": stub.counts["tune"]}
    return report


#: What --bench times per case: the forward with autograd recording (training), the same forward under no_grad
#: (inference: decode pays this one), and the backward.
STEPS = ("fwd", "infer", "bwd")


def _per_call(fn, n: int, clock) -> float:
    """CPU seconds per call of ``fn`` over ``n`` calls."""
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n


def bench(rounds: int = 200, block_s: float = 0.002, floor_kind: str = "lean") -> dict:
    """Host µs per call, Triton module vs floor, interleaved: each round times a block of calls of one, then of the
    other (the order alternates), for forward and for backward; the ratio is the median of the rounds' ratios.

    The clock is this thread's CPU time (``time.thread_time``), not the wall: on a shared machine the time this
    process waits for a core is not host work (cache contention and load still are, for both modules alike, which
    is why they are interleaved round by round rather than timed one after the other)."""
    import time

    from normbench.kernels import _env

    clock = time.thread_time
    load_start = os.getloadavg()[0]
    torch.set_num_threads(1)
    # The partial-sum buffers are torch.empty: on a CPU, summing garbage that holds denormals is ~100x slower than
    # the op's dispatch (a GPU has no such cost); flushed, the sum costs what it would on a GPU's host side.
    torch.set_flush_denormal(True)
    report = {}
    with _env.use_launcher(NoopLauncher()):
        for norm, shape, dtype, what in CASES:
            module, floor, inputs, _ = _case(norm, shape, dtype, floor_kind)
            calls = {}
            for name, mod in (("triton", module), ("floor", floor)):
                out = mod(*inputs)
                outs, wrt, dys = _grads(mod, inputs, out)
                calls[name + "_fwd"] = calls[name + "_infer"] = lambda mod=mod: mod(*inputs)
                calls[name + "_bwd"] = (lambda outs=outs, wrt=wrt, dys=dys:
                                        torch.autograd.grad(outs, wrt, dys, retain_graph=True))
            # block size: about ``block_s`` of the slower call (the Triton module), after a warm-up
            n = {}
            for step in STEPS:
                with torch.set_grad_enabled(step != "infer"):
                    per = _per_call(calls["triton_" + step], 20, clock)
                n[step] = max(5, int(block_s / max(per, 1e-7)))
            times = collections.defaultdict(list)
            ratios = collections.defaultdict(list)
            for r in range(rounds):
                for step in STEPS:
                    order = ("triton", "floor") if r % 2 == 0 else ("floor", "triton")
                    with torch.set_grad_enabled(step != "infer"):  # the "infer" forward runs as decode does
                        got = {name: _per_call(calls[f"{name}_{step}"], n[step], clock) for name in order}
                    for name, t in got.items():
                        times[f"{name}_{step}"].append(t * 1e6)
                    ratios[step].append(got["triton"] / got["floor"])
            row = {k: round(statistics.median(v), 2) for k, v in times.items()}
            for step in STEPS:
                q = statistics.quantiles(ratios[step], n=4)
                row["ratio_" + step] = round(statistics.median(ratios[step]), 3)
                row["ratio_" + step + "_iqr"] = [round(q[0], 3), round(q[2], 3)]
            row["what"] = what
            report[f"{norm} {'x'.join(map(str, shape))} {str(dtype).split('.')[-1]}"] = row
    report["_machine"] = {"clock": "time.thread_time", "rounds": rounds, "floor": floor_kind,
                          "load_1min": [load_start, os.getloadavg()[0]], "cores": len(os.sched_getaffinity(0)),
                          "torch": torch.__version__,
                          "threads": torch.get_num_threads()}
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", action="store_true", help="per-call counts after warm-up")
    ap.add_argument("--bench", action="store_true", help="host time per call against the floor module")
    ap.add_argument("--json", nargs="?", const="-", help="write JSON (to a file, or stdout with no argument)")
    ap.add_argument("--rounds", type=int, default=200, help="interleaved rounds of --bench")
    ap.add_argument("--floor", choices=sorted(FLOORS), default="lean",
                    help="the floor module of --bench (list: the ParameterList one of the figures before 2026-11-27)")
    ap.add_argument("--only", nargs="*", help="cases whose name starts with one of these (e.g. rmsnorm)")
    args = ap.parse_args(argv)
    if not (args.counts or args.bench):
        ap.error("say --counts or --bench")
    if args.only:
        CASES[:] = [c for c in CASES if any(f"{c[0]} {'x'.join(map(str, c[1]))}".startswith(o) for o in args.only)]
    report = counts() if args.counts else bench(args.rounds, floor_kind=args.floor)
    if args.json == "-":
        print(json.dumps(report))
    else:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
        for key, row in report.items():
            if key.startswith("_"):
                print(key, row)
            elif args.counts:
                short = lambda c: {k: v for k, v in c.items() if not k.startswith("aten:")}  # noqa: E731
                print(f"{key:24} fwd {short(row['fwd'])}\n{'':24} bwd {short(row['bwd'])}")
            else:
                print(f"{key:32} " + "   ".join(
                    f"{step} {row['triton_' + step]:7.2f} us vs floor {row['floor_' + step]:7.2f} "
                    f"({row['ratio_' + step]:.2f}x)" for step in STEPS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
