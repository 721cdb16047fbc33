"""The Triton backend's host path per call, counted with its launches stubbed (scripts/triton_host.py --counts).

Counts, not times: after warm-up a call asks no device property, imports nothing, runs no autotuner, heuristics or
Triton JIT dispatch (the stub launcher takes the launches), reuses its launch plan (the very same launch parameters
object), and runs at most ``MAX_ATEN`` ATen ops (TorchDispatchMode). Host time against the floor module is a
benchmark (``scripts/triton_host.py --bench``), never a test. It runs in a fresh process: Triton is imported there
for the compiler (autotuning on, as on a GPU), which the interpreter tests in this session must not see.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("triton")

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import triton_host  # noqa: E402

sys.path.pop(0)


@pytest.fixture(scope="module")
def report():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "triton_host.py"), "--counts", "--json"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


CASES = [f"{n} {'x'.join(map(str, s))}" for n, s, _, _ in triton_host.CASES]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("step", ["fwd", "bwd"])
def test_a_warm_call_does_no_setup_work(report, case, step):
    counts = report[case][step]
    for what in ("get_device_properties", "device_properties", "import_module", "autotuner", "heuristics",
                 "tune", "compile", "jit_run"):
        assert counts.get(what, 0) == 0, f"{case} {step}: {what} ran {counts[what]} time(s) after warm-up"
    assert counts["launch"] >= 1, f"{case} {step}: nothing was launched (is the stub launcher in the path?)"


@pytest.mark.parametrize("case", CASES)
def test_launch_parameters_are_cached_per_shape_dtype_device(report, case):
    assert report[case]["same_plan"], f"{case}: a warm call built its launch parameters again"


@pytest.mark.parametrize("case", CASES)
def test_aten_ops_per_call_are_bounded(report, case):
    fwd_max, bwd_max = triton_host.MAX_ATEN[case.split()[0]]
    assert report[case]["fwd"].get("aten", 0) <= fwd_max, report[case]["fwd"]
    assert report[case]["bwd"].get("aten", 0) <= bwd_max, report[case]["bwd"]


@pytest.mark.parametrize("case", CASES)
def test_an_inference_forward_allocates_its_outputs_and_nothing_else(report, case):
    """Under no_grad (decode) nothing is saved for a backward: the outputs are the only ATen ops (no statistics, no
    autograd detach of a saved output)."""
    assert report[case]["infer"].get("aten", 0) <= report[case]["n_out"], report[case]["infer"]
    assert report[case]["infer"]["launch"] >= 1


def test_a_new_shape_gets_its_own_plan_and_the_old_one_stays(report):
    # rmsnorm forward is one autotuned kernel: one tuner run for the new shape, none on returning to the old one
    assert report["_plans"] == {"new_shape_tunes": 1, "old_shape_tunes": 0}
