"""#52: more of ``measure/headtohead.py`` held by tests (its mutation run's survivors): the rehearsal's settings,
the case's mode reaching the prepared module, the backward pass's untimed ``pre`` in the probe and the timer, the
same-size copy member (made only for memory-bound passes, on the case's device, really copying), the compile watch's
report in the record, the peak memory on the CPU and the host load a GPU run subtracts."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_mutation_headtohead import ROUNDS, _case, _ctx, rehearsal, timed  # noqa: F401  (fixtures)

from normbench.measure import group, headtohead, noise, reference
from normbench.measure.timers import TimerSettings


def test_a_rehearsal_takes_its_own_rounds_and_nothing_else_changes():
    low = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.7, max_time=0.5)
    got = headtohead.paired_settings(low, rehearsal=True)
    assert (got.warmup, got.min_reps, got.max_reps, got.min_time, got.max_time) == (
        2, headtohead.REHEARSAL_ROUNDS, headtohead.REHEARSAL_ROUNDS, 0.0, 0.5)
    high = dataclasses.replace(low, warmup=5)
    assert headtohead.paired_settings(high, rehearsal=True).warmup == 5


def test_the_rehearsal_settings_apply_to_a_simulated_gpu_only(timed, rehearsal):  # noqa: F811
    """The seam's simulated device takes ``REHEARSAL_ROUNDS`` rounds; a CPU set during a rehearsal keeps the real
    minimums (``ROUNDS`` here)."""
    headtohead.measure_set([_case("eager", device="cuda")], _ctx(1000.0, "cuda"))
    headtohead.measure_set([_case("eager")], _ctx())
    (gpu, cpu) = [c["settings"] for c in timed]
    assert (gpu.min_reps, gpu.max_reps) == (headtohead.REHEARSAL_ROUNDS,) * 2 != (ROUNDS, ROUNDS)
    assert (cpu.min_reps, cpu.max_reps) == (ROUNDS, ROUNDS)


def test_the_cases_mode_reaches_the_prepared_module(timed, monkeypatch):  # noqa: F811
    seen = []

    class Spy(group.Prepared):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            seen.append((self.mode, self.module.training))

    monkeypatch.setattr(headtohead, "Prepared", Spy)
    recs = headtohead.measure_set([_case("eager", norm="batchnorm", mode="eval")], _ctx())
    assert seen == [("eval", False)] and recs[0]["config"]["mode"] == "eval"


def test_a_backward_pass_runs_its_untimed_forward_first_when_timed_and_when_probed(timed, rehearsal):  # noqa: F811
    """``bwd`` times the backward alone, its forward run untimed before each call (``pre``): on the CPU the timer
    gets it, on a (simulated) GPU the host-sync probe too (a probe that failed would say None, not "none found")."""
    recs = headtohead.measure_set([_case("eager", "bwd"), _case("native", "bwd")], _ctx())
    assert len(recs) == 2 and all(r["metrics"]["time_median_s"] > 0 for r in recs)
    recs = headtohead.measure_set([_case("eager", "bwd", device="cuda")], _ctx(1000.0, "cuda"))
    assert recs[0]["metrics"]["host_syncs"] == {} and "host_sync" not in recs[0]["flags"]


def test_the_copy_member_copies_on_the_cases_device(timed, monkeypatch):  # noqa: F811
    made = []
    real = reference.copy_tensors

    def spy(nbytes, dtype, device):
        src, dst = real(nbytes, dtype, device)
        dst.zero_()   # only the member's own calls can make it equal the source again
        made.append((device, src, dst))
        return src, dst

    monkeypatch.setattr(reference, "copy_tensors", spy)
    headtohead.measure_set([_case("eager")], _ctx())
    [(device, src, dst)] = made
    from normbench import device as seam

    assert device is not None and device == seam.tensor_device("cpu")
    assert src.abs().sum() > 0 and torch.equal(dst, src)


def test_a_pass_that_is_not_memory_bound_gets_no_copy_member(timed):  # noqa: F811
    """A reparameterised weight (compute-bound: its bytes are reported, no copy compares with them)."""
    recs = headtohead.measure_set([_case("eager", norm="weight_norm")], _ctx())
    assert timed[0]["keys"] == ["eager"] and len(recs) == 1
    assert recs[0]["config"]["bytes_model"]["memory_bound"] is False and recs[0]["metrics"]["bytes_moved"] > 2
    assert recs[0]["metrics"].get("copy_same_size") is None


def test_a_cpu_record_has_its_peak_memory(timed):  # noqa: F811
    recs = headtohead.measure_set([_case("eager"), _case("native")], _ctx())
    assert all(isinstance(r["metrics"]["peak_mem_bytes"], int) and r["metrics"]["peak_mem_bytes"] > 0
               for r in recs)


class _Report:
    stayed_compiled = False

    def to_dict(self):
        return {"stayed_compiled": False, "recompiles": 3}

    def reason(self):
        return "planted: it fell back to eager"


class _Watch:
    def __init__(self):
        self.marked = 0

    def mark(self):
        self.marked += 1

    def report(self):
        return _Report()


def test_the_compile_watch_report_reaches_the_record(timed, monkeypatch):  # noqa: F811
    """A backend watched for recompiles and fallbacks (``compile``: ``Prepared.watch``) has its report in the
    record (``metrics.compile``) and a fallback flags it; a planted watch stands in for torch.compile's."""
    watches = []

    class Watched(group.Prepared):
        @property
        def watch(self):
            if self.backend != "native":
                return None
            if not watches:
                watches.append(_Watch())
            return watches[0]

    monkeypatch.setattr(headtohead, "Prepared", Watched)
    recs = headtohead.measure_set([_case("eager"), _case("native")], _ctx())
    by = {r["config"]["backend"]: r for r in recs}
    assert watches[0].marked == 1
    assert by["native"]["metrics"]["compile"] == {"stayed_compiled": False, "recompiles": 3}
    assert "fell_back" in by["native"]["flags"] and "planted" in by["native"]["flag_reasons"]["fell_back"]
    assert "compile" not in by["eager"]["metrics"] and "fell_back" not in by["eager"]["flags"]


def test_a_gpu_run_subtracts_one_busy_host_thread_from_the_load(timed, rehearsal, monkeypatch):  # noqa: F811
    monkeypatch.setattr(noise, "load_average", lambda: 3.0)
    monkeypatch.setattr(noise, "busy_cores", lambda: 2.0)
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    case = dataclasses.replace(_case("eager", device="cuda"), threads=2)
    [rec] = headtohead.measure_set([case], _ctx(1000.0, "cuda"))
    # own load on a GPU run: 1 host thread, whatever the case's CPU threads (2 would give 0.5)
    assert rec["metrics"]["noise"]["background_load_per_core"] == pytest.approx(1.0)
