"""Timing paths and labels: train/eval modes, what each record says about how it was timed, the CUDA-only pieces'
pure logic (flush kinds, keep-ahead spin, ceiling warm-up). The GPU timers run against a fake GPU timeline in
tests/test_gpu_timer.py and are verified on a GPU (docs/measurement.md, "Verify on a GPU"); nothing here asserts a
timing.
"""

from __future__ import annotations

import pytest
import torch

from normbench import results
from normbench.measure import bytes_model as bm
from normbench.measure import ceiling, group, planning, suite, timers
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
IMAGES = Shape("tiny-images", "images", (4, 8, 3, 3), "quick")


def _ctx():
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


# --- train and eval ---------------------------------------------------------------------------------------------

def test_default_plan_times_running_state_norms_in_train_and_eval_only_them():
    cases = planning.plan(norms=["batchnorm", "layernorm"], device="cpu", quick=True, backends=["eager"])
    modes = {(c.norm, c.mode) for c in cases}
    assert modes == {("batchnorm", "train"), ("batchnorm", "eval"), ("layernorm", "train")}
    only_eval = planning.plan(norms=["batchnorm"], device="cpu", quick=True, backends=["eager"], modes=["eval"])
    assert {c.mode for c in only_eval} == {"eval"}
    with pytest.raises(ValueError, match="unknown mode"):
        planning.plan(norms=["batchnorm"], device="cpu", modes=["inference"])


def test_mode_is_part_of_the_id_for_running_state_norms_only():
    from normbench.discovery import REGISTRY

    bn, ln = REGISTRY.get("batchnorm"), REGISTRY.get("layernorm")
    train = planning.Case("batchnorm", "eager", IMAGES, "float32", "fwd", "cpu", "hot", 1)
    ev = planning.Case("batchnorm", "eager", IMAGES, "float32", "fwd", "cpu", "hot", 1, mode="eval")
    assert train.config(bn)["mode"] == "train" and ev.config(bn)["mode"] == "eval"
    assert planning.case_id(train, "hw") != planning.case_id(ev, "hw")
    assert train.group != ev.group
    ln_case = planning.Case("layernorm", "eager", Shape("t", "tokens", (4, 8), "quick"), "float32", "fwd", "cpu", "hot",
                            1)
    assert "mode" not in ln_case.config(ln)


def test_eval_mode_uses_running_statistics_and_leaves_them_alone(one_thread):
    cases = {m: [planning.Case("batchnorm", "eager", IMAGES, "float32", p, "cpu", "hot", 1, mode=m)
                 for p in ("fwd", "fwd+bwd")] for m in ("train", "eval")}
    recs = {m: group.measure_group(c, _ctx()) for m, c in cases.items()}
    for m in ("train", "eval"):
        for r in recs[m]:
            assert r["config"]["mode"] == m
            assert r["metrics"]["err"]["y"]["max_rel"] < 1e-5  # against the float64 module in the same mode
    # eval reads the running state (no writes, no batch statistics): fewer bytes by the documented formula
    p_train = recs["train"][0]["config"]["bytes_model"]["params"]
    p_eval = recs["eval"][0]["config"]["bytes_model"]["params"]
    assert p_eval["eval_mode"] == 1 and "eval_mode" not in p_train and p_eval["stat_rows"] == 0
    r = p_eval["running_values"]
    assert bm.bytes_moved("channelwise", "fwd", p_eval) == bm.bytes_moved("channelwise", "fwd", p_train) \
        - 4 * r - 4 * p_train["stat_rows"] * p_train["stats_per_row"]
    # a module in eval mode does not update its running statistics
    prep = group.Prepared(core_spec("batchnorm"), "eager", IMAGES, "float32", "cpu", mode="eval")
    before = {k: v.clone() for k, v in prep.module.state_dict().items()}
    prep.forward()
    for k, v in prep.module.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def core_spec(name):
    from normbench.discovery import REGISTRY

    return REGISTRY.get(name)


# --- labels -----------------------------------------------------------------------------------------------------

