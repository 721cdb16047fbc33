"""The validator of scripts/gpu_validate.py as the GPU window uses it (issue #48 item 6): it counts every kind of GPU
work between its spin markers (kernels, copies, fills) and says what it counted; the rehearsal's simulated trace
with a planted host gap does not read ``ok``."""

from __future__ import annotations

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_validate as gv  # noqa: E402

sys.path.pop(0)


def test_memcpy_and_memset_between_the_markers_are_counted():
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    ev = []
    t = 0.0
    for _ in range(3):
        for name, cat, dur in ((spin, "kernel", 200.0), ("row_kernel", "kernel", 10.0),
                               ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", 4.0),
                               ("Memset (Device)", "gpu_memset", 2.0), (spin, "kernel", 1.0)):
            ev.append({"ph": "X", "cat": cat, "name": name, "ts": t, "dur": dur})
            t += dur
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 205.0, "dur": 50.0})  # host side: not GPU work
    reps = gv.repetitions({"traceEvents": ev})
    assert len(reps) == 3
    s, n = gv.kernel_time(reps)
    assert s == pytest.approx(16e-6) and n == 3
    assert gv.counted(reps) == "1 kernel + 1 gpu_memcpy + 1 gpu_memset"
    assert gv.counted([]) == "nothing"


def test_simulated_trace_agrees_without_a_gap_and_not_with_one():
    harness = 120e-6
    reps = gv.repetitions(gv.simulated_trace([harness] * 5))
    s, n = gv.kernel_time(reps)
    assert s == pytest.approx(harness) and gv.counted(reps) == "1 kernel + 1 gpu_memcpy"
    row = {"harness_s": harness, "profiler_s": s, "kernels": n, "host_bound": False}
    assert gv.verdict(row) == "ok"
    # a host gap of 30 µs inside each call: the events hold it, the GPU's work does not
    reps = gv.repetitions(gv.simulated_trace([harness] * 5, gap_s=30e-6))
    s, n = gv.kernel_time(reps)
    assert s == pytest.approx(90e-6)
    verdict = gv.verdict({"harness_s": harness, "profiler_s": s, "kernels": n, "host_bound": False})
    assert verdict in ("DIFF", "HOST_BOUND")


def test_the_table_says_what_was_counted():
    row = {"norm": "rmsnorm", "backend": "triton", "shape": "llm-4096x1024", "pass": "fwd", "harness_s": 1e-4,
           "host_s": 2e-5, "profiler_s": 1e-4, "kernels": 2, "counted": "1 kernel + 1 gpu_memcpy", "verdict": "ok"}
    assert "| 1 kernel + 1 gpu_memcpy |" in gv.render([row])
    assert "GPU work counted" in gv.render([row])
