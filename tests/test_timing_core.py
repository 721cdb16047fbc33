"""Issue #48, items 3 and 4, through the fake GPU timeline (``normbench.rehearsal.FakeGPU``) and the rehearsal's
simulated device: head to head flushes L2 before every call when cold and a hot timing is never recorded as cold;
warm-up runs every kernel of a timed unit (flush included) once and plans the first keep-ahead batch with the flush
and event records counted; the clock is warmed to 95 % of its maximum (NVML's, or the highest seen after 200 ms of
work) and a batch below 90 % flags the record ``low_clock``. What a timer should report is derived from the fake's
parameters; nothing asserts a wall-clock time.
"""

from __future__ import annotations

import math

import pytest
from fake_gpu import FakeGPU

from normbench import device as seam
from normbench.measure import timers
from normbench.measure.timers import TimerSettings, cuda_timing, interleaved_timing

US = 1e-6
SETTINGS = TimerSettings(warmup=2, min_reps=20, max_reps=40, min_time=0.0, max_time=30.0)
MAX = 1980e6


def _exact(samples, seconds):
    return all(abs(s - seconds) < 1e-9 for s in samples)


# --- item 3: one timing path, honest labels -------------------------------------------------------------------------

def test_cold_head_to_head_flushes_before_every_timed_call_and_hot_flushes_none():
    gpu = FakeGPU()
    fns = {"a": gpu.call(host_s=10 * US, gpu_s=20 * US), "b": gpu.call(host_s=10 * US, gpu_s=30 * US)}
    t = interleaved_timing(fns, SETTINGS, ops=gpu, cold=True)
    rounds = len(t.samples["a"])
    assert t.l2_flush == "zero" and t.host_info("a")["l2_flush"] == "zero"
    assert gpu.flushes >= 2 * rounds    # one before every timed call (warm-up and retries add more)
    assert _exact(t.samples["a"], 20 * US) and _exact(t.samples["b"], 30 * US)  # the flush is outside the events
    hot = FakeGPU()
    t = interleaved_timing({"a": hot.call(host_s=10 * US, gpu_s=20 * US)}, SETTINGS, ops=hot)
    assert t.l2_flush is None and hot.flushes == 0


@pytest.fixture
def rehearse(monkeypatch):
    """The simulated device of a scenario, fresh (its stream and clock start idle)."""
    def use(scenario: str):
        monkeypatch.setenv(seam.REHEARSE_ENV, scenario)
        seam.reset()
        return seam.get()

    yield use
    seam.reset()


def _set(norm="rmsnorm", backends=("eager", "native"), timing="cold"):
    from normbench.measure.planning import Case
    from normbench.measure.shapes import parse_shape

    shape = parse_shape("16x64")
    return [Case(norm, b, shape, "float32", "fwd", "cuda", timing, 1, keep_ahead=True) for b in backends]


def _context():
    from normbench.measure.group import Context
    from normbench.records.provenance import provenance

    settings = TimerSettings(warmup=1, min_reps=5, max_reps=20, min_time=0.0, max_time=1.0)
    return Context(1000.0, "stated for the test", provenance(device="cuda"), settings)


def test_head_to_head_records_say_cold_only_when_flushed(rehearse):
    """The real head-to-head path on the rehearsal's device: each record says cold with its flush, and the simulated
    stream ran a flush before every timed call of every backend."""
    from normbench.measure.headtohead import measure_set

    dev = rehearse("normal")
    recs = measure_set(_set(), _context())
    assert len(recs) == 2
    rounds = recs[0]["metrics"]["interleaved"]["rounds"]
    for rec in recs:
        assert rec["config"]["timing"] == "cold" and rec["config"]["l2_flush"] == "zero"
        assert rec["metrics"]["interleaved"]["backends"] == ["eager", "native"]
        assert "rehearsal" in rec["flags"]
    assert dev.gpu.flushes >= 3 * rounds   # two backends and the same-size copy, each flushed before every call


def test_a_hot_timing_cannot_be_recorded_as_cold(rehearse):
    from normbench.discovery import REGISTRY
    from normbench.measure.group import MislabelledTiming, Prepared, build_record

    rehearse("normal")
    case = _set(backends=("eager",))[0]
    prep = Prepared(REGISTRY.get("rmsnorm"), "eager", case.shape, "float32", "cuda")
    fn, pre = prep.pass_fns("fwd")
    err = prep.errors()
    ctx = _context()
    hot = interleaved_timing({"eager": fn}, ctx.settings, {"eager": pre}, "cuda")          # nothing flushed
    with pytest.raises(MislabelledTiming, match="hot timing is never recorded as cold"):
        build_record(prep, case, ctx, hot.samples["eager"], False, err, None, None, host=hot.host_info("eager"))
    single = cuda_timing(fn, ctx.settings, "cuda", cold=False, pre=pre)
    with pytest.raises(MislabelledTiming):
        build_record(prep, case, ctx, single.samples, False, err, None, None, host=single.host_info())
    cold = interleaved_timing({"eager": fn}, ctx.settings, {"eager": pre}, "cuda", cold=True)
    rec = build_record(prep, case, ctx, cold.samples["eager"], False, err, None, None, host=cold.host_info("eager"))
    assert rec["config"]["timing"] == "cold" and rec["config"]["l2_flush"] == "zero"
    hot_case = _set(backends=("eager",), timing="hot")[0]
    with pytest.raises(MislabelledTiming):   # and a flushed timing is not hot
        build_record(prep, hot_case, ctx, cold.samples["eager"], False, err, None, None,
                     host=cold.host_info("eager"))


