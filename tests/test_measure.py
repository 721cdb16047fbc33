"""Tests of the measurement core on the CPU: statistics, bytes models, planning, records, sweeps and the CLI.

Shapes are tiny and repetitions few; no test asserts a timing.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

import normbench
from normbench import results
from normbench.measure import bytes_model as bm
from normbench.measure import group, planning, suite, sweep
from normbench.measure.ceiling import datasheet_peak_gbps
from normbench.measure.shapes import Shape, by_label, input_shape, llm_shapes, quick_shapes, vision_shapes
from normbench.measure.summary import quantile, summarize
from normbench.measure.timers import TimerSettings

TINY_TOKENS = Shape("tiny-tokens", "tokens", (16, 64), "quick")
TINY_IMAGES = Shape("tiny-images", "images", (2, 8, 4, 4), "quick")
FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)


def _ctx(ceiling=50.0):
    # A stated (not measured) ceiling keeps the tests fast; records from tests never reach results/.
    return group.Context(ceiling, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


def _cases(norm, shape=TINY_TOKENS, backend="eager", dtype="float32", passes=("fwd", "bwd", "fwd+bwd")):
    return [planning.Case(norm, backend, shape, dtype, p, "cpu", "hot", torch.get_num_threads()) for p in passes]


# --- statistics -------------------------------------------------------------------------------------------------

def test_quantiles_interpolate_like_numpy():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantile(xs, 0.5) == 3.0
    assert quantile(xs, 0.25) == 2.0
    assert quantile([1.0, 2.0], 0.5) == 1.5
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert (s["median"], s["q25"], s["q75"], s["iqr"], s["reps"]) == (2.5, 1.75, 3.25, 1.5, 4)


def test_summarize_rejects_empty_and_negative_samples():
    with pytest.raises(ValueError, match="zero samples"):
        summarize([])
    with pytest.raises(ValueError, match="finite and non-negative"):
        summarize([1.0, -1.0])
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


# --- bytes models -----------------------------------------------------------------------------------------------

def _params(**kw):
    base = dict(n_elements=1000, inputs=1, elem_bytes=4, param_bytes=80, stat_rows=10, stats_per_row=2,
                running_values=0)
    base.update(kw)
    return base


def test_rowwise_formula_by_hand():
    p = _params()
    fwd = 4 * 1000 + 80 + 4 * 1000 + 4 * 10 * 2          # read x, read w, write y, write mean+rstd
    bwd = 3 * 4 * 1000 + 2 * 80 + 4 * 10 * 2             # read x, dy, stats, w; write dx, dw
    assert bm.bytes_moved("rowwise", "fwd", p) == fwd
    assert bm.bytes_moved("rowwise", "bwd", p) == bwd
    assert bm.bytes_moved("rowwise", "fwd+bwd", p) == fwd + bwd


def test_residual_and_running_state_and_identity():
    p = _params(inputs=2, elem_bytes=2, stats_per_row=1)
    # forward reads x and r, writes y and s; backward reads s, dy, ds and writes one dx (shared by x and r)
    assert bm.bytes_moved("residual_rowwise", "fwd", p) == 2 * 2 * 2 * 1000 + 80 + 4 * 10
    assert bm.bytes_moved("residual_rowwise", "bwd", p) == 4 * 2 * 1000 + 2 * 80 + 4 * 10
    run = _params(stat_rows=0, stats_per_row=0, running_values=16)
    assert bm.bytes_moved("channelwise", "fwd", run) == 2 * 4 * 1000 + 80 + 2 * 4 * 16
    assert all(bm.bytes_moved("identity", p_, _params()) == 0 for p_ in bm.PASSES)


def test_formula_choice_covers_every_registered_norm():
    expect = {"layernorm": "rowwise", "rmsnorm": "rowwise", "add_rmsnorm": "residual_rowwise",
              "groupnorm": "groupwise", "batchnorm": "channelwise", "dyt": "pointwise", "none": "identity",
              "weight_norm": "weight_reparam", "qk_norm": "rowwise"}
    for name in normbench.list_norms():
        spec = normbench.get_norm(name)
        f = bm.formula_for(spec.family, spec.kind, name)
        assert f in bm.FORMULAS
        if name in expect:
            assert f == expect[name], name
    assert bm.formula_for("some_new_family", "activation") == "rowwise"  # plugin default
    assert not bm.FORMULAS["weight_reparam"][1]


def test_bytes_model_rejects_bad_params():
    with pytest.raises(KeyError, match="unknown bytes formula"):
        bm.bytes_moved("nope", "fwd", _params())
    with pytest.raises(KeyError, match="needs params"):
        bm.bytes_moved("rowwise", "fwd", {"n_elements": 1})
    with pytest.raises(ValueError, match="non-negative integer"):
        bm.bytes_moved("rowwise", "fwd", _params(n_elements=-1))
    with pytest.raises(ValueError, match="pass must be"):
        bm.bytes_moved("rowwise", "forward", _params())


# --- shapes, ceilings, planning ---------------------------------------------------------------------------------

def test_shapes_come_from_real_models():
    hidden = {s.dims[-1] for s in llm_shapes()}
    tokens = {s.dims[0] * s.dims[1] for s in llm_shapes()}
    assert min(hidden) == 512 and max(hidden) == 16384 and {4096, 32768} <= tokens
    assert any(s.label.startswith("resnet50") for s in vision_shapes())
    assert any(s.label.startswith("vit") for s in vision_shapes())
    assert {s.layout for s in quick_shapes()} == {"tokens", "images"}
    assert input_shape(by_label("llm-4096x4096"), "attention") == (2, 32, 2048, 128)
    with pytest.raises(KeyError):
        by_label("nope")


def test_datasheet_peaks():
    assert datasheet_peak_gbps("NVIDIA H200") == 4800.0
    assert datasheet_peak_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert datasheet_peak_gbps(None) is None
    assert datasheet_peak_gbps("Some Laptop GPU") is None


def test_quick_plan_covers_the_whole_zoo():
    cases = planning.plan(quick=True, device="cpu")
    # the softmax norms have their own shape set, never in the quick grid
    layer_norms = {n for n in normbench.list_norms() if normbench.get_norm(n).kind != "softmax"}
    assert {c.norm for c in cases} == layer_norms
    assert {c.dtype for c in cases} == {"float32", "bfloat16"}
    assert {c.pass_ for c in cases} == {"fwd", "fwd+bwd"}
    assert {"eager", "compile"} <= {c.backend for c in cases}
    assert {c.timing for c in cases} == {"hot"}
    for c in cases:
        assert c.shape.layout in normbench.get_norm(c.norm).layouts


def test_plan_rejects_bad_selections():
    with pytest.raises(ValueError, match="unknown dtype"):
        planning.plan(norms=["layernorm"], dtypes=["float8"], device="cpu")
    with pytest.raises(ValueError, match="unknown pass"):
        planning.plan(norms=["layernorm"], passes=["sideways"], device="cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        planning.plan(norms=["layernorm"], backends=["cuda-magic"], device="cpu")
    with pytest.raises(ValueError, match="needs CUDA"):
        planning.plan(norms=["layernorm"], timings=["cold"], device="cpu")
    with pytest.raises(KeyError, match="unknown norm"):
        planning.plan(norms=["layernorn"], device="cpu")


# --- measuring ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm, shape", [("layernorm", TINY_TOKENS), ("add_rmsnorm", TINY_TOKENS),
                                         ("dyt", TINY_IMAGES), ("none", TINY_TOKENS)])
def test_measure_group_writes_valid_recomputable_records(norm, shape, tmp_path):
    records = group.measure_group(_cases(norm, shape), _ctx())
    assert [r["config"]["pass"] for r in records] == ["fwd", "bwd", "fwd+bwd"]
    for rec in records:
        assert results.validate_record(rec) == []
        cfg, m = rec["config"], rec["metrics"]
        # GB/s and % of ceiling follow from the record's own fields and the published formula
        assert m["bytes_moved"] == bm.from_record_config(cfg)
        assert math.isclose(m["gbps"], m["bytes_moved"] / m["time_median_s"] / 1e9)
        if m["pct_of_ceiling"] is not None:
            assert math.isclose(m["pct_of_ceiling"], 100 * m["gbps"] / m["ceiling_gbps"])
        assert m["err"]["y"]["max_abs"] < 1e-4  # float32 against the float64 reference
        assert m["reps"] == 3
        assert rec["norm"]["name"] == norm
        assert m["page_faults_per_rep"] >= 0 and m["page_fault_bytes_per_rep"] == m["page_faults_per_rep"] * 4096
    bwd = records[2]["metrics"]
    if norm != "none":
        assert bwd["err"]["dx"] is not None and bwd["saved_bytes"] > 0
    assert records[0]["metrics"]["err"]["dx"] is None  # fwd carries no gradient error
    results.write_records(records, tmp_path)
    assert results.load_report(tmp_path) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mmap threshold and ru_minflt are Linux's")
def test_cpu_timer_counts_the_page_faults_of_fresh_large_outputs():
    """A call allocating a 64 MiB output first-touches every page (glibc maps blocks above 32 MiB anew each
    time); a copy into a preallocated buffer touches none. The records' page_faults_per_rep comes from this.
    Measured in a fresh process: what earlier tests left in this process's allocator (a raised mmap threshold,
    cached blocks) can make the fresh output reuse mapped pages."""
    import subprocess

    code = """
