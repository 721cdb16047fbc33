"""One script for a short GPU window (issue #48): environment check, the check gate on CUDA, a smoke step, the
validation, tier 1, then the models tier, with explicit budgets, resumable across calls and across windows.

Run by ``scripts/gpu-window.sh`` (docs/measurement.md, "On a short GPU window"):

    bash scripts/gpu-window.sh [--out DIR] [--window 15] [--call-limit 10]   # on the GPU machine; DIR: $OUT
    bash scripts/gpu-window.sh --dry-run [--out DIR]     # the plan, its costs and their source, on any machine
    bash scripts/gpu-window.sh --rehearse [SCENARIO] --out DIR   # the same Python on the CPU (simulated device)
    ... [--validation-only] [--cases 'rmsnorm/eager/*/fwd']   # stop after the validation; only the matching cases

Each call stops starting work once a set could not finish by ``STOP_S`` (540 s) of script wall time (sooner under a
shorter ``--call-limit``). Records are packed under ``--out`` after every group (``normbench.campaign``, atomically),
so a call killed at any second, SIGKILL included, leaves every finished group's records and its part of the report;
the next call with the same ``--out`` goes on from them. What ``--out`` holds (at most 8 files, what a device call
brings back): ``records-<i>.json.gz`` (the campaign's packed records), ``campaign-log.json``, ``window.json`` (the
steps' state and measured costs: the next dry run's cost source), ``report.md`` (steps, the validation's verdict
table, problems) and ``table.json``.

The validation's harness IS a slice of tier 1 (RMSNorm and LayerNorm at three shapes, timed as tier 1 is timed:
head to head, L2 flushed before each call): what is validated is what is ranked. The profiler then runs the same
callables under ``torch.profiler`` and compares with those records (``scripts/gpu_validate.py``). In a rehearsal the
profiler's trace is simulated from the harness's own times (``gpu_validate.simulated_trace``): it proves the
plumbing (trace, rows, verdicts, table), not the GPU's timer; ``--plant-host-gap`` plants a host gap in it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_validate as gv  # noqa: E402

sys.path.pop(0)

#: each call stops its own work by this much script wall time (of a 10-minute command: start-up, the transfer back)
STOP_S = 540.0
WINDOW_MIN = 15.0
CALL_LIMIT_MIN = 10.0
#: of the window, what the machine's starts take (one per window, and a margin): the script's wall time must fit the
#: rest (issue #48: <= 12 min of estimated script wall time, >= 3 min left for machine starts)
MACHINE_START_S = 180.0
#: the committed cost source until a run of this script writes its own (``window.json`` under ``--out``)
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "gpu-runs" / "2026-11-27-h200"
COSTS_FIXTURE = FIXTURE_DIR / "costs.json"
#: the validation's slice of tier 1 (``gpu_validate``'s cases): these norms at these shapes, every tier-1 backend
VALIDATION_NORMS = gv.NORMS
VALIDATION_SHAPES = gv.SHAPES
STEPS = ("env", "gate", "smoke", "harness", "profiler", "tier1", "models")
OUT_FILES = ("campaign-log.json", "window.json", "report.md", "table.json")
#: the rehearsal's reduced plan: tiny shapes on CPU tensors (Triton through its interpreter), within 90 s on 2 cores
REHEARSAL_NORMS = ("rmsnorm", "layernorm")
REHEARSAL_BACKENDS = ("eager", "triton")
REHEARSAL_SHAPES = ("4x64", "8x64")
REHEARSAL_PASSES = ("fwd", "bwd")
#: ``normbench.rehearsal.SCENARIOS`` (a test keeps them the same)
REHEARSAL_SCENARIOS = ("normal", "host_bound", "clock_ramp", "low_clock")
REHEARSE_ENV = "NORMBENCH_REHEARSE"  # normbench.device.REHEARSE_ENV


#: What this script reaches on a GPU that its rehearsal does not run: the seam's list (``normbench.device``), and the
#: profiler step (the rehearsal simulates its trace). Ten with the seam's nine (issue #48: at most 10);
#: docs/measurement.md names each; a test fails when one is added.
SCRIPT_NOT_REHEARSED = {
    "gpu_validate.profile_group": "torch.profiler's CUDA activity (CUPTI) and torch.cuda._sleep spins: a rehearsal "
                                  "simulates the trace from the harness's times (gpu_validate.simulated_trace)",
}


def not_rehearsed() -> dict[str, str]:
    from normbench.device import NOT_REHEARSED

    return {**NOT_REHEARSED, **SCRIPT_NOT_REHEARSED}


# --- costs ----------------------------------------------------------------------------------------------------------

_WRITTEN = re.compile(r"^(\d+) records written, .* in (\d+(?:\.\d+)?)s$")
_RC = re.compile(r"^== (\S+) rc=(\d+) at (\d+) s$")


def costs_from_run(run_dir: Path) -> dict:
    """Per-group costs of the first H200 run (``bench-forced.log`` and the records' timestamps in ``run_dir``): the
    fixture this script's dry run reads until a run of it writes its own. A group (norm x backend x shape: its three
    passes) costs the time from the previous group's last record to its own last record (timestamps: 1 s); a norm's
    first group also holds the command's start, the memory check and the copy ceiling (the norm's wall time from the
    log minus its other groups)."""
    from normbench.records.store import iter_records

    lines = (run_dir / "bench-forced.log").read_text().splitlines()
    norms, walls = [], []
    for line in lines:
        m = _WRITTEN.match(line.strip())
        if m:
            walls.append((int(m.group(1)), float(m.group(2))))
        m = _RC.match(line.strip())
        if m:
            norms.append((m.group(1), int(m.group(2))))
    by_norm: dict[str, list] = {}
    for _, rec in iter_records(run_dir, kind="kernel"):
        by_norm.setdefault(rec["norm"]["name"], []).append(rec)
    out = {"source": f"{run_dir.relative_to(ROOT)}: bench-forced.log (each norm's wall time) and the records' "
                     "timestamps (each group's), made by scripts/gpu_window.py costs_from_run",
           "machine": None, "norms": {}, "groups": {}}
    from datetime import datetime

    def ts(rec):
        return datetime.strptime(rec["provenance"]["timestamp"], "%Y-%m-%dT%H:%M:%SZ").timestamp()

    for (name, rc), (n, wall) in zip(norms, walls):
        recs = sorted(by_norm[name], key=ts)
        out["machine"] = recs[0]["provenance"]["hardware"].get("gpu") or recs[0]["provenance"]["hardware_id"]
        last: dict[str, float] = {}
        order: list[str] = []
        for rec in recs:
            g = f"{name}/{rec['config']['backend']}/{rec['config']['shape_label']}"
            if g not in last:
                order.append(g)
            last[g] = ts(rec)
        out["norms"][name] = {"records": n, "wall_s": wall, "complete": rc == 0, "groups": len(order)}
        for prev, g in zip(order, order[1:]):
            out["groups"][g] = last[g] - last[prev]
        out["groups"][order[0]] = round(wall - (last[order[-1]] - last[order[0]]), 1)
    return out


class Costs:
    """Planned seconds per step, from a source it names: the fixture (the first H200 run) until ``--out`` holds a
    ``window.json`` with measured step and set costs, which then replace the fixture's, step by step."""

    def __init__(self, out: Path | None = None):
        self.fixture = json.loads(COSTS_FIXTURE.read_text())
        self.measured: dict = {}
        self.measured_sets: dict = {}
        self.measured_from = None
        state = out / "window.json" if out else None
        if state and state.exists():
            data = json.loads(state.read_text())
            self.measured = {k: v for k, v in (data.get("costs") or {}).items() if v is not None}
            self.measured_sets = data.get("set_costs") or {}
            self.measured_from = str(state)
        by_backend: dict[str, list] = {}
        for g, s in self.fixture["groups"].items():
            by_backend.setdefault(g.split("/")[1], []).append(s)
        self.backend_median = {b: statistics.median(v) for b, v in by_backend.items()}

    def group(self, norm: str, backend: str, shape: str) -> tuple[float, str]:
        key = f"{norm}/{backend}/{shape}"
        if key in self.fixture["groups"]:
            return float(self.fixture["groups"][key]), "fixture"
        return float(self.backend_median.get(backend, max(self.backend_median.values()))), "fixture (backend median)"

    def set_cost(self, norm: str, shape: str, backends) -> tuple[float, str]:
        """A head-to-head set (a norm's backends at one shape): the sum of its backends' group costs (it measures
        the same cases), or its measured wall time."""
        key = f"{norm}/{shape}"
        if key in self.measured_sets:
            return float(self.measured_sets[key]), "measured"
        got = [self.group(norm, b, shape) for b in backends]
        return sum(s for s, _ in got), ("fixture" if all(w == "fixture" for _, w in got) else "fixture (part median)")

    def step(self, name: str) -> tuple[float, str] | None:
        """A measured fixed step's seconds (env, gate, smoke, profiler) where a run of this script wrote one."""
        if name in self.measured:
            return float(self.measured[name]), f"measured ({self.measured_from})"
        return None


