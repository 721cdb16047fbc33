"""Tests of the ASV and pytest-benchmark suites' parametrisation and of ingesting ASV results, on the CPU."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import normbench
from normbench import results
from normbench.measure import asv_ingest, group, suite
from normbench.measure.timers import TimerSettings

REPO = Path(__file__).resolve().parents[1]


def _load_asv_suite(monkeypatch, tmp_path, **env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(suite.SIDECAR_ENV, str(tmp_path / "sidecar"))
    spec = importlib.util.spec_from_file_location("nb_asv_kernels", REPO / "suites" / "asv" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_grids():
    norms, backends, shapes, dtypes, passes = suite.grid("small")
    assert set(suite.SMALL_NORMS) <= set(norms) and backends == ["eager"] and passes == ["fwd+bwd"]
    plugins = [n for n in normbench.list_norms() if normbench.get_norm(n).package != "normbench"]
    assert set(plugins) <= set(norms)  # installed plugin norms are always swept
    norms, backends, shapes, dtypes, passes = suite.grid("full")
    layer_norms = [n for n in normbench.list_norms() if normbench.get_norm(n).kind != "softmax"]  # own grid
    assert norms == layer_norms
    assert {"eager", "compile", "triton", "liger", "apex"} <= set(backends)
    assert {"llm-4096x4096", "resnet50-s1", "vit-b16"} <= set(shapes)
    assert set(passes) == {"fwd", "bwd", "fwd+bwd"}
    assert suite.grid("quick")[0] == layer_norms
    assert suite.grid("small", norms="dyt,groupnorm")[0] == ["dyt", "groupnorm"]
    with pytest.raises(ValueError, match="must be one of small, quick, full"):
        suite.grid("huge")


def test_case_for_explains_what_cannot_run():
    with pytest.raises(suite.Unsupported, match="layout"):
        suite.case_for("add_rmsnorm", "eager", "quick-8x32x32x32", "float32", "fwd", harness="asv")
    with pytest.raises(suite.Unsupported, match="no backend"):
        suite.case_for("batchnorm", "triton", "quick-8x128x512", "float32", "fwd", harness="asv")
    case = suite.case_for("dyt", "eager", "quick-8x128x512", "float32", "bwd", harness="asv")
    assert case.harness == "asv" and case.shape.dims == (8, 128, 512)


def test_asv_suite_parametrisation_and_skips(monkeypatch, tmp_path):
    mod = _load_asv_suite(monkeypatch, tmp_path, NORMBENCH_ASV_GRID="full")
    assert mod.Kernel.params == suite.grid("full") == mod.Metrics.params
    assert mod.Kernel.param_names == ["norm", "backend", "shape", "dtype", "pass"]
    for name in ("time_kernel", "peakmem_kernel"):
        assert callable(getattr(mod.Kernel, name))
    for name in ("track_gbps", "track_pct_of_ceiling", "track_peak_mem_above_inputs"):
        assert callable(getattr(mod.Metrics, name)) and getattr(mod.Metrics, name).unit
    k = mod.Kernel()
    with pytest.raises(NotImplementedError, match="layout"):
        k.setup({}, "add_rmsnorm", "eager", "quick-8x32x32x32", "float32", "fwd")
    if normbench.get_norm("rmsnorm").backend_unavailable("triton"):
        with pytest.raises(NotImplementedError, match="triton unavailable"):
            k.setup({}, "rmsnorm", "triton", "quick-8x128x512", "float32", "fwd")
    m = mod.Metrics()
    with pytest.raises(NotImplementedError, match="why not"):
        m.setup({"results": {}, "skipped": {"dyt|eager|quick-8x128x512|float32|fwd": "why not"}},
                "dyt", "eager", "quick-8x128x512", "float32", "fwd")
    mod = _load_asv_suite(monkeypatch, tmp_path, NORMBENCH_ASV_GRID="small")
    assert len(list(itertools.product(*mod.Kernel.params))) <= 3 * 2 * len(mod.Kernel.params[0])


def test_asv_kernel_benchmark_runs(monkeypatch, tmp_path):
    mod = _load_asv_suite(monkeypatch, tmp_path)
    k = mod.Kernel()
    k.setup({}, "rmsnorm", "eager", "quick-8x128x512", "float32", "bwd")
    k.time_kernel({}, "rmsnorm", "eager", "quick-8x128x512", "float32", "bwd")


def _asv_result_file(path: Path, combos, times, commit="abc"):
    """A result file in ASV's v2 format (as asv 0.6 writes it), for a Kernel.time_kernel run."""
    params = [[repr(v) for v in dict.fromkeys(col)] for col in zip(*combos)]
    row = [list(times), params, "v", 0, 1.0, None, None, [t * 0.9 for t in times], [t * 1.1 for t in times],
           [1] * len(times), [10] * len(times), None, None]
    data = {"commit_hash": commit, "env_name": "existing-py", "date": 0, "params": {"machine": "testbox"},
            "python": "3.11", "requirements": {}, "env_vars": {},
            "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                               "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
                               "samples", "profile"],
            "results": {asv_ingest.TIME_BENCH: row}, "durations": {}, "version": 2}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_ingest_asv_with_and_without_core_records(monkeypatch, tmp_path):
    sidecar = tmp_path / "normbench"
    monkeypatch.setenv(suite.SIDECAR_ENV, str(sidecar))
    ctx = group.Context(50.0, "test ceiling", results.provenance(command="asv run", device="cpu"),
                        TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0))
    suite.write_machine_sidecar(ctx)
    # what the suite's setup records while ASV runs commit abc in environment existing-py
    monkeypatch.setenv("ASV_COMMIT", "abc")
    monkeypatch.setenv("ASV_ENV_NAME", "existing-py")
    suite.write_impl_sidecar([["rmsnorm", "layernorm"], ["eager", "compile"]])
    # one parameter set also measured by the core (as the Metrics benchmarks do), one only timed by ASV
    measured = suite.case_for("rmsnorm", "eager", "quick-8x128x512", "float32", "fwd", harness="asv")
    results.write_records(group.measure_group([measured], ctx), sidecar / "records")
    combos = [("rmsnorm", "eager", "quick-8x128x512", "float32", "fwd"),
              ("rmsnorm", "eager", "quick-8x128x512", "float32", "fwd+bwd")]
    asv_dir = tmp_path / "results"
    _asv_result_file(asv_dir / "testbox" / "abc-existing.json", combos, [0.002, 0.004])
    (asv_dir / "testbox" / "machine.json").write_text("{}")
    out = tmp_path / "out"
    n, problems = asv_ingest.ingest(asv_dir, sidecar=sidecar, out=out)
    assert n == 2 and problems == []
    assert results.load_report(out) == []
    df = results.load(out, kind="kernel").set_index("pass")
    assert (df["harness"] == "asv").all()
    core_rec = df.loc["fwd"]
    assert core_rec["asv_time_median_s"] == 0.002 and core_rec["err_y_max_abs"] is not None
    asv_only = df.loc["fwd+bwd"]
    assert asv_only["time_median_s"] == 0.004 and asv_only["timing"] == "hot"
    assert asv_only["hw_cpu"] == ctx.provenance["hardware"]["cpu"]
    # case_for ran rmsnorm's contract check (the gate); the ASV-only record carries that verdict, unflagged
    from normbench.records.store import iter_records

    raw = {r["config"]["pass"]: r for _, r in iter_records(out, kind="kernel")}
    assert raw["fwd+bwd"]["check"]["status"] == "passed" and raw["fwd+bwd"]["flags"] == []
    assert raw["fwd+bwd"]["check"]["impl_hash"] == normbench.get_norm("rmsnorm").impl_hash("eager")
    # both carry the implementation hash of the code ASV ran (not "" = unknown)
    assert {r["impl_hash"] for r in raw.values()} == {normbench.get_norm("rmsnorm").impl_hash("eager")}

    # A second commit whose rmsnorm differs (as asv continuous runs two): its timing gets that commit's hash and is
    # never attached to the first commit's core record.
    other = "0123456789abcdef"
    (sidecar / "impl" / "def-existing-py.json").write_text(json.dumps({"hashes": {"rmsnorm|eager": other}}))
    _asv_result_file(asv_dir / "testbox" / "def-existing.json", combos[:1], [0.003], commit="def")
    out2 = tmp_path / "out2"
    n, problems = asv_ingest.ingest(asv_dir, sidecar=sidecar, out=out2)
    assert n == 3 and problems == []
    by_hash = {(r["impl_hash"], r["config"]["pass"]): r for _, r in iter_records(out2, kind="kernel")}
    assert by_hash[(other, "fwd")]["metrics"]["time_median_s"] == 0.003
    assert by_hash[(other, "fwd")]["metrics"]["err"]["y"] is None  # ASV's timing alone, not abc's core record

    # A run the suite recorded nothing for: said, and the records say "unknown"
    _asv_result_file(asv_dir / "testbox" / "ghi-existing.json", combos[:1], [0.005], commit="ghi")
    n, problems = asv_ingest.ingest(asv_dir, sidecar=sidecar, out=tmp_path / "out3")
    assert n == 4 and len(problems) == 1 and "ghi-existing.json" in problems[0] and "impl_hash" in problems[0]
    assert "" in {r["impl_hash"] for _, r in iter_records(tmp_path / "out3", kind="kernel")}
    with pytest.raises(FileNotFoundError, match="asv run"):
        asv_ingest.ingest(tmp_path / "nowhere", out=out)


def test_pytest_benchmark_suite_collects_grouped_by_norm(tmp_path):
    env = dict(os.environ, NORMBENCH_PYTEST_GRID="quick", NORMBENCH_PYTEST_NORMS="layernorm,add_rmsnorm")
    out = subprocess.run([sys.executable, "-m", "pytest", "suites/pytest_benchmark", "--collect-only", "-q",
                          "-p", "no:randomly"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line for line in out.stdout.splitlines() if "test_kernel[" in line]
    assert "suites/pytest_benchmark/test_kernels.py::test_kernel[layernorm-compile-quick-8x32x32x32-bfloat16-fwd]" \
        in ids
    assert len(ids) == 2 * 2 * 2 * 2 * 2  # norms x backends x shapes x dtypes x passes


def test_default_pytest_run_does_not_collect_the_suites():
    text = (REPO / "pyproject.toml").read_text()
    assert 'testpaths = ["tests"]' in text
