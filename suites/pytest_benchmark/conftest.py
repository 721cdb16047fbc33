"""pytest-benchmark suite set-up: the parameter grid, a CUDA-synchronising timer and GPU fields in machine_info.

Run: ``pytest suites/pytest_benchmark --benchmark-json=bench.json`` (grid: ``NORMBENCH_PYTEST_GRID`` = small,
quick or full; ``NORMBENCH_PYTEST_NORMS`` = comma-separated norms). ``--normbench-out results`` also writes each
measurement as a normbench kernel record (harness ``pytest-benchmark``).
"""

from __future__ import annotations

import itertools

import pytest

from normbench.measure import kernel_suite as suite


def pytest_addoption(parser):
    parser.addoption("--normbench-out", default=None, metavar="DIR",
                     help="also write normbench kernel records (harness pytest-benchmark) under DIR")


def pytest_benchmark_update_machine_info(config, machine_info):
    # pytest-benchmark's machine_info describes the CPU only; add what a GPU result needs.
    from normbench.records.provenance import provenance

    prov = provenance(command="pytest suites/pytest_benchmark")
    machine_info["normbench"] = {
        "hardware": prov["hardware"],
        "hardware_id": prov["hardware_id"],
        "torch": prov["torch"],
        "triton": prov["triton"],
        "normbench_version": prov["normbench_version"],
        "git_commit": prov["git_commit"],
        "plugins": prov["plugins"],
    }
    for key in ("gpu", "gpu_memory_gb", "driver", "cuda"):
        machine_info[key] = prov["hardware"][key]


def pytest_generate_tests(metafunc):
    if "nb_params" not in metafunc.fixturenames:
        return
    grid = suite.grid(env_prefix="NORMBENCH_PYTEST")
    params = [
        pytest.param(combo, id="-".join(combo), marks=pytest.mark.benchmark(group=combo[0], timer=suite.sync_timer))
        for combo in itertools.product(*grid)
    ]
    metafunc.parametrize("nb_params", params)


@pytest.fixture(scope="session")
def nb_context():
    """Ceiling and provenance, measured once per session (only when a benchmark runs)."""
    from normbench.measure.group import make_context
    from normbench.measure.planning import default_device

    return make_context(default_device(), command=["pytest", "suites/pytest_benchmark"])
