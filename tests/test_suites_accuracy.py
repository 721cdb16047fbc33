"""The accuracy benchmarks of the ASV and pytest-benchmark suites (``normbench.accuracy_suite``): grid, parametrisation,
the training step, and ``normbench ingest-asv`` turning ASV's accuracy results into records. On the CPU; no timing
is asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import normbench
from normbench import accuracy_suite as suites
from normbench import results
from normbench.measure import kernel_suite as suite
from normbench.records.store import iter_records

REPO = Path(__file__).resolve().parents[1]
GRID_ENV = ("NORMBENCH_ASV_TASKS", "NORMBENCH_ASV_NORMS", "NORMBENCH_ASV_DATA_DIR", "NORMBENCH_ASV_JOBS")


def _load_asv_accuracy(monkeypatch, tmp_path, **env):
    for key in GRID_ENV:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(suite.SIDECAR_ENV, str(tmp_path / "sidecar"))
    spec = importlib.util.spec_from_file_location("nb_asv_accuracy", REPO / "suites" / "asv" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_default_grid_and_what_selects_another(monkeypatch):
    for key in GRID_ENV:
        monkeypatch.delenv(key, raising=False)
    norms, cells = suites.accuracy_grid()
    plugins = [n for n in normbench.list_norms() if normbench.get_norm(n).package != "normbench"
               and normbench.get_norm(n).kind != "softmax"]
    assert norms == list(suites.ACCURACY_NORMS) + plugins  # installed plugin norms are always trained
    assert cells == ["synth-lm", "synth-shapes"]
    monkeypatch.setenv("NORMBENCH_ASV_TASKS", "synth-lm/gpt/post_ln, cifar10/vit")
    monkeypatch.setenv("NORMBENCH_ASV_NORMS", "rmsnorm,groupnorm")
    assert suites.accuracy_grid() == [["rmsnorm", "groupnorm"], ["synth-lm/gpt/post_ln", "cifar10/vit"]]
    assert suites.Cell.parse("synth-lm/gpt/post_ln") == suites.Cell("synth-lm", "gpt", "post_ln")
    assert suites.Cell.parse("cifar10") == suites.Cell("cifar10", "resnet", None)
    with pytest.raises(ValueError, match="trains"):
        suites.Cell.parse("synth-shapes/gpt")
    with pytest.raises(ValueError, match="placement is a GPT option"):
        suites.Cell.parse("synth-shapes/resnet/pre_ln")
    with pytest.raises(KeyError):
        suites.Cell.parse("no-such-task")
    # one class per metric; each holds only the norms its models can (no GroupNorm in the GPT)
    by_metric = suites.split_by_metric([["rmsnorm", "groupnorm"], ["synth-lm", "synth-shapes", "cifar10/vit"]])
    assert by_metric == {"perplexity": [["rmsnorm"], ["synth-lm"]],
                         "top1": [["rmsnorm", "groupnorm"], ["synth-shapes", "cifar10/vit"]]}


def test_tracked_values_are_larger_when_worse():
    assert suites.tracked_value({"final": 4.8, "higher_is_better": False}) == 4.8  # perplexity
    assert suites.tracked_value({"final": 0.56, "higher_is_better": True}) == 44.0  # top-1 error, percent
    assert math.isnan(suites.tracked_value({"final": None, "higher_is_better": False}))  # diverged


def test_asv_accuracy_suite_parametrisation_and_skips(monkeypatch, tmp_path):
    mod = _load_asv_accuracy(monkeypatch, tmp_path)
    assert mod.TextTasks.params == [["layernorm", "rmsnorm", "dyt", "batchnorm", "none"], ["synth-lm"]]
    assert mod.ImageTasks.params[1] == ["synth-shapes"] and "groupnorm" in mod.ImageTasks.params[0]
    assert mod.TextTasks.param_names == mod.ImageTasks.param_names == ["norm", "task"]
    assert mod.TextTasks.track_perplexity.unit == "perplexity"
    assert mod.ImageTasks.track_top1_error.unit == "% top-1 error"
    for cls in (mod.TextTasks, mod.ImageTasks):
        for name in ("track_diverged", "time_step", "peakmem_train"):
            assert callable(getattr(cls, name))
    # one setup_cache for both classes: ASV keys it by the function's module and line, so it trains once
    assert mod.TextTasks.setup_cache is mod.ImageTasks.setup_cache
    cache = {"results": {"rmsnorm|synth-lm": {"tracked": 4.8, "diverged": 0.0}},
             "skipped": {"dyt|synth-lm": "why not"}, "data": {}, "data_skipped": {}}
    bench = mod.TextTasks()
    bench.setup(cache, "rmsnorm", "synth-lm")
    assert bench.track_perplexity(cache, "rmsnorm", "synth-lm") == 4.8
    assert bench.track_diverged(cache, "rmsnorm", "synth-lm") == 0.0
    with pytest.raises(NotImplementedError, match="why not"):
        bench.setup(cache, "dyt", "synth-lm")
    with pytest.raises(NotImplementedError, match="gpt needs tokens"):  # only the step benchmarks build a model
        mod.TextTasks.time_step.setup(cache, "groupnorm", "synth-lm")
    mod = _load_asv_accuracy(monkeypatch, tmp_path, NORMBENCH_ASV_TASKS="synth-shapes")
    assert not hasattr(mod, "TextTasks") and mod.ImageTasks.params[1] == ["synth-shapes"]


def test_step_bench_trains_the_run_and_its_first_loss_is_the_runs(one_thread):
    from normbench.train.step import StepBench

    run = suites.cell_run("layernorm", "synth-lm", device="cpu")
    assert run.quick and run.seed == 0 and run.threads == 1 and run.recipe().steps == 300
    bench = StepBench(run)
    first = bench.step()
    losses = [bench.step() for _ in range(3)]
    assert math.isfinite(first) and all(math.isfinite(v) for v in losses)
    again = StepBench(run).step()
    assert again == first  # seeded: the same model and batch as the run's first step


def _asv_result_file(path: Path, rows: dict, commit: str, env: str = "virtualenv-py3.11"):
    """A result file in ASV's v2 format (as asv 0.6 writes it): ``rows`` = {benchmark: (params, values)}."""
    results_ = {}
    for name, (params, values) in rows.items():
        results_[name] = [list(values), [[repr(v) for v in col] for col in params], "v", 0, 1.0, None, None,
                          [v * 0.9 for v in values], [v * 1.1 for v in values], [1] * len(values),
                          [10] * len(values), None, None]
    data = {"commit_hash": commit, "env_name": env, "date": 0, "params": {"machine": "testbox"},
            "python": "3.11", "requirements": {}, "env_vars": {},
            "result_columns": ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
                               "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
                               "samples", "profile"],
            "results": results_, "durations": {}, "version": 2}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _a_committed_record(task: str, committed: Path) -> dict:
    """An unflagged accuracy record of ``task`` among the committed records (the ``committed_results`` fixture: not
    the working tree's, to which the main job adds its own)."""
    for _, rec in iter_records(committed / "accuracy" / task, kind="accuracy"):
        if not rec["flags"]:
            return rec
    raise AssertionError(f"no unflagged accuracy record of {task} in results/")