import json, torch
from normbench.measure.timers import TimerSettings, cpu_time
x = torch.randn(16 * 2**20)            # 64 MiB of float32
y = torch.empty_like(x)
settings = TimerSettings(warmup=2, min_reps=4, max_reps=4, min_time=0.0, max_time=60.0)
fresh, reused = [], []
cpu_time(lambda: x.clone(), settings, faults=fresh)
cpu_time(lambda: y.copy_(x), settings, faults=reused)
print(json.dumps([fresh, reused, x.numel() * 4 // 4096]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    fresh, reused, pages = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(fresh) == len(reused) == 4
    # a fault per 4 KiB page (per 2 MiB where transparent huge pages are "always" on); none for the copy
    assert min(fresh) >= 0.9 * pages / 512 and max(reused) * 10 < min(fresh)


def test_weight_norms_report_flops_and_no_pct():
    [rec] = group.measure_group(_cases("weight_std", TINY_TOKENS, passes=("fwd",)), _ctx())
    assert results.validate_record(rec) == []
    assert rec["config"]["bytes_model"]["formula"] == "weight_reparam"
    assert rec["metrics"]["pct_of_ceiling"] is None
    assert rec["metrics"]["flops"] == 2 * 16 * 64 * 64


def test_bfloat16_error_is_larger_than_float32():
    f32 = group.measure_group(_cases("rmsnorm", passes=("fwd+bwd",)), _ctx())[0]["metrics"]["err"]
    bf16 = group.measure_group(_cases("rmsnorm", dtype="bfloat16", passes=("fwd+bwd",)), _ctx())[0]["metrics"]["err"]
    assert bf16["y"]["max_rel"] > f32["y"]["max_rel"]
    assert bf16["dx"]["max_rel"] > f32["dx"]["max_rel"]


def test_unavailable_backend_is_skipped_with_its_reason():
    with pytest.raises(group.Unsupported, match="liger"):
        group.measure_group(_cases("layernorm", backend="liger"), _ctx())
    with pytest.raises(group.Unsupported, match="layout"):
        group.measure_group(_cases("add_rmsnorm", TINY_IMAGES), _ctx())
    # Whether Triton can run depends on the process (a GPU, or Triton imported under TRITON_INTERPRET=1 by an
    # earlier test): only then is its unavailable path out of reach, and only that part is skipped.
    if normbench.get_norm("layernorm").backend_unavailable("triton") is None:
        pytest.skip("triton runs in this process (GPU or interpreter): its unavailable path cannot be exercised")
    with pytest.raises(group.Unsupported, match="triton unavailable"):
        group.measure_group(_cases("layernorm", backend="triton"), _ctx())


def test_far_above_ceiling_is_refused():
    with pytest.raises(group.FarAboveCeiling):
        group.measure_group(_cases("dyt", passes=("fwd",)), _ctx(ceiling=1e-9))


def test_above_ceiling_is_flagged_suspect(monkeypatch):
    from normbench.measure import reference

    # caches smaller than the case: it is not cache-resident, so it is judged against the DRAM ceiling (a resident
    # case is judged against its same-size copy: tests/test_ceiling_reference.py)
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": {"l2_bytes": 64, "llc_bytes": 128,
                                                                        "source": "test"})
    cases = _cases("dyt", passes=("fwd",))
    rec = group.measure_group(cases, _ctx(ceiling=1e9))[0]
    gbps = rec["metrics"]["gbps"]
    ctx = _ctx(ceiling=gbps / 2)  # the same measurement against a ceiling half its bandwidth
    prep = group.Prepared(normbench.get_norm("dyt"), "eager", TINY_TOKENS, "float32", "cpu")
    t = rec["metrics"]["time_median_s"]
    quiet = {"load1": 0.0, "cores": 2, "background_load_per_core": 0.0}  # this test is about the ceiling alone
    again = group.build_record(prep, cases[0], ctx, [t, t, t], False, {"y": None}, None, None, quiet)
    assert again["metrics"]["cache_resident"] == "none"
    assert again["flags"] == ["suspect"] and "above the measured copy ceiling" in again["flag_reasons"]["suspect"]
    assert results.validate_record(again) == []


# --- sweeps: resume, interruption, skip log ---------------------------------------------------------------------

def test_sweep_writes_resumes_and_survives_interruption(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    cases = (_cases("layernorm", passes=("fwd",)) + _cases("rmsnorm", passes=("fwd",))
             + _cases("layernorm", backend="triton", passes=("fwd",)))
    calls = []
    real = group.measure_group

    def interrupt_second(cases, ctx, refused=None):
        calls.append(cases[0].norm)
        if cases[0].norm == "rmsnorm":
            raise KeyboardInterrupt
        return real(cases, ctx, refused)

    monkeypatch.setattr(sweep, "measure_group", interrupt_second)
    s = sweep.run_sweep(cases, tmp_path, settings=FAST, progress=False, log=lambda m: None)
    assert s.interrupted and s.written == 1
    assert results.load_report(tmp_path) == []  # everything on disk is readable
    monkeypatch.setattr(sweep, "measure_group", real)
    s = sweep.run_sweep(cases, tmp_path, settings=FAST, progress=False, log=lambda m: None)
    assert s.already_done == 1 and s.written == 1 and not s.interrupted
    if normbench.get_norm("layernorm").backend_unavailable("triton"):
        assert len(s.skipped) == 1
        hw = results.provenance(device="cpu")["hardware_id"]
        skipped = json.loads((tmp_path / "kernel" / hw / "_skipped.json").read_text())
        assert any("triton" in e["reason"] for e in skipped.values())
    df = results.load(tmp_path, kind="kernel")
    assert sorted(df["norm"]) == ["layernorm", "rmsnorm"]
    s = sweep.run_sweep(cases[:2], tmp_path, settings=FAST, progress=False, log=lambda m: None)
    assert s.already_done == 2 and s.written == 0


def test_failures_in_one_norm_do_not_stop_the_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    real = group.measure_group

    def broken_dyt(cases, ctx, refused=None):
        if cases[0].norm == "dyt":
            raise RuntimeError("kernel exploded")
        return real(cases, ctx, refused)

    monkeypatch.setattr(sweep, "measure_group", broken_dyt)
    s = sweep.run_sweep(_cases("dyt", passes=("fwd",)) + _cases("rmsnorm", passes=("fwd",)), tmp_path,
                        settings=FAST, progress=False, log=lambda m: None)
    assert s.written == 1 and len(s.failed) == 1 and "kernel exploded" in s.failed[0][1]


def test_remote_sweep_submits_every_group_and_cancels_a_hung_norms_others(tmp_path, monkeypatch):
    """The sweep loop over a remote executor (Ray's contract, without Ray): every group is submitted before any is
    awaited and measured by ``_node_group_task``; a hang cancels the rest of its norm, the other norms go on."""
    import concurrent.futures as cf
    import threading

    from normbench.executor import OK, TIMEOUT, Executor, Outcome

    class Pending(cf.Future):
        def cancel(self):  # as RayExecutor does: a cancelled future wakes as_completed
            if not super().cancel():
                return False
            self.set_running_or_notify_cancel()
            return True

    class FakeRemote(Executor):
        remote = True

        def __init__(self):
            self.labels = []

        def submit(self, task):
            self.labels.append(task.label)
            fut = Pending()
            if task.label.startswith("dyt/eager/tiny-tokens"):
                fut.set_result(Outcome(task.label, TIMEOUT, error="no result within the time limit of 1s; stopped"))
            elif not task.label.startswith("dyt"):
                fut.set_result(Outcome(task.label, OK, value=task.fn(*task.args)))
            else:  # dyt's other group stays queued until cancelled (a failure, not a hang, if it never is)
                timer = threading.Timer(60, lambda: fut.done() or fut.set_result(Outcome(task.label, "error")))
                timer.daemon = True
                timer.start()
            return fut

    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    monkeypatch.setattr(sweep, "_NODE_CONTEXTS", {})
    ex = FakeRemote()
    cases = (_cases("dyt", passes=("fwd",)) + _cases("dyt", TINY_IMAGES, passes=("fwd",))
             + _cases("rmsnorm", passes=("fwd",)))
    s = sweep.run_sweep(cases, tmp_path, settings=FAST, progress=False, log=lambda m: None, executor=ex)
    assert len(ex.labels) == 3 and s.written == 1
    why = dict(s.failed)
    assert why["dyt/eager/tiny-tokens/float32/fwd/hot"].startswith("dyt hung in dyt/eager/tiny-tokens/float32")
    assert why["dyt/eager/tiny-images/float32/fwd/hot"].startswith("not attempted: dyt hung in")
    s = sweep.run_sweep(cases[2:], tmp_path, settings=FAST, progress=False, log=lambda m: None, executor=ex)
    assert s.already_done == 1 and s.written == 0  # the node leaves out what the driver's out already has


# --- CLI ------------------------------------------------------------------------------------------------------------

def test_cli_bench_list_and_validate(tmp_path, capsys, monkeypatch):
    from normbench.cli import main
    from normbench.measure import ceiling

    assert main(["bench", "--quick", "--norm", "rmsnorm", "--backend", "eager", "--pass", "fwd,fwd+bwd",
                 "--list"]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm/eager/quick-8x128x512/float32/fwd/hot" in out
    monkeypatch.setattr(ceiling, "measure", lambda device: ceiling.Ceiling(50.0, "test ceiling", device))
    rc = main(["bench", "--quick", "--norm", "dyt", "--backend", "eager", "--dtype", "float32", "--pass", "fwd",
               "--layout", "tokens", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    assert main(["validate", str(tmp_path)]) == 0
    assert "1 valid record(s)" in capsys.readouterr().out
    # hand-break the record: the validator names file, record and problem, and exits 1
    [path] = list((tmp_path / "kernel").rglob("dyt.json.gz"))
    recs, _ = results.read_record_file(path)
    recs[0]["metrics"]["time_median_s"] = -1.0
    path.unlink()
    path = path.with_name("dyt.json")  # a hand-edited plain file: read like the compact one
    path.write_text(json.dumps(recs))
    assert main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"INVALID {path}: record 0 id={recs[0]['id']} norm=dyt: metrics.time_median_s must be > 0" in out
    assert main(["validate", str(tmp_path / "missing")]) == 1


def test_plugin_norms_are_swept_and_their_records_outlive_the_plugin(tmp_path, monkeypatch):
    from dataclasses import replace

    from normbench.discovery import REGISTRY

    plugin = replace(normbench.get_norm("rmsnorm"), name="plug_rms", title="Plugin RMS", package="normbench-plug",
                     package_version="9.9", extra_backends=())
    monkeypatch.setitem(REGISTRY.specs, "plug_rms", plugin)
    assert any(c.norm == "plug_rms" for c in planning.plan(quick=True, device="cpu"))
    assert "plug_rms" in suite.grid("small")[0]
    records = group.measure_group(_cases("plug_rms", passes=("fwd",)), _ctx())
    results.write_records(records, tmp_path)
    monkeypatch.delitem(REGISTRY.specs, "plug_rms")  # the plugin is uninstalled
    with pytest.raises(KeyError):
        normbench.get_norm("plug_rms")
    assert results.load_report(tmp_path) == []
    df = results.load(tmp_path, kind="kernel")
    assert list(df["norm"]) == ["plug_rms"] and list(df["norm_package"]) == ["normbench-plug"]


def test_sweep_skips_far_above_ceiling_results_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx(ceiling=1e-9))
    s = sweep.run_sweep(_cases("dyt", passes=("fwd",)), tmp_path, settings=FAST, progress=False, log=lambda m: None)
    assert s.written == 0 and not s.failed
    assert len(s.skipped) == 1 and "more than 10x the measured ceiling" in s.skipped[0][1]
