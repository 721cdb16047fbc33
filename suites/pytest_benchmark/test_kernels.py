"""pytest-benchmark suite: one benchmark per norm x backend x shape x dtype x pass, grouped by norm."""

from __future__ import annotations

import pytest

from normbench.measure import kernel_suite as suite


def test_kernel(benchmark, nb_params, nb_context, request):
    try:
        case = suite.case_for(*nb_params, harness="pytest-benchmark")
        prep, fn, pre, sync = suite.prepare(case)
    except suite.Unsupported as exc:
        pytest.skip(str(exc))
    if pre is None:
        benchmark(fn)
    else:  # bwd: the forward that builds the graph runs untimed before every round
        benchmark.pedantic(fn, setup=pre, rounds=20, warmup_rounds=1)
    if benchmark.disabled or benchmark.stats is None:
        return  # --benchmark-disable: the code ran once as a test; there are no timings to record
    info = suite.benchmark_extra_info(prep, case, nb_context, benchmark.stats.stats.data)
    benchmark.extra_info.update(info["extra_info"])
    out = request.config.getoption("--normbench-out")
    if out:
        from normbench.records import write_records

        write_records([info["record"]], out)
