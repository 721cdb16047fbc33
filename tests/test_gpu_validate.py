"""scripts/gpu_validate.py on the CPU: its dry run (the plan), and the table logic on synthetic profiler traces.

The trace is what ``torch.profiler`` exports (Chrome trace events, ``cat: kernel``, times in µs). Each repetition is
pre, flush, spin, call, spin; the call's kernels are those between a pair of spins, whatever their names (a
``torch.zeros`` inside the call is a fill kernel like the flush) and whichever thread launched them (backward).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_validate as gv  # noqa: E402

sys.path.pop(0)

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def _trace(reps):
    """Chrome-trace events for ``reps``: per repetition a list of (name, µs) of the call's kernels; the flush and
    the spins around each call are added, with the backward's kernels on another thread id (autograd's)."""
    ev, t = [], 0.0

    def k(name, dur, tid=1):
        nonlocal t
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": t, "dur": dur, "tid": tid, "pid": 0})
        t += dur + 0.5

    for call in reps:
        k("forward_for_pre_kernel", 30.0)       # pre: the forward the timed backward needs (not timed)
        k(FILL, 60.0)                            # the L2 flush
        k(SPIN, 200.0)
        for name, dur in call:
            k(name, dur, tid=7)
        k(SPIN, 1.0)
    # CPU-side events and a memcpy are not kernels
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 1.0, "dur": 3.0})
    ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 2.0, "dur": 3.0})
    ev.reverse()  # the exporter's order is not the GPU's: sorting by start time is the parser's job
    return {"traceEvents": ev}


def test_repetitions_are_the_kernels_between_spin_pairs():
    trace = _trace([[("_row_bwd_kernel", 40.0), (FILL, 5.0), ("reduce_kernel", 3.0)]] * 4)
    reps = gv.repetitions(trace)
    assert len(reps) == 4
    assert [k["name"] for k in reps[0]] == ["_row_bwd_kernel", FILL, "reduce_kernel"]  # the call's own fill stays
    med, n = gv.kernel_time(reps)
    assert med == pytest.approx(48e-6) and n == 3


def test_median_over_repetitions():
    reps = gv.repetitions(_trace([[("k", d)] for d in (10.0, 30.0, 20.0, 1000.0, 25.0)]))
    assert gv.kernel_time(reps) == (pytest.approx(25e-6), 1)
    assert gv.kernel_time([]) is None


def test_tolerance_rule():
    # max(5 %, 2 µs x kernels): 5 % of 100 µs for one kernel; 2 µs x 4 = 8 µs beats 5 % of 100 µs
    assert gv.tolerance_s(100e-6, 1) == pytest.approx(5e-6)
    assert gv.tolerance_s(100e-6, 4) == pytest.approx(8e-6)
    row = {"harness_s": 104e-6, "profiler_s": 100e-6, "kernels": 1, "host_bound": False}
    assert gv.verdict(row) == "ok"
    assert gv.verdict({**row, "harness_s": 106e-6}) == "DIFF"
    assert gv.verdict({**row, "harness_s": 106e-6, "kernels": 4}) == "ok"
    assert gv.verdict({**row, "harness_s": 93e-6, "kernels": 4}) == "ok"
    assert gv.verdict({**row, "harness_s": 91e-6, "kernels": 4}) == "DIFF"
    assert gv.verdict({**row, "host_bound": True}) == "HOST_BOUND"
    assert gv.verdict({**row, "profiler_s": None}) == "MISSING"


def test_the_h200_failure_is_caught():
    """RMSNorm Triton fwd at 4096x1024 on the first H200 run: 255 µs in the harness for ~4 µs of kernel."""
    reps = gv.repetitions(_trace([[("_row_fwd_kernel", 4.2)]] * 5))
    prof, n = gv.kernel_time(reps)
    row = {"norm": "rmsnorm", "backend": "triton", "shape": "llm-4096x1024", "pass": "fwd", "harness_s": 255e-6,
           "host_s": 240e-6, "profiler_s": prof, "kernels": n, "host_bound": False}
    row["verdict"] = gv.verdict(row)
    assert row["verdict"] == "DIFF"
    table = gv.render([row])
    assert "| rmsnorm | triton | llm-4096x1024 | fwd | 255.0 | 240.0 | 4.2 | 1 |" in table and "DIFF" in table


def test_harness_rows_read_records():
    """Real records (the first H200 run's, read through the store's reader: ``norm`` is the spec, a dict)."""
    from normbench.records.store import iter_records

    recs = [rec for _, rec in iter_records(ROOT / "tests/fixtures/gpu-runs/2026-11-27-h200", kind="kernel")]
    assert len(recs) == 258 and all(isinstance(r["norm"], dict) for r in recs)
    rows = gv.harness_rows(recs)
    assert len(rows) == 258
    got = rows[("rmsnorm", "triton", "llm-4096x1024", "fwd")]
    rec = next(r for r in recs if (r["norm"]["name"], r["config"]["backend"], r["config"]["shape_label"],
                                   r["config"]["pass"]) == ("rmsnorm", "triton", "llm-4096x1024", "fwd"))
    assert got["harness_s"] == rec["metrics"]["time_median_s"] and got["flags"] == rec["flags"]
    assert not got["host_bound"]


def test_dry_run_lists_the_plan():
    out = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-validate.sh"), "--dry-run"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "check --device cuda layernorm rmsnorm dyt add_rmsnorm" in out.stdout
    assert "--backend eager compile triton liger" in out.stdout
    assert out.stdout.count("/bfloat16/") == 2 * 4 * 3 * 2
    assert len(gv.FILES) <= 6


def test_the_gate_covers_tier_1():
    from normbench.campaign import TIER1_NORMS

    assert gv.GATE_NORMS == tuple(TIER1_NORMS) == gv.gate_norms()


def _fake_run(monkeypatch, tmp_path, harness_s, gate_ok=True):
    """gpu_validate.main with its GPU steps replaced: the gate's verdict, the harness's rows, the profiler's."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(gv, "run_gate", lambda out, py, timeout: gate_ok)
    harness = {c: {"harness_s": harness_s(c), "host_s": 20e-6, "host_bound": False} for c in gv.cases()}
    monkeypatch.setattr(gv, "run_harness", lambda out, py, work, timeout: harness)
    order = []

    def profile_group(n, b, s):
        order.append(b)
        return {p: (100e-6, 2) for p in gv.PASSES}

    monkeypatch.setattr(gv, "profile_group", profile_group)
    rc = gv.main(["--out", str(tmp_path), "--budget-s", "600"])
    return rc, order


def test_main_agreeing_run_exits_zero(monkeypatch, tmp_path):
    rc, order = _fake_run(monkeypatch, tmp_path, lambda c: 103e-6)
    assert rc == 0
    assert order[0] == "triton" and order[-1] == "compile"  # the slow-to-build compile groups last
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) <= 6 and "table.md" in files and not [f for f in files if f.startswith(".")]
    table = (tmp_path / "table.md").read_text()
    assert table.count("| ok |") == len(gv.cases())


def test_main_one_difference_or_a_failed_gate_exits_non_zero(monkeypatch, tmp_path):
    bad = ("rmsnorm", "triton", "llm-4096x1024", "fwd")
    rc, _ = _fake_run(monkeypatch, tmp_path, lambda c: 255e-6 if c == bad else 100e-6)
    assert rc == 1
    rows = __import__("json").loads((tmp_path / "table.json").read_text())["rows"]
    assert [r for r in rows if r["verdict"] != "ok"] == [r for r in rows if (r["norm"], r["backend"], r["shape"],
                                                                             r["pass"]) == bad]
    rc, _ = _fake_run(monkeypatch, tmp_path, lambda c: 100e-6, gate_ok=False)
    assert rc == 1