# --- item 4 (and issue item 5's keep-ahead points): warm-up and clock ----------------------------------------------

class LazyFlushGPU(FakeGPU):
    """The first launch of the flush's fill stalls the host (CUDA's lazy module loading) for ``stall_s``."""

    def __init__(self, stall_s=5e-3, **kw):
        super().__init__(**kw)
        self.stall_s = stall_s

    def _flush(self):
        if self.flushes == 0:
            self.host += self.stall_s
        super()._flush()


def test_every_kernel_of_a_repetition_runs_once_before_timing():
    """The flush's first launch stalls the host for 5 ms: in the warm-up, not in the first timed batch (where it
    would make the queue run dry and cost a retry)."""
    gpu = LazyFlushGPU()
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US), SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["retries"] == 0 and t.keep_ahead["failed"] == 0
    gpu = LazyFlushGPU()
    t = interleaved_timing({"a": gpu.call(host_s=30 * US, gpu_s=20 * US)}, SETTINGS, ops=gpu, cold=True)
    assert t.keep_ahead["retries"] == 0


def test_the_first_batch_is_planned_with_the_flush_and_the_event_records():
    """Event records of 30 µs each (a slow driver path) and a 5 µs call: a first batch planned on the call alone
    (8 repetitions x 20 µs at least, doubled) is shorter than the host's 8 x ~70 µs and runs dry."""
    gpu = FakeGPU(record_s=30 * US)
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US), SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["retries"] == 0 and _exact(t.samples, 20 * US)


def test_warm_up_waits_for_the_clock_to_ramp():
    """60 % of the maximum until 150 ms of GPU work: two consecutive warm-up batches at >= 95 % before timing, and
    every timed batch at the maximum."""
    gpu = FakeGPU(idle_hz=0.6 * MAX, boost_hz=MAX, boost_after_s=0.15)
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False, ops=gpu)
    c = t.clock
    assert c.ramped and c.nvml_hz == MAX and c.warm_work_s >= 0.15
    assert all(hz >= timers.CLOCK_READY * MAX for hz in c.warm_clocks[-2:])
    assert min(c.batch_clocks) >= timers.CLOCK_LOW * MAX and t.low_clock() is None
    assert t.host_info()["clock"]["low_batches"] == 0 and t.host_info()["low_clock"] is None


def test_without_nvml_the_highest_clock_seen_after_200_ms_is_the_reference():
    gpu = FakeGPU(idle_hz=0.6 * MAX, boost_hz=MAX, boost_after_s=0.05, nvml_hz=None)
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False, ops=gpu)
    assert t.clock.ramped and t.clock.nvml_hz is None and t.clock.warm_work_s >= timers.CLOCK_MIN_WORK_S
    assert t.clock.max_hz == pytest.approx(MAX, rel=0.01) and t.low_clock() is None


def test_a_clock_that_never_ramps_is_flagged_low_clock():
    gpu = FakeGPU(idle_hz=0.6 * MAX, boost_hz=MAX, boost_after_s=math.inf)
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False, ops=gpu)
    assert t.clock.ramped is False and t.clock.warm_host_s >= timers.CLOCK_LIMIT_S
    why = t.low_clock()
    assert why and "did not reach 95%" in why and "timed batches ran below 90%" in why


def test_a_batch_at_60_percent_is_flagged_even_when_warm_up_gave_up_early(monkeypatch):
    """Warm-up cut short (a limit of 0 s): the first timed batches run at 60 % of the clock; the record is flagged
    by its batches' own clocks."""
    from normbench.measure import clock

    monkeypatch.setattr(clock, "CLOCK_LIMIT_S", 0.0)
    gpu = FakeGPU(idle_hz=0.6 * MAX, boost_hz=MAX, boost_after_s=0.02)
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False, ops=gpu)
    low = [hz for hz in t.clock.batch_clocks if hz < timers.CLOCK_LOW * MAX]
    assert low and t.host_info()["clock"]["low_batches"] == len(low)
    assert "timed batches ran below 90%" in t.low_clock()


def test_low_clock_records_from_the_rehearsal_are_flagged(rehearse):
    from normbench.measure.headtohead import measure_set

    rehearse("low_clock")
    recs = measure_set(_set(), _context())
    assert recs and all("low_clock" in r["flags"] and "rehearsal" in r["flags"] for r in recs)
    assert all(r["metrics"]["clock"]["warmup"]["ramped"] is False for r in recs)
    rehearse("clock_ramp")
    recs = measure_set(_set(), _context())
    assert recs and not any("low_clock" in r["flags"] for r in recs)
    assert all(r["metrics"]["clock"]["warmup"]["ramped"] for r in recs)


def test_a_call_that_always_waits_does_not_grow_the_spins():
    """A batch that waited for the device measured the wait, not the host: the next round's spin is planned on the
    host's pace before it, so a syncing backend costs a few short spins per round, not spins growing to seconds."""
    gpu = FakeGPU()
    fns = {"a": gpu.call(host_s=20 * US, gpu_s=10 * US, waits=True), "b": gpu.call(host_s=10 * US, gpu_s=40 * US)}
    t = interleaved_timing(fns, TimerSettings(warmup=1, min_reps=40, max_reps=40, min_time=0.0), ops=gpu, cold=True)
    assert t.failed_by_key["a"] == 40 and t.failed_by_key["b"] == 0
    assert max(gpu.spins[-40:]) < 5e-3
