"""Validate normbench's GPU path in one short call: the per-device gate, then the harness's GPU and host times against
the kernels' own times from ``torch.profiler`` (CUPTI), one table, a non-zero exit where they disagree.

Run by ``scripts/gpu-validate.sh`` on a GPU machine (issue #35 item 5; docs/measurement.md, "Verify on a GPU"):

    bash scripts/gpu-validate.sh [--budget-s 280] [--out DIR]     # DIR: $OUT, else ./validate-out
    bash scripts/gpu-validate.sh --dry-run                         # the plan, on any machine (CI runs it)

Steps, each written as it finishes (atomically; a run cut short keeps what it finished):
1. the gate for tier 1's norms on CUDA: ``normbench check --device cuda NAME...`` (``gate.log``);
2. the harness: ``normbench bench`` for ``CASES`` (RMSNorm, LayerNorm × eager, compile, triton, liger × three shapes ×
   bf16 × fwd, bwd), its records read for ``metrics.time_median_s`` (GPU time), ``metrics.host_s`` (host time) and
   the ``host_bound`` flag (``bench.log``, ``records.json``);
3. the profiler: each case's timed callable (the harness's own, ``Prepared.pass_fns``) run under ``torch.profiler``
   as pre, flush, spin, call, spin: a repetition's kernels are those between a pair of spin kernels, so the flush
   and the pass's own fill kernels (``torch.zeros``) are told apart by position, not name, and backward kernels
   (launched from autograd's thread) are taken from the GPU's timeline, whatever thread launched them;
4. ``table.md`` / ``table.json``: per case the harness's GPU and host times, the GPU work's time (median over
   repetitions of the summed durations of every kernel, ``gpu_memcpy`` and ``gpu_memset`` between the spins: the
   row says what it counted), and a verdict: ``ok``; ``DIFF`` where harness and profiler differ by more than
   max(5 %, 2 µs × kernels); ``HOST_BOUND`` where the record is flagged; ``MISSING``.

Exit status: 0 only if the gate passed and every row is ``ok``. At most 6 files under the output folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NORMS = ("rmsnorm", "layernorm")
BACKENDS = ("eager", "compile", "triton", "liger")
SHAPES = ("llm-4096x1024", "llm-4096x8192", "llm-8192x4096")
PASSES = ("fwd", "bwd")
DTYPE = "bfloat16"
#: tier 1's norms (normbench.campaign.TIER1_NORMS; read from there when it imports)
GATE_NORMS = ("layernorm", "rmsnorm", "dyt", "add_rmsnorm")
#: harness and profiler agree when they differ by at most max(REL_TOL × profiler, PER_KERNEL_S × kernels): launch
#: gaps between a pass's kernels are inside the harness's events and outside the kernels' durations.
REL_TOL = 0.05
PER_KERNEL_S = 2e-6
#: spin kernels: the one before each call keeps the GPU's queue ahead of the host; the one after closes the call
SPIN_NAME = "spin_kernel"
OPEN_SPIN_CYCLES = 400_000    # ≈ 200 µs at 2 GHz
CLOSE_SPIN_CYCLES = 1_000
PROFILE_REPS = 10
FILES = ("gate.log", "bench.log", "records.json", "table.md", "table.json", "validate.log")


def cases() -> list[tuple[str, str, str, str]]:
    return [(n, b, s, p) for n in NORMS for b in BACKENDS for s in SHAPES for p in PASSES]


def gate_norms() -> tuple[str, ...]:
    try:
        from normbench.campaign import TIER1_NORMS
        return tuple(TIER1_NORMS)
    except Exception:  # the dry run needs nothing but this file
        return GATE_NORMS


def gate_command(py: str, norms: tuple[str, ...] | None = None) -> list[str]:
    return [py, "-m", "normbench.cli", "check", "--device", "cuda", *(norms or gate_norms())]


def bench_command(py: str, out: str) -> list[str]:
    return [py, "-m", "normbench.cli", "bench", "--norm", *NORMS, "--backend", *BACKENDS, "--dtype", DTYPE,
            "--pass", *PASSES, "--shape", *SHAPES, "--device", "cuda", "--timing", "cold", "--out", out,
            "--no-progress"]


def plan_text(py: str = "python3", out: str = "$OUT") -> str:
    lines = ["gpu-validate plan:",
             f"1. gate: {' '.join(gate_command(py, GATE_NORMS))}",  # the dry run imports nothing (fast in CI)
             f"2. harness: {' '.join(bench_command(py, out + '/work'))}",
             f"3. profiler: {len(cases())} cases (pre, flush, spin, call, spin) x {PROFILE_REPS} repetitions:"]
    lines += [f"   {n}/{b}/{s}/{DTYPE}/{p}" for n, b, s, p in cases()]
    lines.append(f"4. table: verdict DIFF where |harness - profiler| > max({REL_TOL:.0%}, "
                 f"{PER_KERNEL_S * 1e6:g} us x kernels), HOST_BOUND where flagged; files: {', '.join(FILES)}")
    return "\n".join(lines)


# --- the parts unit-tested on the CPU ------------------------------------------------------------------------------

#: the GPU work a repetition's time is summed over: kernels, and the copies and fills CUPTI reports apart from kernels
#: (a ``cudaMemcpyAsync`` / ``cudaMemsetAsync`` inside a call is GPU time the harness's events hold too)
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_kernels(trace: dict) -> list[dict]:
    """The GPU work of a ``torch.profiler`` Chrome trace (every event of ``GPU_CATEGORIES``), in the order the GPU
    ran it (start time; every thread and stream: autograd launches the backward from its own thread)."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]
    return sorted(kernels, key=lambda e: float(e["ts"]))