#: What the fixture cannot say, stated rather than guessed silently: the environment check (imports and
#: nvidia-smi), and the gate's check of tier 1's norms on CUDA with an empty Triton cache (issue #48: 45-70 s for
#: four norms, read from the first run's log times; no separate measurement exists), per norm.
ENV_S = 10.0
CHECK_S = 17.5


def tier1_sets(device: str = "cuda"):
    """Tier 1's head-to-head sets in the order this script measures them: the validation's slice first."""
    from normbench import campaign

    tier = campaign.plan_tiers(device)[0]
    cases = list(tier.cases) + [c for extra in tier.optional.values() for c in extra]
    sets: dict[tuple, list] = {}
    for c in cases:
        sets.setdefault((c.norm, c.shape.label), []).append(c)
    first = [k for k in sets if k[0] in VALIDATION_NORMS and k[1] in VALIDATION_SHAPES]
    return {k: sets[k] for k in first}, {k: v for k, v in sets.items() if k not in first}


def plan(out: Path | None = None, window_s: float = WINDOW_MIN * 60, call_limit_s: float = CALL_LIMIT_MIN * 60,
         device: str = "cuda") -> dict:
    """The window's plan: each step's planned seconds and cost source, which call runs it, whether the window reaches
    it. Tier 1's sets are placed one by one, a new call starting where a set would end past the call's stop."""
    costs = Costs(out)
    stop = stop_s(call_limit_s)
    from normbench import campaign

    slice_sets, rest_sets = tier1_sets(device)
    backends = lambda cases: sorted({c.backend for c in cases})  # noqa: E731
    steps = []

    def fixed(name, seconds, source):
        m = costs.step(name)
        steps.append({"step": name, "s": m[0] if m else seconds, "source": m[1] if m else source})

    fixed("env", ENV_S, "assumed: imports and nvidia-smi (not measured yet)")
    n_norms = len(campaign.TIER1_NORMS)
    fixed("gate", CHECK_S * n_norms, f"CHECK_S {CHECK_S:g} s x {n_norms} norms: issue #48's 45-70 s on an empty "
                                     "Triton cache (not measured yet)")
    smoke = sum(costs.group(n, b, s)[0] for n, b, s in
                {(c.norm, c.backend, c.shape.label) for c in campaign.smoke_cases(
                    [c for v in list(slice_sets.values()) + list(rest_sets.values()) for c in v])})
    fixed("smoke", smoke, "fixture: one group per backend at its smallest shape")
    for name, sets in (("harness", slice_sets), ("tier1", rest_sets)):
        if name == "tier1":
            prof = sum(costs.group(n, b, s)[0] for (n, s), cs in slice_sets.items() for b in backends(cs))
            fixed("profiler", prof, "fixture: one group's cost per profiled group (its build and warm-up; the "
                                    f"{gv.PROFILE_REPS} profiled calls are microseconds)")
        for (n, s), cs in sets.items():
            sec, src = costs.set_cost(n, s, backends(cs))
            steps.append({"step": name, "set": f"{n}/{s}", "s": sec, "source": src})
    models = campaign.plan_tiers(device)[3]
    mgroups = {(c.norm, c.shape.label) for c in models.cases}
    steps.append({"step": "models", "s": sum(costs.set_cost(n, s, ("eager", "compile", "triton"))[0]
                                             for n, s in mgroups),
                  "source": f"fixture backend medians x {len(mgroups)} sets (eager, compile, triton; more "
                            "backends where they import)"})
    # place the steps in calls: a call's fixed start (env, the gate cached on the same machine: env only), then
    # steps until one would end past the stop
    # the models tier is many small sets: what fits the call it starts in runs there, the rest in later calls
    call, t_call, total, i = 1, 0.0, 0.0, 0
    while i < len(steps):
        st = steps[i]
        if (t_call + st["s"] > stop and t_call > 0 and st["step"] not in ("env", "gate")
                and (st["step"] != "models" or t_call >= stop)):
            call += 1
            t_call = steps[0]["s"]  # the next call's environment check (the gate's verdicts are cached)
            total += steps[0]["s"]
        if st["step"] == "models" and t_call + st["s"] > stop:
            steps.insert(i + 1, dict(st, s=st["s"] - (stop - t_call)))
            st["s"] = stop - t_call
        t_call += st["s"]
        total += st["s"]
        st.update(call=call, end_in_call_s=round(t_call, 1), end_total_s=round(total, 1))
        i += 1
    budget = window_s - MACHINE_START_S
    for st in steps:
        start = st["end_total_s"] - st["s"]
        st["reached"] = "yes" if st["end_total_s"] <= budget else (
            f"partly ({budget - start:.0f} s)" if start < budget else "no")
    val_t1 = [st for st in steps if st["step"] != "models"]
    return {"window_s": window_s, "call_limit_s": call_limit_s, "stop_s": stop, "script_budget_s": budget,
            "steps": steps, "total_s": round(total, 1),
            "validation_and_tier1_s": val_t1[-1]["end_total_s"], "validation_and_tier1_calls": val_t1[-1]["call"],
            "sources": sorted({st["source"] for st in steps}),
            "cost_file": costs.measured_from or str(COSTS_FIXTURE.relative_to(ROOT))}


