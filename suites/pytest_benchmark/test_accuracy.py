"""pytest-benchmark accuracy suite: per norm x task, the cell trained once through ``normbench.train.run`` (quick
budget, seed 0) and its training step benchmarked; grouped by task.

``extra_info`` carries the final metric, the tracked value (perplexity, or top-1 error in percent: larger is worse),
divergence, the recipe hash, the data description and the record id. Grid: ``NORMBENCH_PYTEST_TASKS``,
``NORMBENCH_PYTEST_NORMS``, ``NORMBENCH_PYTEST_DATA_DIR`` (see ``normbench.accuracy_suite``). ``--normbench-out DIR``
keeps the accuracy records there. ``--benchmark-disable`` runs each cell as a smoke test (the step once).
"""

from __future__ import annotations

import pytest
import torch

from normbench import accuracy_suite as suites

PREFIX = "NORMBENCH_PYTEST"


def pytest_generate_tests(metafunc):
    if "nb_cell" not in metafunc.fixturenames:
        return
    norms, cells = suites.accuracy_grid(env_prefix=PREFIX)
    params = [pytest.param((norm, cell), id=f"{norm}-{cell}", marks=pytest.mark.benchmark(group=f"accuracy {cell}"))
              for cell in cells for norm in norms]
    metafunc.parametrize("nb_cell", params)


@pytest.fixture(scope="session")
def nb_accuracy_out(request, tmp_path_factory):
    return request.config.getoption("--normbench-out") or str(tmp_path_factory.mktemp("accuracy-records"))


@pytest.fixture(scope="session")
def nb_step_data():
    """Each task's data, loaded once for every step benchmark of the session."""
    return {}


def test_accuracy(benchmark, nb_cell, nb_accuracy_out, nb_step_data):
    norm, cell = nb_cell
    reason = suites.why_not(norm, cell)
    if reason:
        pytest.skip(reason)
    data_dir = suites.data_dir(PREFIX)
    trained = suites.train_cells([[norm], [cell]], nb_accuracy_out, env_prefix=PREFIX, data_dir=data_dir, jobs=1)
    key = suites.cell_key(norm, cell)
    if key not in trained["results"]:
        pytest.skip(trained["skipped"].get(key, "not trained"))
    result = trained["results"][key]
    task = suites.Cell.parse(cell).task
    if task not in nb_step_data:
        nb_step_data.update(suites.load_step_data([[norm], [cell]], data_dir)["data"])
    threads = torch.get_num_threads()
    try:  # the step runs as training does, on one thread; the session's setting is restored after
        bench = suites.step_bench({"data": nb_step_data}, norm, cell, data_dir)
        benchmark(bench.step)
    finally:
        torch.set_num_threads(threads)
    benchmark.extra_info.update({
        "norm": norm, "task": result["task"], "model": result["model"], "placement": result["placement"],
        "metric": result["metric"], "final": result["final"], "tracked": result["tracked"],
        "tracked_unit": result["tracked_unit"], "diverged": bool(result["diverged"]),
        "diverged_step": result["diverged_step"], "recipe_hash": result["recipe_hash"], "quick": result["quick"],
        "data": result["data"], "record_id": result["record_id"], "train_wall_time_s": result["wall_time_s"],
        "flags": result["flags"]})