def repetitions(trace: dict, spin: str = SPIN_NAME) -> list[list[dict]]:
    """The kernels of each repetition: those between an opening and a closing spin kernel (pairs, in GPU order)."""
    reps, inside, current = [], False, []
    for k in gpu_kernels(trace):
        if k.get("cat") == "kernel" and spin in k["name"]:
            if inside:
                reps.append(current)
            inside, current = not inside, []
        elif inside:
            current.append(k)
    return reps


def kernel_time(reps: list[list[dict]]) -> tuple[float, int] | None:
    """(median over repetitions of the summed kernel durations in seconds, median kernel count) or None."""
    if not reps:
        return None
    sums = [sum(float(k["dur"]) for k in r) * 1e-6 for r in reps]
    return statistics.median(sums), int(statistics.median(len(r) for r in reps))


def counted(reps: list[list[dict]]) -> str:
    """What a row's profiler time summed, per repetition (the median count of each category), e.g.
    ``"2 kernel + 1 gpu_memcpy"``; ``"nothing"`` when no repetition held GPU work."""
    if not reps:
        return "nothing"
    parts = []
    for cat in GPU_CATEGORIES:
        n = int(statistics.median(sum(1 for k in r if k.get("cat") == cat) for r in reps))
        if n:
            parts.append(f"{n} {cat}")
    return " + ".join(parts) or "nothing"


def simulated_trace(call_s: list[float], gap_s: float = 0.0, spin: str = SPIN_NAME) -> dict:
    """A Chrome trace as ``profile_pass`` records it (per repetition: flush, spin, the call's GPU work, spin), for a
    rehearsal without a GPU: each repetition's GPU work lasts ``call_s[i]`` as the harness's events saw it, split into
    a kernel and a device-to-device copy; ``gap_s`` of it is the GPU idle between them, waiting for the host (a
    planted host gap: the events hold it, the GPU work does not, so the row must not read ``ok``)."""
    ev, t = [], 0.0

    def add(name, cat, dur_us):
        nonlocal t
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": t, "dur": dur_us, "pid": 0, "tid": 7})
        t += dur_us

    for total in call_s:
        busy_us = max(total - gap_s, 0.0) * 1e6
        add("fill_flush", "kernel", 60.0)
        add(f"at::cuda::{spin}(long)", "kernel", 200.0)
        add("rehearsal_call_kernel", "kernel", busy_us * 0.75)
        t += gap_s * 1e6
        add("Memcpy DtoD (Device -> Device)", "gpu_memcpy", busy_us * 0.25)
        add(f"at::cuda::{spin}(long)", "kernel", 1.0)
    return {"traceEvents": ev}


def tolerance_s(profiler_s: float, kernels: int) -> float:
    return max(REL_TOL * profiler_s, PER_KERNEL_S * kernels)


def verdict(row: dict) -> str:
    """``ok``, ``HOST_BOUND``, ``DIFF`` or ``MISSING`` (why, in the row's ``why``)."""
    if row.get("harness_s") is None or row.get("profiler_s") is None:
        return "MISSING"
    if row.get("host_bound"):
        return "HOST_BOUND"
    if abs(row["harness_s"] - row["profiler_s"]) > tolerance_s(row["profiler_s"], row.get("kernels") or 0):
        return "DIFF"
    return "ok"