def stop_s(call_limit_s: float) -> float:
    """When a call stops its own work: ``STOP_S``, or 90 % of a shorter call limit."""
    return min(STOP_S, 0.9 * call_limit_s)


def plan_text(p: dict) -> str:
    lines = [f"gpu-window plan: window {p['window_s'] / 60:g} min, {p['call_limit_s'] / 60:g} min per call, each call "
             f"stops its work by {p['stop_s']:.0f} s; script wall time budget {p['script_budget_s']:.0f} s (the "
             f"window less {MACHINE_START_S:.0f} s for machine starts)",
             f"costs from: {p['cost_file']}",
             "| step | planned s | call | ends at (call / total) s | reached | cost source |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    folded: list[dict] = []
    for st in p["steps"]:  # a step's sets folded per call
        if folded and folded[-1]["step"] == st["step"] and folded[-1]["call"] == st["call"] and "set" in st:
            f = folded[-1]
            f["s"] += st["s"]
            f["sets"] += 1
            f.update(end_in_call_s=st["end_in_call_s"], end_total_s=st["end_total_s"], reached=st["reached"])
            f["sources"].add(st["source"])
        else:
            folded.append({**st, "sets": 1 if "set" in st else 0, "sources": {st["source"]}})
    for f in folded:
        name = f["step"] + (f" ({f['sets']} set{'s' if f['sets'] != 1 else ''})" if f["sets"] else "")
        lines.append(f"| {name} | {f['s']:.0f} | {f['call']} | {f['end_in_call_s']:.0f} / {f['end_total_s']:.0f} | "
                     f"{f['reached']} | {'; '.join(sorted(f['sources']))} |")
    lines.append(f"total {p['total_s']:.0f} s; validation and tier 1: {p['validation_and_tier1_s']:.0f} s in "
                 f"{p['validation_and_tier1_calls']} call(s) of at most {p['stop_s']:.0f} s")
    return "\n".join(lines)


# --- running ----------------------------------------------------------------------------------------------------------

class Window:
    """The state under ``--out`` (``window.json``), the report, and the per-call clock."""

    def __init__(self, out: Path, stop: float, rehearse: str | None):
        self.out, self.stop, self.rehearse = out, stop, rehearse
        self.t0 = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        # a call killed (SIGKILL) inside an atomic write leaves its temporary file, never a half-written one in
        # place: the next call removes them, so what comes back is the finished files alone
        self.stale = sorted(t.name for t in out.glob(".*.tmp") if t.is_file())
        for name in self.stale:
            (out / name).unlink(missing_ok=True)
        path = out / "window.json"
        self.state = json.loads(path.read_text()) if path.exists() else {}
        self.state.setdefault("steps", {})
        self.state.setdefault("costs", {})
        self.state.setdefault("set_costs", {})
        self.state.setdefault("calls", [])
        self.state["calls"].append({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "rehearse": rehearse})
        self.rows: list[dict] = []
        self.problems: list[str] = []
        self.lines: list[str] = []
        table = out / "table.json"
        if table.exists():
            self.rows = json.loads(table.read_text()).get("rows", [])

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.stop - self.elapsed()

    def log(self, msg: str) -> None:
        line = f"[{self.elapsed():6.1f} s] {msg}"
        print(line, file=sys.stderr, flush=True)
        self.lines.append(line)

    def done(self, step: str, wall_s: float | None, **info) -> None:
        self.state["steps"][step] = {"done": True, **info}
        if wall_s is not None:
            self.state["costs"][step] = round(wall_s, 1)
        self.save()

    def save(self) -> None:
        from normbench.records.store import atomic_write_text

        self.state["calls"][-1]["wall_s"] = round(self.elapsed(), 1)
        atomic_write_text(self.out / "window.json", json.dumps(self.state, indent=1, default=str) + "\n")
        if self.rows:
            atomic_write_text(self.out / "table.json", json.dumps({"rows": self.rows}, indent=1) + "\n")
        atomic_write_text(self.out / "report.md", self.report())

    def report(self) -> str:
        st = self.state
        title = "# GPU window"
        if self.rehearse:
            title += f" rehearsal ({self.rehearse}, simulated device: nothing here is a GPU number)"
        out = [title,
               "", f"calls: {len(st['calls'])}; this call {self.elapsed():.0f} s of {self.stop:.0f} s", "",
               "## Steps", "", "| step | state | wall s | detail |", "| --- | --- | ---: | --- |"]
        for name in STEPS:
            s = st["steps"].get(name)
            if s is None:
                continue
            detail = "; ".join(f"{k} {v}" for k, v in s.items() if k not in ("done",))
            out.append(f"| {name} | {'done' if s.get('done') else 'not finished'} | "
                       f"{st['costs'].get(name, '—')} | {detail} |")
        out += ["", "## Validation: harness (tier 1's records) against the profiler", ""]
        if self.rows:
            if self.rehearse:
                out.append("The profiler's trace is simulated from the harness's own times (a host gap planted "
                           "where asked): it checks the plumbing, not the GPU.\n")
            out.append(gv.render(self.rows))
            verdicts: dict[str, int] = {}
            for r in self.rows:
                verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
            out.append("verdicts: " + ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items())))
        else:
            out.append("not reached yet")
        out += ["", "## Problems", ""] + ([f"- {p}" for p in self.problems] or ["none"])
        out += ["", "## Log (this call)", "", "```", *self.lines[-200:], "```", ""]
        return "\n".join(out)