def test_ingest_asv_writes_the_accuracy_records_the_run_trained(tmp_path, committed_results):
    from normbench import cli

    rec = _a_committed_record("synth-lm", committed_results)
    norm = rec["norm"]["name"]
    asv_dir, sidecar = tmp_path / ".asv" / "results", tmp_path / ".asv" / "normbench"
    # what the suite's setup_cache left for the ASV run abc-virtualenv-py3.11: the records and their index
    run_dir = sidecar / "accuracy" / "abc-virtualenv-py3.11"
    results.write_records([rec], run_dir)
    (run_dir / "index.json").write_text(json.dumps({"cells": {f"{norm}|synth-lm": suites.summary(rec)},
                                                    "skipped": {"groupnorm|synth-lm": "no tokens layout"}}))
    params = [[norm, "other"], ["synth-lm"]]
    _asv_result_file(asv_dir / "testbox" / "abc-virtualenv-py3.11.json", {
        "accuracy.TextTasks.track_perplexity": (params, [rec["metrics"]["final"], math.nan]),
        "accuracy.TextTasks.track_diverged": (params, [0.0, math.nan]),
        "accuracy.TextTasks.time_step": (params, [0.03, math.nan]),
        "accuracy.TextTasks.peakmem_train": (params, [5e8, math.nan]),
    }, commit="abc")
    (asv_dir / "testbox" / "machine.json").write_text("{}")
    out = tmp_path / "out"
    assert cli.main(["ingest-asv", str(asv_dir), "--out", str(out)]) == 0
    [(_, got)] = list(iter_records(out, kind="accuracy"))
    assert got["id"] == rec["id"] and got["config"] == rec["config"]  # the run's own record, same identity
    asv = got["metrics"]["asv"]
    assert asv["commit"] == "abc" and asv["machine"] == "testbox"
    assert asv["tracked"] == {"track_perplexity": rec["metrics"]["final"], "track_diverged": 0.0}
    assert asv["step_time_s"] == 0.03 and asv["peakmem_rss_bytes"] == 5e8
    assert got["provenance"]["command"].startswith("asv run")
    assert results.load_report(out) == []
    df = results.load(out, kind="accuracy")
    assert len(df) == 1 and df.iloc[0]["norm"] == norm

    # a run whose side records are missing (another machine) is said, not guessed
    _asv_result_file(asv_dir / "testbox" / "def-virtualenv-py3.11.json", {
        "accuracy.TextTasks.track_perplexity": (params, [5.0, math.nan])}, commit="def")
    n, problems = suites.ingest_accuracy(asv_dir, out=tmp_path / "out2")
    assert n == 1 and len(problems) == 1 and "def-virtualenv-py3.11" in problems[0]


@pytest.mark.slow
def test_pytest_benchmark_accuracy_json_carries_the_accuracy(tmp_path):
    env = dict(os.environ, NORMBENCH_PYTEST_NORMS="groupnorm", NORMBENCH_PYTEST_TASKS="synth-shapes")
    out = tmp_path / "bench.json"
    r = subprocess.run([sys.executable, "-m", "pytest", "suites/pytest_benchmark/test_accuracy.py", "-q",
                        "-p", "no:randomly", f"--benchmark-json={out}", "--benchmark-max-time=0.2",
                        "--normbench-out", str(tmp_path / "records")],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    [b] = json.loads(out.read_text())["benchmarks"]
    assert b["group"] == "accuracy synth-shapes" and b["name"] == "test_accuracy[groupnorm-synth-shapes]"
    info = b["extra_info"]
    assert info["metric"] == "top1" and 0 <= info["final"] <= 1
    assert info["tracked"] == pytest.approx(100 * (1 - info["final"])) and info["diverged"] is False
    assert info["recipe_hash"] and info["quick"] is True and info["data"]["source"] == "generated"
    [(_, rec)] = list(iter_records(tmp_path / "records", kind="accuracy"))
    assert rec["id"] == info["record_id"] and rec["config"]["recipe_hash"] == info["recipe_hash"]