def render(rows: list[dict]) -> str:
    def us(v):
        return "—" if v is None else f"{v * 1e6:.1f}"

    out = ["| norm | backend | shape | pass | harness GPU µs | host µs | profiler µs | GPU work counted | diff | "
           "verdict |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        diff = "—"
        if r.get("harness_s") is not None and r.get("profiler_s"):
            diff = f"{100 * (r['harness_s'] - r['profiler_s']) / r['profiler_s']:+.1f} %"
        out.append(f"| {r['norm']} | {r['backend']} | {r['shape']} | {r['pass']} | {us(r.get('harness_s'))} | "
                   f"{us(r.get('host_s'))} | {us(r.get('profiler_s'))} | "
                   f"{r.get('counted') or r.get('kernels') or '—'} | {diff} | "
                   f"{r['verdict']}{' (' + r['why'] + ')' if r.get('why') else ''} |")
    return "\n".join(out) + "\n"


def record_norm(rec: dict) -> str | None:
    """A record's norm name: ``norm`` is the norm's spec (a dict with ``name``) in every stored record; a loader's
    row may carry the bare name (``_norm``)."""
    norm = rec.get("norm")
    if isinstance(norm, dict):
        return norm.get("name")
    return norm or rec.get("_norm")


def harness_rows(records: list[dict]) -> dict:
    """(norm, backend, shape, pass) -> harness GPU time, host time and host_bound, from kernel records (as
    ``normbench.records.store.iter_records`` reads them)."""
    got = {}
    for rec in records:
        cfg, met = rec.get("config", {}), rec.get("metrics", {})
        key = (record_norm(rec), cfg.get("backend"), cfg.get("shape_label"), cfg.get("pass"))
        got[key] = {"harness_s": met.get("time_median_s"), "host_s": met.get("host_s"),
                    "host_bound": "host_bound" in (rec.get("flags") or []), "flags": rec.get("flags") or []}
    return got


# --- the GPU steps ---------------------------------------------------------------------------------------------------

class Output:
    """At most ``FILES`` under ``root``, each replaced atomically whenever it is written."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.log_lines: list[str] = []

    def write(self, name: str, text: str) -> None:
        assert name in FILES, name
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, self.root / name)

    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.log_lines.append(line)
        self.write("validate.log", "\n".join(self.log_lines) + "\n")


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    """Run ``cmd`` in its own process group; on timeout (or this process being stopped) end the whole group, its
    worker processes included, so nothing outlives the call. None when it timed out."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)

    def stop(*_):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=10)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    old = signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(143)))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        stop()
        return None
    except KeyboardInterrupt:
        stop()
        raise
    finally:
        signal.signal(signal.SIGTERM, old)


def run_gate(out: Output, py: str, timeout: float) -> bool:
    cmd = gate_command(py)
    p = _run(cmd, timeout)
    if p is None:
        out.write("gate.log", f"$ {' '.join(cmd)}\ntimed out after {timeout:.0f} s\n")
        out.log("gate: FAILED (timed out)")
        return False
    text = f"$ {' '.join(cmd)}\nexit {p.returncode}\n{p.stdout}\n{p.stderr}"
    if p.returncode != 0 and "--device" in p.stderr and "unrecognized" in p.stderr:
        text += ("\nnormbench check has no --device option: the per-device gate (issue #35 item 1) is not in this "
                 "tree; merge it before validating\n")
        out.log("gate: FAILED: `normbench check --device` is missing (the per-device gate is not in this tree)")
        out.write("gate.log", text)
        return False
    out.write("gate.log", text)
    out.log(f"gate: {'passed' if p.returncode == 0 else 'FAILED (exit %d, see gate.log)' % p.returncode}")
    return p.returncode == 0


def run_harness(out: Output, py: str, work: Path, timeout: float) -> dict:
    cmd = bench_command(py, str(work))
    p = _run(cmd, timeout)
    if p is None:
        text = f"$ {' '.join(cmd)}\ntimed out after {timeout:.0f} s (the records written by then are read)\n"
    else:
        text = f"$ {' '.join(cmd)}\nexit {p.returncode}\n{p.stdout[-20000:]}\n{p.stderr[-20000:]}"
    out.write("bench.log", text)
    from normbench.records import iter_records

    records = [rec for _, rec in iter_records(work, kind="kernel")] if work.exists() else []
    out.write("records.json", json.dumps(records))
    out.log(f"harness: {len(records)} record(s)")
    return harness_rows(records)


#: the profiler's order: the cases this validation is about first, torch.compile (slow to build) last
PROFILE_ORDER = ("triton", "eager", "liger", "compile")