def _env_check(w: Window, device: str) -> bool:
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # the image's Triton is part of what is checked
        info["triton"] = f"missing ({type(exc).__name__})"
    try:
        import jsonschema  # noqa: F401

        info["jsonschema"] = "ok"
    except ImportError:
        info["jsonschema"] = "missing: run scripts/gpu-wheels.sh and carry .whl"
    if device == "cpu":
        info["device"] = "cpu (the plumbing alone: CPU timing, no device seam)"
        ok = True
    else:
        from normbench import device as seam

        dev = seam.get()
        ok = seam.available()
        info["device"] = dev.describe() if ok else f"none: {dev.missing()}"
        if ok:
            clocks = dev.nvidia_smi("clocks.current.sm,clocks.max.sm,temperature.gpu")
            info["nvidia-smi"] = clocks.strip() if clocks else "none"
    w.log("env: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    return ok and info["jsonschema"] == "ok"


def _sets_plan(cases, number: int = 1):
    from normbench import campaign

    return {number: campaign.Tier(number, "gpu-window", cases=list(cases))}


def _campaign(w: Window, step: str, cases, number, settings, device, smoke=False) -> dict:
    """One campaign run over ``cases`` resumed from ``--out`` and packed there after every group, stopping so that a
    set started ends by the call's stop (the longest planned set is kept in reserve)."""
    from normbench import campaign

    reserve = w.reserve_s
    budget = max(0.0, w.left() - reserve)
    t0 = time.monotonic()
    resume = [w.out] if list(w.out.glob("records-*.json.gz")) else []
    seen = {"groups": 0}

    def on_group(entry):
        g = entry["groups"][-1] if entry["groups"] else None
        seen["groups"] += 1
        if g and step in ("harness", "tier1"):
            parts = g["group"].split("/")  # norm/backend(s)/shape/dtype
            w.state["set_costs"][f"{parts[0]}/{parts[2]}"] = g["wall_s"]
        w.state["steps"][step] = {"done": False, "records": entry["records"], "groups": seen["groups"]}
        w.save()

    with tempfile.TemporaryDirectory(prefix="gpu-window-work-") as work:
        entry = campaign.run((number,) if not smoke else (), out=w.out, work=work, resume=resume, budget_s=budget,
                             log=w.log, smoke=smoke, device=device, plan=_sets_plan(cases, number),
                             settings=settings, on_group=on_group)
    w.problems += [f"{step}: {p}" for p in entry.get("problems", [])]
    finished = not entry.get("interrupted") and not any(
        t.get("out_of_time") for t in entry.get("tiers", {}).values())
    if finished:
        w.done(step, time.monotonic() - t0, records=entry["records"])
    else:
        w.state["steps"][step] = {"done": False, "records": entry["records"], "why": "out of this call's time"}
        w.save()
    return entry


def _profile(w: Window, cases, plant_gap: float) -> None:
    """The validation's second half: each validated (norm, backend, shape) under the profiler (simulated in a
    rehearsal), compared with the harness's records under ``--out``."""
    from normbench import campaign

    records = campaign.unpack([w.out])
    harness = gv.harness_rows(records)
    keys = sorted({(c.norm, c.backend, c.shape.label) for c in cases}, key=lambda k: gv.PROFILE_ORDER.index(k[1])
                  if k[1] in gv.PROFILE_ORDER else 99)
    rows = {(r["norm"], r["backend"], r["shape"], r["pass"]): r for r in w.rows}
    passes = [p for p in gv.PASSES if any(c.pass_ == p for c in cases)]
    t0 = time.monotonic()
    for n, b, s in keys:
        if all((n, b, s, p) in rows and rows[(n, b, s, p)].get("profiler_s") is not None for p in passes):
            continue  # profiled by an earlier call
        if w.left() <= 10:
            w.log("profiler: out of this call's time; the next call goes on")
            w.state["steps"]["profiler"] = {"done": False, "why": "out of this call's time"}
            w.save()
            return
        if w.rehearse:
            got = {}
            for p in passes:
                h = harness.get((n, b, s, p), {}).get("harness_s")
                if h is None:
                    got[p] = "no harness record"
                    continue
                reps = gv.repetitions(gv.simulated_trace([h] * gv.PROFILE_REPS, gap_s=plant_gap * h))
                got[p] = (*gv.kernel_time(reps), gv.counted(reps))
        else:
            try:
                got = gv.profile_group(n, b, s)
            except Exception as exc:  # a failing build: said in its rows
                got = dict.fromkeys(passes, f"{type(exc).__name__}: {str(exc)[:120]}")
        for p in passes:
            row = {"norm": n, "backend": b, "shape": s, "pass": p, "dtype": cases[0].dtype,
                   **harness.get((n, b, s, p), {})}
            res = got.get(p)
            if isinstance(res, str):
                row["why"] = res
            elif res is None:
                row["why"] = "no spin-delimited repetition in the trace"
            else:
                row["profiler_s"], row["kernels"] = res[:2]
                row["counted"] = res[2] if len(res) > 2 else None
            row.pop("flags", None)
            row["verdict"] = gv.verdict(row)
            rows[(n, b, s, p)] = row
        w.rows = list(rows.values())
        w.save()
    bad = [r for r in w.rows if r["verdict"] != "ok"]
    if bad:
        w.problems.append(f"validation: {len(bad)} of {len(w.rows)} row(s) not ok: "
                          + ", ".join(f"{r['norm']}/{r['backend']}/{r['shape']}/{r['pass']} {r['verdict']}"
                                      for r in bad[:8]))
    w.done("profiler", time.monotonic() - t0, rows=len(w.rows), not_ok=len(bad))


def rehearsal_cases(device: str = "cuda"):
    """The rehearsal's reduced tier 1, on device "cuda" (the simulated device runs it on CPU tensors): the
    validation's slice (``REHEARSAL_NORMS`` at the first shape), then one more set (RMSNorm at the second)."""
    from normbench import campaign

    slice_ = campaign._cases(REHEARSAL_NORMS, REHEARSAL_SHAPES[:1], ("float32",), REHEARSAL_BACKENDS, device)
    rest = campaign._cases(REHEARSAL_NORMS[:1], REHEARSAL_SHAPES[1:], ("float32",), REHEARSAL_BACKENDS, device)
    return [c for c in slice_ + rest if c.pass_ in REHEARSAL_PASSES]


def case_name(case) -> str:
    """What ``--cases`` matches: ``norm/backend/shape/pass``."""
    return f"{case.norm}/{case.backend}/{case.shape.label}/{case.pass_}"


def window_cases(out: Path | None, rehearse: str | None, device: str = "cuda", models: bool = True,
                 validation_only: bool = False, only: str | None = None):
    """What a call measures: ``(validation slice, the rest of tier 1, the models tier, timer settings, reserve_s)``;
    ``reserve_s``, the longest planned set: no set starts later than that before the call's stop. ``only``: a glob
    (``fnmatch``) on :func:`case_name`, keeping the plan's matching cases (ValueError where none matches)."""
    from normbench import campaign

    if rehearse:
        from normbench.measure.timers import TimerSettings

        settings = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
        t1 = rehearsal_cases(device)
        slice_cases = [c for c in t1 if c.shape.label == t1[0].shape.label]
        rest = [c for c in t1 if c not in slice_cases]
        model_cases: list = []
        reserve = 5.0
    else:
        settings = None  # the campaign's own (CAMPAIGN_SETTINGS)
        slice_sets, rest_sets = tier1_sets(device)
        slice_cases = [c for v in slice_sets.values() for c in v]
        rest = [c for v in rest_sets.values() for c in v]
        model_cases = list(campaign.plan_tiers(device)[3].cases) if models else []
        costs = Costs(out)
        every = {**slice_sets, **rest_sets}
        reserve = max(costs.set_cost(n, s, sorted({c.backend for c in v}))[0] for (n, s), v in every.items())
    if validation_only:
        rest, model_cases = [], []
    if only:
        from fnmatch import fnmatchcase

        keep = lambda cases: [c for c in cases if fnmatchcase(case_name(c), only)]  # noqa: E731
        every = slice_cases + rest + model_cases
        slice_cases, rest, model_cases = keep(slice_cases), keep(rest), keep(model_cases)
        if not slice_cases + rest + model_cases:
            raise ValueError(f"--cases {only!r} matches none of the plan's {len(every)} cases "
                             f"(norm/backend/shape/pass, e.g. {case_name(every[0]) if every else 'none planned'})")
    return slice_cases, rest, model_cases, settings, reserve


def run_window(out: Path, call_limit_s: float = CALL_LIMIT_MIN * 60, rehearse: str | None = None,
               plant_gap: float = 0.0, models: bool = True, device: str = "cuda",
               validation_only: bool = False, only: str | None = None) -> int:
    from normbench import campaign

    stop = stop_s(call_limit_s)
    if rehearse:
        os.environ[REHEARSE_ENV] = rehearse
        os.environ.setdefault("TRITON_INTERPRET", "1")
    w = Window(out, stop, rehearse)
    if w.stale:
        w.log(f"removed {len(w.stale)} temporary file(s) a killed call left: {', '.join(w.stale)}")
    if not _env_check(w, device):
        w.problems.append("env: no CUDA device or no jsonschema here (see the log)")
        w.save()
        return 2
    w.done("env", w.elapsed())
    try:
        slice_cases, rest, model_cases, settings, w.reserve_s = window_cases(out, rehearse, device, models,
                                                                             validation_only, only)
    except ValueError as exc:
        w.log(f"PROBLEM: {exc}")
        w.problems.append(f"plan: {exc}")
        w.save()
        return 1
    # the gate: tier 1's (norm, backend) pairs on this device, checked (the campaign's gate, cached for its steps)
    t0 = time.monotonic()
    with _quiet_stdout():
        kept, refused, _, left_out = campaign._gate(slice_cases + rest, w.log)
    gate_ok = not refused and bool(kept)
    w.done("gate", time.monotonic() - t0, passed=gate_ok, refused=len(refused), left_out=len(left_out))
    if not gate_ok:
        w.problems.append(f"gate: {len(refused)} (norm, backend) refused on {device}: "
                          + ", ".join(f"{r['norm']}/{r['backend']}: {r['detail']}" for r in refused[:6]))
        w.save()
        return 1
    if not w.state["steps"].get("smoke", {}).get("done"):
        _campaign(w, "smoke", slice_cases + rest, 1, settings, device, smoke=True)
    for step, cases, number in (("harness", slice_cases, 1), ("profiler", slice_cases, None), ("tier1", rest, 1),
                                ("models", model_cases, campaign.MODELS_TIER)):
        if w.state["steps"].get(step, {}).get("done") or not cases:
            continue
        if w.left() <= w.reserve_s:
            w.log(f"{step}: not started, out of this call's time (stop at {w.stop:.0f} s): run again to go on")
            break
        w.log(f"{step}: starting ({len(cases)} case(s))")
        if step == "profiler":
            _profile(w, cases, plant_gap)
        else:
            _campaign(w, step, cases, number, settings, device)
        if not w.state["steps"].get(step, {}).get("done"):
            break
    w.save()
    remaining = [s for s in ("smoke", "harness", "profiler") + (("tier1",) if rest else ())
                 + (("models",) if model_cases else ()) if not w.state["steps"].get(s, {}).get("done")]
    w.log(f"call done in {w.elapsed():.0f} s; {'steps left: ' + ', '.join(remaining) if remaining else 'all done'}; "
          f"{len(w.problems)} problem(s)")
    w.save()
    if w.problems:
        return 1
    return 3 if remaining else 0


class _quiet_stdout:
    """The gate prints its progress on stdout; this script keeps stdout for its own summary."""

    def __enter__(self):
        self.old = sys.stdout
        sys.stdout = sys.stderr

    def __exit__(self, *exc):
        sys.stdout = self.old


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "window-out"))
    ap.add_argument("--window", type=float, default=WINDOW_MIN, help="the window's minutes, machine start included")
    ap.add_argument("--call-limit", type=float, default=CALL_LIMIT_MIN, help="one command's minutes")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, its costs and their source; run nothing")
    ap.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    ap.add_argument("--rehearse", nargs="?", const="normal", choices=REHEARSAL_SCENARIOS,
                    help="run on the CPU with the simulated device (scenario; default normal), reduced plan")
    ap.add_argument("--plant-host-gap", type=float, default=0.0, metavar="FRACTION",
                    help="rehearsal: this fraction of each call (0..1) is a host gap in the simulated profiler trace "
                         "(the GPU idle, the events running)")
    ap.add_argument("--no-models", action="store_true", help="stop after tier 1")
    ap.add_argument("--validation-only", action="store_true",
                    help="stop after the validation (env, gate, smoke, harness, profiler): a quick check of a GPU")
    ap.add_argument("--cases", metavar="GLOB",
                    help="only the plan's cases whose norm/backend/shape/pass matches GLOB (e.g. "
                         "'rmsnorm/eager/*/fwd'): a check of a few cases")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="with --rehearse: cpu runs the plumbing alone (campaign, packing, report) with CPU timing, "
                         "without the simulated device")
    args = ap.parse_args(argv)
    if args.dry_run:
        p = plan(args.out if args.out.exists() else None, args.window * 60, args.call_limit * 60)
        print(json.dumps(p, indent=1) if args.json else plan_text(p))
        return 0
    if args.plant_host_gap and not args.rehearse:
        ap.error("--plant-host-gap is for --rehearse")
    if not 0.0 <= args.plant_host_gap < 1.0:
        ap.error("--plant-host-gap is a fraction of each call, 0 <= FRACTION < 1")
    from normbench.processes import interruptible

    try:
        with interruptible(program=argv is None):
            return run_window(args.out, args.call_limit * 60, args.rehearse, args.plant_host_gap,
                              models=not args.no_models, device=args.device,
                              validation_only=args.validation_only, only=args.cases)
    except KeyboardInterrupt:
        print("gpu-window: interrupted; what finished is under --out (run again to go on)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