def test_timing_labels_say_how_it_was_timed():
    assert timers.timing_label("cuda", "events", cold=True) == "cold"
    assert timers.timing_label("cuda:1", "events", cold=False) == "hot"
    assert timers.timing_label("cuda", "host", cold=False) == "host"   # pytest-benchmark / ASV on a GPU
    assert timers.timing_label("cuda", "host", cold=True) == "host"    # a host timer never flushed anything
    assert timers.timing_label("cpu", "host", cold=False) == "hot"
    assert timers.timing_label("cpu", "events", cold=True) == "hot"


def test_suite_cases_on_a_gpu_are_labelled_host_not_cold(monkeypatch):
    monkeypatch.setattr(suite, "default_device", lambda: "cuda")
    monkeypatch.setattr(suite, "gate", lambda norm, backend, device: None)
    pytest_case = suite.case_for("layernorm", "eager", "quick-8x128x512", "float32", "fwd", "pytest-benchmark")
    assert pytest_case.timing == "host"
    core_case = suite.case_for("layernorm", "eager", "quick-8x128x512", "float32", "fwd", "asv", timer="events")
    assert core_case.timing == "cold"
    from normbench.discovery import REGISTRY

    cfg = pytest_case.config(REGISTRY.get("layernorm"))
    assert cfg["timing"] == "host" and "l2_flush" not in cfg
    assert core_case.config(REGISTRY.get("layernorm"))["l2_flush"] == "zero"


def test_flush_and_keep_ahead_are_recorded_and_in_the_id(monkeypatch):
    from normbench.discovery import REGISTRY

    spec = REGISTRY.get("layernorm")
    shape = Shape("t", "tokens", (4, 8), "quick")
    zero = planning.Case("layernorm", "eager", shape, "float32", "fwd", "cuda", "cold", 1)
    rw = planning.Case("layernorm", "eager", shape, "float32", "fwd", "cuda", "cold", 1, flush="rw")
    ahead = planning.Case("layernorm", "eager", shape, "float32", "fwd", "cuda", "hot", 1, keep_ahead=True)
    assert zero.config(spec)["l2_flush"] == "zero" and rw.config(spec)["l2_flush"] == "rw"
    assert planning.case_id(zero, "hw") != planning.case_id(rw, "hw")
    assert ahead.config(spec)["keep_ahead"] is True and "l2_flush" not in ahead.config(spec)
    assert rw.settings(TimerSettings()).flush == "rw" and ahead.settings(TimerSettings()).keep_ahead
    # keep-ahead is the default on CUDA (issue #35); a case timed without it has no key, as records made before
    off = planning.Case("layernorm", "eager", shape, "float32", "fwd", "cuda", "hot", 1, keep_ahead=False)
    assert zero.config(spec)["keep_ahead"] is True and "keep_ahead" not in off.config(spec)
    assert planning.case_id(off, "hw") != planning.case_id(ahead, "hw")
    assert all(not c.keep_ahead for c in planning.plan(norms=["layernorm"], device="cpu", quick=True))
    with pytest.raises(ValueError, match="unknown L2 flush"):
        planning.plan(norms=["layernorm"], device="cpu", flush="clean")


def test_flush_buffer_size_and_kinds():
    assert timers.flush_bytes(50 * 2**20) == 256 * 2**20          # at least 256 MiB
    assert timers.flush_bytes(200 * 2**20) == 400 * 2**20         # else twice L2
    assert timers.FLUSHES == ("zero", "rw")
    assert timers.spin_cycles(20e-6, 1.98e9) > timers.spin_cycles(10e-6, 1.98e9) > 0


def test_ceiling_warmup_runs_for_the_requested_time():
    clock = iter(range(100))  # a fake clock: one "second" per reading
    calls = []
    n = ceiling.warmup_copies(lambda: calls.append(1), lambda: None, 3.0, clock=lambda: next(clock))
    assert n == len(calls) and n >= 3 * 3  # kept copying until 3 s had passed, in rounds of 3
    assert ceiling.CUDA_WARMUP_S >= 1.0