def profile_group(norm: str, backend: str, shape: str) -> dict:
    """pass -> (kernels' time, kernel count) or None, or the error as a string, for one built module."""
    import normbench
    from normbench.measure.group import Prepared
    from normbench.measure.shapes import by_label

    prep = Prepared(normbench.get_norm(norm), backend, by_label(shape), DTYPE, "cuda")
    got = {}
    for pass_ in PASSES:
        try:
            got[pass_] = profile_pass(prep, pass_)
        except Exception as exc:  # a forward-only baseline, a failing case: said in its row
            got[pass_] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return got


def profile_pass(prep, pass_: str) -> tuple[float, int, str] | None:
    import torch

    from normbench.measure.timers import L2Flusher

    fn, pre = prep.pass_fns(pass_)
    flush = L2Flusher(torch.device("cuda"), "zero")  # the harness's cold-timing flush
    for _ in range(3):  # warm-up: compilation, autotuning, launch plans
        if pre:
            pre()
        fn()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILE_REPS):
            if pre:
                pre()
            flush()
            torch.cuda._sleep(OPEN_SPIN_CYCLES)
            fn()
            torch.cuda._sleep(CLOSE_SPIN_CYCLES)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    reps = repetitions(trace)
    if not reps:  # say what the trace held, so a renamed spin kernel is found at once
        names = sorted({k["name"][:60] for k in gpu_kernels(trace)})
        raise RuntimeError(f"no {SPIN_NAME} pairs in the trace; kernels seen: {names[:5]}")
    return (*kernel_time(reps), counted(reps))


def finish(rows: dict, out: Output, gate_ok: bool) -> list[dict]:
    """Verdicts for every row, the table written (in ``cases()`` order)."""
    done = []
    for key in cases():
        row = rows[key]
        if row.get("harness_s") is None and "why" not in row:
            row["why"] = "no harness record (bench.log says why)"
        row["verdict"] = verdict(row)
        done.append(row)
    out.write("table.md", render(done))
    out.write("table.json", json.dumps({"gate_ok": gate_ok, "rows": done}, indent=1))
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (any machine)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "validate-out")
    ap.add_argument("--budget-s", type=float, default=280.0, help="stop starting new steps after this long")
    args = ap.parse_args(argv)
    py = sys.executable
    if args.dry_run:
        print(plan_text(os.path.basename(py), args.out))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu-validate: no CUDA device here (use --dry-run to see the plan)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    left = lambda: args.budget_s - (time.monotonic() - t0)  # noqa: E731
    out = Output(Path(args.out))
    out.log(f"gpu-validate on {torch.cuda.get_device_name()} (torch {torch.__version__}), budget {args.budget_s:.0f} s")
    gate_ok = run_gate(out, py, timeout=min(90.0, max(10.0, left() * 0.3)))
    with tempfile.TemporaryDirectory(prefix="gpu-validate-") as work:
        harness = run_harness(out, py, Path(work), timeout=max(10.0, left() * 0.6))
    rows = {c: {"norm": c[0], "backend": c[1], "shape": c[2], "pass": c[3], "dtype": DTYPE, **harness.get(c, {})}
            for c in cases()}
    groups = sorted({c[:3] for c in cases()}, key=lambda g: PROFILE_ORDER.index(g[1]))
    for n, b, s in groups:
        if left() <= 10:
            for p in PASSES:
                rows[(n, b, s, p)]["why"] = "out of time before the profiler reached it"
            continue
        try:
            got = profile_group(n, b, s)
        except Exception as exc:  # a backend missing here (liger) or a failing build: said in its rows
            got = dict.fromkeys(PASSES, f"{type(exc).__name__}: {str(exc)[:120]}")
        for p in PASSES:
            row, res = rows[(n, b, s, p)], got[p]
            if isinstance(res, str):
                row["why"] = res
            elif res is None:
                row["why"] = "no spin-delimited repetition in the trace"
            else:
                row["profiler_s"], row["kernels"] = res[:2]
                if len(res) > 2:
                    row["counted"] = res[2]
        finish(rows, out, gate_ok)
    rows = finish(rows, out, gate_ok)
    bad = [r for r in rows if r["verdict"] != "ok"]
    print(render(rows))
    out.log(f"done in {time.monotonic() - t0:.0f} s: gate {'passed' if gate_ok else 'FAILED'}, "
            f"{len(rows) - len(bad)} ok, {len(bad)} not ok")
    return 0 if gate_ok and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
