"""#52: ``normbench.measure.timers`` where its mutation run found it untested (docs/mutation-report.md).

The GPU timers run on the fake GPU timeline (``tests/fake_gpu.py``) or, for :class:`~normbench.measure.timers.KeepAhead`
alone, on a stub whose events measure a fixed time, so what the timer plans and counts (spins, repetitions, batches,
retries, the flush it ran, the graph it replayed) is derived here from the workload's parameters. The flag texts are
written out here. No wall-clock timing is asserted: the fake's and the stub's clocks are simulated.
"""

from __future__ import annotations

import math
import random
import types

import pytest
from fake_gpu import FakeCudaDevice, FakeGPU

from normbench import device as seam
from normbench.measure import timers
from normbench.measure.clock import MIN_SPIN_S, ClockWatch, spin_cycles
from normbench.measure.timers import (
    CudaTiming,
    Interleaved,
    KeepAhead,
    TimerSettings,
    cuda_time,
    cuda_timing,
    host_bound_reason,
    host_info,
    interleaved_time,
)

US = 1e-6


def _exact(samples, seconds):
    return bool(samples) and all(abs(s - seconds) < 1e-9 for s in samples)


class _Counter:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1


def _counted_call():
    """A fresh fake GPU, a counter and a call (5 µs of host, 20 µs of GPU) that counts itself."""
    gpu, n = FakeGPU(), _Counter()
    work = gpu.call(host_s=5 * US, gpu_s=20 * US)

    def fn():
        n()
        work()

    return gpu, n, fn


class _KindsGPU(FakeGPU):
    """The fake GPU, keeping the L2 flush kind each timing asked for."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.kinds: list = []

    def flusher(self, kind):
        self.kinds.append(kind)
        return super().flusher(kind)


@pytest.fixture
def fake_seam(monkeypatch):
    """A fake GPU behind the device seam (``normbench.device.get()``), as the timers' default ``ops`` find it."""
    monkeypatch.delenv(seam.REHEARSE_ENV, raising=False)
    gpu = _KindsGPU(graphs=True)
    monkeypatch.setattr(seam, "_REAL", FakeCudaDevice(gpu))
    return gpu


# --- settings --------------------------------------------------------------------------------------------------------

def test_quick_settings_have_no_warm_up_and_few_short_repetitions():
    q = TimerSettings.quick()
    assert (q.warmup, q.min_reps, q.max_reps, q.min_time, q.max_time) == (0, 5, 20, 0.05, 0.3)
    assert (q.flush, q.keep_ahead) == (TimerSettings().flush, TimerSettings().keep_ahead)
    calls = _Counter()
    samples = timers.cpu_time(calls, q)
    assert calls.n == len(samples) and 5 <= len(samples) <= 20   # no untimed warm-up call


# --- the CPU timer ---------------------------------------------------------------------------------------------------

def test_the_cpu_timer_stops_at_max_reps_and_takes_none_when_max_reps_is_zero():
    calls = _Counter()
    # min_reps out of reach and a max_time far above what 10 empty calls take: max_reps alone stops it
    assert len(timers.cpu_time(calls, TimerSettings(warmup=0, min_reps=1000, max_reps=10, max_time=1.0))) == 10
    assert timers.cpu_time(calls, TimerSettings(warmup=0, max_reps=0)) == []


def test_the_cpu_timer_counts_each_calls_own_page_faults():
    """An empty call faults no page (or a few): each entry is that call's faults, not the process's running total."""
    assert timers.minor_faults() > 1000          # the process's total so far: far above one empty call's
    faults: list = []
    samples = timers.cpu_time(lambda: None, TimerSettings(warmup=0, min_reps=5, max_reps=5, min_time=0.0),
                              faults=faults)
    assert len(faults) == len(samples) == 5 and all(0 <= f < 100 for f in faults)


def test_minor_faults_is_zero_without_the_resource_module(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "resource", None)   # as on Windows: ``import resource`` fails
    assert timers.minor_faults() == 0


# --- the host-bound flag and the host information --------------------------------------------------------------------

NO_KEEP_AHEAD = ("timed without keep-ahead while the host spent {h} per call, at least 50% of the {g} the events "
                 "measured: the GPU may have waited for the host inside the events; time it with keep-ahead (the "
                 "default on CUDA)")
RAN_DRY = ("the GPU's queue ran dry before the host had enqueued the batch in 2 of 5 batches, even after a retry with "
           "a spin 4x the host's enqueue time: those repetitions include time the GPU waited for the host (host 30.0 "
           "µs per call, events 20.0 µs); the call synchronises with the GPU, or its host path varies too much to "
           "keep ahead of")


def test_the_host_bound_reasons_say_what_was_measured():
    assert host_bound_reason([20 * US] * 3, [30 * US] * 3, {"failed": 2, "batches": 5}) == RAN_DRY
    assert host_bound_reason([20 * US] * 3, [30 * US] * 3, {"failed": 0, "batches": 5}) is None
    # without keep-ahead: flagged from half the GPU's time up, the limit included
    assert host_bound_reason([20 * US], [10 * US], None) == NO_KEEP_AHEAD.format(h="10.0 µs", g="20.0 µs")
    assert host_bound_reason([20 * US], [9.9 * US], None) is None
    assert host_bound_reason([20 * US], [], None) is None and host_bound_reason([], [20 * US], None) is None


def test_host_info_keeps_the_median_host_time_the_checks_and_the_flags():
    clock = {"max_mhz": 1980.0}
    assert host_info([20 * US] * 3, [10 * US, 12 * US, 11 * US], None, clock, "a low clock", "rw") == {
        "host_s": 11 * US, "keep_ahead": None, "host_bound": NO_KEEP_AHEAD.format(h="11.0 µs", g="20.0 µs"),
        "clock": clock, "low_clock": "a low clock", "l2_flush": "rw"}
    ahead = {"failed": 0, "batches": 3}
    assert host_info([20 * US], [30 * US], ahead) == {"host_s": 30 * US, "keep_ahead": ahead, "host_bound": None,
                                                      "clock": None, "low_clock": None, "l2_flush": None}
    assert host_info([20 * US], [], None)["host_s"] is None
    assert host_info([20 * US], [0.0, 0.0, 0.0], None)["host_s"] is None   # no host time measured
    assert host_info([1.0], [0.5], None)["host_s"] == 0.5


class _Clock:
    """What the timers read of a clock check (``ClockWatch``'s ``info`` and ``low_reason``)."""

    def info(self):
        return {"max_mhz": 1980.0}

    def low_reason(self):
        return "the GPU was not at its clock"


def test_a_timings_host_info_carries_its_clock_check_and_flush():
    t = CudaTiming([20 * US] * 4, False, [10 * US] * 4, None, _Clock(), "zero")
    assert t.low_clock() == "the GPU was not at its clock"
    assert t.host_info() == {"host_s": 10 * US, "keep_ahead": None,
                             "host_bound": NO_KEEP_AHEAD.format(h="10.0 µs", g="20.0 µs"),
                             "clock": {"max_mhz": 1980.0}, "low_clock": "the GPU was not at its clock",
                             "l2_flush": "zero"}
    ahead = {"batches": 3, "retries": 0, "failed": 0}
    t = CudaTiming([20 * US] * 4, False, [30 * US] * 4, ahead)
    assert t.low_clock() is None
    assert t.host_info() == {"host_s": 30 * US, "keep_ahead": ahead, "host_bound": None, "clock": None,
                             "low_clock": None, "l2_flush": None}


def test_an_interleaved_key_is_judged_on_its_own_failed_rounds():
    ahead = {"batches": 3, "retries": 1, "failed": 9, "spin_clock_hz": 2e9, "spin_s": 1e-3}
    t = Interleaved({"a": [20 * US] * 3}, {"a": [30 * US] * 3}, ahead, {}, _Clock(), None)
    info = t.host_info("a")
    assert info["keep_ahead"] == {**ahead, "failed": 0} and info["host_bound"] is None
    assert t.low_clock() == info["low_clock"] == "the GPU was not at its clock"
    assert Interleaved({"a": [1.0]}, {}, None).low_clock() is None


# --- KeepAhead on a stub whose events measure a fixed time ---------------------------------------------------------

class _Stub:
    """CUDA operations whose event pairs measure ``elapsed_ms``, whose spin is still running when checked while
    ``pending``, and whose host clock moves only by what ``enqueue`` adds."""

    def __init__(self, elapsed_ms=500.0, pending=True):
        self.elapsed_ms, self.pending, self.t = elapsed_ms, pending, 0.0
        self.spins: list[int] = []
        self.syncs = 0

    def event(self):
        ops = self

        class E:
            def record(self):
                pass

            def elapsed_time(self, other):
                return ops.elapsed_ms

            def query(self):
                return not ops.pending

        return E()

    def spin(self, cycles):
        self.spins.append(cycles)

    def sync(self):
        self.syncs += 1

    def clock(self):
        return self.t


def _enqueue(ops, per_unit_s, log):
    def enqueue(n):
        log.append(n)
        ops.t += n * per_unit_s
        return n
    return enqueue


def test_a_fresh_keep_ahead_reports_nothing_done_and_watches_its_own_clock():
    ka = KeepAhead(_Stub())
    assert ka.info() == {"batches": 0, "retries": 0, "failed": 0, "spin_clock_hz": None, "spin_s": 0.0}
    assert isinstance(ka.clock, ClockWatch) and ka.clock.batch_clocks == []
    watch = ClockWatch(None)
    assert KeepAhead(_Stub(), clock=watch).clock is watch


def test_calibration_times_two_spins_and_keeps_no_batch_clock():
    ops = _Stub(elapsed_ms=500.0)
    ka = KeepAhead(ops)
    assert ka.calibrate() == timers.CALIBRATION_CYCLES / 0.5   # cycles over the events' 0.5 s
    assert ops.spins == [timers.CALIBRATION_CYCLES] * 2 and ka.clock.batch_clocks == []
    slow = KeepAhead(_Stub(elapsed_ms=1e12))   # a rate below 1 Hz is still what was measured
    assert slow.calibrate() == timers.CALIBRATION_CYCLES / 1e9


def test_calibration_that_measured_no_time_says_so():
    with pytest.raises(RuntimeError, match=r"^the spin kernel's clock rate could not be calibrated \(its events "
                                           r"measured no time\)$"):
        KeepAhead(_Stub(elapsed_ms=0.0)).calibrate()


def test_a_kept_ahead_batch_plans_its_spin_and_learns_the_host_pace():
    ops = _Stub(elapsed_ms=500.0)
    ka = KeepAhead(ops, per_unit_s=30 * US)
    rate = ka.calibrate()
    log: list = []
    ok, out = ka.run(4, _enqueue(ops, 300 * US, log))
    seconds = timers.SPIN_FACTOR * 30 * US * 4          # 240 µs: above MIN_SPIN_S, below MAX_SPIN_S
    assert seconds > MIN_SPIN_S
    cycles = spin_cycles(seconds, rate)
    assert ok and out == 4 and log == [4] and ops.spins[-1] == cycles
    assert ka.clock.batch_clocks == [cycles / 0.5]      # this batch's clock, from its own spin
    assert ka.per_unit_s == pytest.approx(300 * US)     # the host's enqueue time per unit of this batch
    ok, _ = ka.run(1, _enqueue(ops, 300 * US, log))
    second = timers.SPIN_FACTOR * 300 * US * 1
    assert ok and ka.info() == {"batches": 2, "retries": 0, "failed": 0, "spin_clock_hz": rate,
                                "spin_s": pytest.approx(seconds + second)}


def test_a_batch_that_ran_dry_is_retried_with_half_the_units_or_the_same_when_not_halved():
    ops = _Stub(pending=False)
    ka = KeepAhead(ops, per_unit_s=30 * US)
    ka.calibrate()
    log: list = []
    assert ka.run(4, _enqueue(ops, 30 * US, log)) == (False, 2)
    assert ka.run(1, _enqueue(ops, 30 * US, log)) == (False, 1)
    assert ka.run(4, _enqueue(ops, 30 * US, log), halve=False) == (False, 4)
    assert log == [4, 2, 1, 1, 4, 4]
    assert (ka.info()["retries"], ka.info()["failed"], ka.info()["batches"]) == (3, 3, 3)


def test_a_slow_host_path_gets_a_batch_of_one():
    ops = _Stub()
    ka = KeepAhead(ops, per_unit_s=1.5)     # 2 x 1.5 s per unit is past MAX_SPIN_S already
    ka.calibrate()
    log: list = []
    ka.run(4, _enqueue(ops, 30 * US, log))
    assert log == [1]


def test_a_respin_mid_batch_spins_for_the_units_left_and_fails_the_attempt():
    ops = _Stub(pending=True)
    ka = KeepAhead(ops, per_unit_s=0.1)
    rate = ka.calibrate()

    def enqueue(n):
        ops.t += 0.1 * n
        ka.respin(3)
        return n

    ok, _ = ka.run(1, enqueue, halve=False)
    assert ka.drained is True and not ok                                 # still spinning, but the queue ran dry
    assert ops.spins[-1] == spin_cycles(timers.SPIN_FACTOR * 0.1 * 3, rate)   # 0.6 s for three units of 0.1 s


# --- cuda_timing on the fake GPU -----------------------------------------------------------------------------------

def test_cold_timing_flushes_with_the_settings_kind_before_every_call_and_says_so():
    gpu = _KindsGPU()
    settings = TimerSettings(warmup=2, min_reps=20, max_reps=40, min_time=0.0, flush="rw")
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US), settings, "cuda", ops=gpu)
    assert gpu.kinds == ["rw"] and t.l2_flush == "rw" and gpu.flushes >= len(t.samples) + settings.warmup
    assert _exact(t.samples, 50 * US)
    hot = _KindsGPU()
    t = cuda_timing(hot.call(host_s=5 * US, gpu_s=50 * US), settings, "cuda", cold=False, ops=hot)
    assert hot.kinds == [] and hot.flushes == 0 and t.l2_flush is None


def test_a_graph_is_captured_and_replayed_only_when_asked_and_without_pre():
    s = TimerSettings(warmup=2, min_reps=20, max_reps=40, min_time=0.0)
    gpu = FakeGPU(graphs=True)
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US, kernels=4), s, "cuda", graphs=True, ops=gpu)
    assert t.used_graph is True and gpu.captures == 1 and gpu.replays >= len(t.samples)
    assert _exact(t.samples, 50 * US)
    for kw in ({"graphs": False}, {"graphs": True, "pre": lambda: None}):
        gpu = FakeGPU(graphs=True)
        t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US), s, "cuda", ops=gpu, **kw)
        assert t.used_graph is False and gpu.captures == 0 and _exact(t.samples, 50 * US)
    gpu = FakeGPU(graphs=False)                  # the capture fails: timed plainly
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US), s, "cuda", graphs=True, ops=gpu)
    assert t.used_graph is False and _exact(t.samples, 50 * US)


def test_pre_runs_before_every_timed_call():
    gpu = FakeGPU()
    pre = _Counter()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US), TimerSettings(warmup=2, min_reps=20, max_reps=40,
                    min_time=0.0), "cuda", pre=pre, ops=gpu)
    assert pre.n >= len(t.samples) + 2


def test_the_repetitions_stop_by_the_settings():
    gpu = FakeGPU()
    # batches of 8 (KEEP_AHEAD_BATCH), each one spin: 20 reps at least -> 3 batches, 24 samples, one host time each
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US), TimerSettings(warmup=2, min_reps=20, max_reps=40,
                    min_time=0.0), "cuda", cold=False, ops=gpu)
    assert len(t.samples) == len(t.host_s) == 24 and t.keep_ahead["batches"] == 3
    assert len(t.clock.batch_clocks) == t.keep_ahead["batches"] + t.keep_ahead["retries"]
    # max_reps 12: a batch of 8, then the 4 left
    t = cuda_timing(FakeGPU().call(host_s=5 * US, gpu_s=20 * US),
                    TimerSettings(warmup=1, min_reps=12, max_reps=12, min_time=0.0), "cuda", cold=False,
                    ops=FakeGPU())
    assert len(t.samples) == 12
    # min_time 1 ms of 20 µs calls: 50 reps, the batch that reaches them ends at 56
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US),
                    TimerSettings(warmup=1, min_reps=3, max_reps=400, min_time=1e-3), "cuda", cold=False, ops=gpu)
    assert len(t.samples) == 56
    # max_time 1 s is far from 40 calls of 20 µs: all 40 are taken
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US),
                    TimerSettings(warmup=1, min_reps=40, max_reps=40, min_time=0.0, max_time=1.0), "cuda",
                    cold=False, ops=gpu)
    assert len(t.samples) == 40
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US), TimerSettings(warmup=1, max_reps=0), "cuda", ops=gpu)
    assert t.samples == [] and t.host_s == []


def test_without_keep_ahead_a_batch_is_min_reps_or_ten():
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US),
                    TimerSettings(warmup=1, min_reps=3, max_reps=40, min_time=0.0, keep_ahead=False), "cuda",
                    cold=False, ops=gpu)
    assert len(t.samples) == 10 and t.keep_ahead is None


def test_the_max_clock_is_read_where_the_ops_have_one():
    assert timers._max_clock(types.SimpleNamespace(max_clock_hz=lambda: 1.98e9)) == 1.98e9
    assert timers._max_clock(object()) is None


def test_a_rehearsal_times_a_call_without_pre(monkeypatch):
    """The simulated device wraps what it times: a call with no ``pre`` runs nothing before it."""
    monkeypatch.setenv(seam.REHEARSE_ENV, "normal")
    seam.reset()
    try:
        t = cuda_timing(lambda: None, TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0), "cuda")
        assert len(t.samples) == 3
    finally:
        seam.reset()


# --- the wrappers: cuda_time and interleaved_time through the device seam --------------------------------------------

def test_cuda_time_passes_everything_to_the_timer(fake_seam):
    gpu = fake_seam
    s = TimerSettings(warmup=1, min_reps=8, max_reps=8, min_time=0.0)
    samples, graph = cuda_time(gpu.call(host_s=5 * US, gpu_s=50 * US), s, "cuda")
    assert _exact(samples, 50 * US) and graph is False and gpu.flushes > 0 and gpu.captures == 0   # cold, no graph
    flushes = gpu.flushes
    pre = _Counter()
    samples, graph = cuda_time(gpu.call(host_s=5 * US, gpu_s=50 * US), s, "cuda", cold=False, pre=pre)
    assert gpu.flushes == flushes and pre.n >= len(samples) == 8 and graph is False
    samples, graph = cuda_time(gpu.call(host_s=5 * US, gpu_s=50 * US), s, "cuda", graphs=True)
    assert graph is True and gpu.captures == 1 and _exact(samples, 50 * US)


def test_interleaved_time_passes_everything_to_the_timer(fake_seam):
    a, b, pre = _Counter(), _Counter(), _Counter()
    never = TimerSettings(warmup=0, min_reps=1000, max_reps=1000, min_time=0.0, max_time=0.0)
    order: list = []
    got = interleaved_time({"a": a, "b": b}, never, order_log=order)   # max_time 0: stops after slow_rounds (3)
    assert len(got["a"]) == len(got["b"]) == len(order) == 3
    rng, want = random.Random(0), []
    for _ in range(3):
        o = ["a", "b"]
        rng.shuffle(o)
        want.append(o)
    assert order == want                                               # seed 0 by default
    order = []
    got = interleaved_time({"a": a, "b": b}, never, {"a": pre}, seed=7, order_log=order, slow_rounds=5)
    rng, want = random.Random(7), []
    for _ in range(5):
        o = ["a", "b"]
        rng.shuffle(o)
        want.append(o)
    assert order == want and len(got["a"]) == 5 and pre.n == 5
    gpu = fake_seam
    s = TimerSettings(warmup=1, min_reps=4, max_reps=4, min_time=0.0)
    got = interleaved_time({"x": gpu.call(host_s=5 * US, gpu_s=30 * US)}, s, device="cuda")
    assert _exact(got["x"], 30 * US) and len(got["x"]) == 4


def test_spin_cycles_round_up():
    assert spin_cycles(1.5e-9, 1e9) == math.ceil(1.5) == 2


def test_the_warm_up_runs_the_settings_count_of_timed_units_and_at_least_one():
    """Calls of ``fn`` in all, for warm-ups of 0 to 3 (the rest of the timing the same on a fresh fake each time):
    one warm-up unit for 0 and 1, then one more per warm-up."""
    calls = []
    for warmup in range(4):
        gpu, n, fn = _counted_call()

        cuda_timing(fn, TimerSettings(warmup=warmup, min_reps=8, max_reps=8, min_time=0.0), "cuda", cold=False,
                    ops=gpu)
        calls.append(n.n)
    assert [b - a for a, b in zip(calls, calls[1:])] == [0, 1, 1]


def test_the_host_bound_reason_names_the_limit_in_force(monkeypatch):
    monkeypatch.setattr(timers, "HOST_SHARE_LIMIT", 0.75)
    assert "at least 75% of the 20.0 µs" in host_bound_reason([20 * US], [15 * US], None)


@pytest.fixture
def planned(monkeypatch):
    """Each KeepAhead made: the host time per unit it first plans for, and the units of every respin."""
    seen = {"per_unit_s": [], "respins": [], "made": []}

    class Spy(KeepAhead):
        def __init__(self, ops, per_unit_s=timers.MIN_HOST_S, clock=None):
            seen["per_unit_s"].append(per_unit_s)
            seen["made"].append(self)
            super().__init__(ops, per_unit_s, clock)

        def respin(self, units, factor=timers.SPIN_FACTOR):
            seen["respins"].append(units)
            return super().respin(units, factor)

    monkeypatch.setattr(timers, "KeepAhead", Spy)
    return seen


def test_the_first_spin_plans_for_one_warm_up_units_host_time(planned):
    """200 µs of host time per call: the warm-up's last unit (its call, two event records, a launch) took a little
    more, and that, not the time since the timing began, is what the first batch's spin is planned on."""
    gpu = FakeGPU()
    cuda_timing(gpu.call(host_s=200 * US, gpu_s=20 * US), TimerSettings(warmup=3, min_reps=8, max_reps=8,
                min_time=0.0), "cuda", cold=False, ops=gpu)
    [first] = planned["per_unit_s"]
    assert 200 * US <= first <= 250 * US


# --- the stop rule -------------------------------------------------------------------------------------------------

def test_done_at_each_limit_included():
    s = TimerSettings(min_reps=5, max_reps=10, min_time=1.0, max_time=4.0)
    assert s.done(10, 0.0) and not s.done(9, 0.0)          # max_reps
    assert s.done(5, 1.0) and not s.done(4, 1.0) and not s.done(5, 0.99)   # min_reps and min_time together
    assert s.done(3, 4.0) and not s.done(2, 4.0) and not s.done(3, 3.99)   # a slow call: 3 reps of max_time


class _FakeTime:
    """``time`` for the CPU timers: ``perf_counter`` reads a clock that only ``fn`` moves."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def test_the_cpu_timer_accumulates_the_calls_time(monkeypatch):
    clock = _FakeTime()
    monkeypatch.setattr(timers, "time", clock)

    def fn():
        clock.now += 0.25

    # 0.25 s per call, min_time 1 s: 4 calls, not max_reps
    assert timers.cpu_time(fn, TimerSettings(warmup=0, min_reps=1, max_reps=100, min_time=1.0)) == [0.25] * 4


# --- interleaved timing ----------------------------------------------------------------------------------------------

def _orders(seed, rounds, keys):
    rng, out = random.Random(seed), []
    for _ in range(rounds):
        o = list(keys)
        rng.shuffle(o)
        out.append(o)
    return out


def test_interleaved_on_the_cpu_warms_up_as_asked_and_runs_each_pre(monkeypatch):
    clock = _FakeTime()
    monkeypatch.setattr(timers, "time", clock)
    calls = {"a": 0, "b": 0, "pre": 0}

    def work(k, s):
        def fn():
            calls[k] += 1
            clock.now += s
        return fn

    def pre():
        calls["pre"] += 1

    s = TimerSettings(warmup=0, min_reps=1000, max_reps=1000, min_time=0.0, max_time=0.0)
    order: list = []
    t = timers.interleaved_timing({"a": work("a", 0.5), "b": work("b", 0.25)}, s, {"a": pre}, order_log=order)
    assert t.samples == {"a": [0.5] * 3, "b": [0.25] * 3}                 # slow_rounds 3 by default
    assert calls == {"a": 3, "b": 3, "pre": 3}                            # no warm-up: warmup 0
    assert order == _orders(0, 3, "ab")                                   # seed 0 by default
    assert t.host_s == {} and t.keep_ahead is None and t.failed_by_key is None
    assert t.clock is None and t.low_clock() is None and t.l2_flush is None
    t = timers.interleaved_timing({"a": work("a", 0.5)}, TimerSettings(warmup=2, min_reps=2, max_reps=2,
                                  min_time=0.0), {"a": pre})
    assert calls["a"] == 3 + 2 + 2 and calls["pre"] == 3 + 2 + 2


def test_cold_interleaved_timing_on_the_cpu_is_refused():
    with pytest.raises(ValueError, match=r"^cold timing \(L2 flushed before each call\) needs CUDA; CPU timing is "
                                         r"hot$"):
        timers.interleaved_timing({"a": lambda: None}, TimerSettings(), cold=True)


def test_interleaved_on_cuda_flushes_runs_pre_and_logs_its_seeded_order(fake_seam):
    gpu = fake_seam
    pre = _Counter()
    fns = {"a": gpu.call(host_s=5 * US, gpu_s=30 * US), "b": gpu.call(host_s=5 * US, gpu_s=10 * US)}
    order: list = []
    s = TimerSettings(warmup=1, min_reps=6, max_reps=6, min_time=0.0, flush="rw")
    t = timers.interleaved_timing(fns, s, {"a": pre}, "cuda", seed=5, order_log=order, cold=True)
    assert order == _orders(5, 6, "ab") and gpu.kinds == ["rw"] and t.l2_flush == "rw"
    assert gpu.flushes >= 2 * 6 and pre.n >= 6
    assert _exact(t.samples["a"], 30 * US) and _exact(t.samples["b"], 10 * US)
    assert t.failed_by_key == {"a": 0, "b": 0}


def test_interleaved_on_cuda_warms_up_at_least_one_round():
    calls = []
    for warmup in range(4):
        gpu, n, fn = _counted_call()

        timers.interleaved_timing({"a": fn}, TimerSettings(warmup=warmup, min_reps=4, max_reps=4, min_time=0.0),
                                  ops=gpu)
        calls.append(n.n)
    assert [b - a for a, b in zip(calls, calls[1:])] == [0, 1, 1]


def test_interleaved_plans_its_first_spin_on_a_warm_up_round(planned):
    gpu = FakeGPU()
    fns = {"a": gpu.call(host_s=200 * US, gpu_s=20 * US), "b": gpu.call(host_s=200 * US, gpu_s=20 * US)}
    timers.interleaved_timing(fns, TimerSettings(warmup=3, min_reps=4, max_reps=4, min_time=0.0), ops=gpu)
    [first] = planned["per_unit_s"]
    assert 400 * US <= first <= 500 * US      # one round: two calls of 200 µs, their events and launches


def test_a_key_that_drains_the_queue_gets_the_calls_after_it_a_spin_for_what_is_left(planned):
    """``a`` waits for the GPU in every call: the calls after it in a round get a fresh spin sized for the share of
    the round left (none when ``a`` is last); each round fails and is retried once, with the same order."""
    gpu = FakeGPU()
    fns = {"a": gpu.call(host_s=20 * US, gpu_s=10 * US, waits=True), "b": gpu.call(host_s=5 * US, gpu_s=10 * US),
           "c": gpu.call(host_s=5 * US, gpu_s=10 * US)}
    order: list = []
    t = timers.interleaved_timing(fns, TimerSettings(warmup=1, min_reps=8, max_reps=8, min_time=0.0), ops=gpu,
                                  seed=3, order_log=order)
    want = []
    for o in order:
        i = o.index("a")
        if i + 1 < 3:
            want += [(3 - i - 1) / 3] * 2            # the attempt and its retry
    assert planned["respins"] == want and want        # some round had ``a`` before another key
    assert t.failed_by_key["a"] == 8 and t.failed_by_key["b"] == t.failed_by_key["c"] == 0


def test_an_interleaved_keys_host_info_is_its_own():
    ahead = {"batches": 5, "retries": 1, "failed": 9, "spin_clock_hz": 2e9, "spin_s": 1e-3}
    t = Interleaved({"a": [20 * US] * 3, "b": [1.0]}, {"a": [30 * US] * 3, "b": [0.0]}, ahead, {"a": 2},
                    _Clock(), "zero")
    assert t.host_info("a") == {"host_s": 30 * US, "keep_ahead": {**ahead, "failed": 2}, "host_bound": RAN_DRY,
                                "clock": {"max_mhz": 1980.0}, "low_clock": "the GPU was not at its clock",
                                "l2_flush": "zero"}
    t = Interleaved({"a": [20 * US]}, {"a": [10 * US]}, None, None, None, None)
    assert t.host_info("a") == {"host_s": 10 * US, "keep_ahead": None,
                                "host_bound": NO_KEEP_AHEAD.format(h="10.0 µs", g="20.0 µs"), "clock": None,
                                "low_clock": None, "l2_flush": None}
    assert t.host_info("b") is None


def test_the_real_ops_time_on_the_device_asked_for(monkeypatch):
    """Through the seam's real CUDA device (``CudaOps``, torch.cuda's calls pointed at the fake GPU by
    ``fake_gpu.install``): each timing makes the device it was given current, ``cuda:1`` here, not the default."""
    import contextlib

    import torch
    from fake_gpu import install

    monkeypatch.delenv(seam.REHEARSE_ENV, raising=False)
    gpu = FakeGPU()
    install(monkeypatch, gpu)
    made_current: list = []
    monkeypatch.setattr(torch.cuda, "device", lambda d: made_current.append(d) or contextlib.nullcontext())
    s = TimerSettings(warmup=1, min_reps=4, max_reps=4, min_time=0.0)
    samples, _ = cuda_time(gpu.call(host_s=5 * US, gpu_s=20 * US), s, "cuda:1", cold=False)
    assert _exact(samples, 20 * US) and made_current == [torch.device("cuda:1")]
    got = interleaved_time({"a": gpu.call(host_s=5 * US, gpu_s=20 * US)}, s, device="cuda:1")
    assert _exact(got["a"], 20 * US) and made_current == [torch.device("cuda:1")] * 2


def test_times_in_the_reasons_are_in_microseconds_to_a_tenth():
    assert host_bound_reason([0.15], [0.1], None) == NO_KEEP_AHEAD.format(h="100000.0 µs", g="150000.0 µs")


def test_interleaved_rounds_stop_by_the_settings_each_limit_included(monkeypatch):
    """On a fake ``perf_counter``: ``a`` takes 0.5 s, ``b`` 0.25 s or 0.5 s; a round adds the mean of its calls."""
    clock = _FakeTime()
    monkeypatch.setattr(timers, "time", clock)

    def work(s):
        def fn():
            clock.now += s
        return fn

    def rounds(b, slow_rounds=3, **kw):
        s = TimerSettings(**{"warmup": 0, "min_reps": 1000, "max_reps": 50, "min_time": 1e9, "max_time": 1e9, **kw})
        return len(timers.interleaved_timing({"a": work(0.5), "b": work(b)}, s, slow_rounds=slow_rounds).samples["a"])

    assert rounds(0.25, min_reps=1, min_time=1.0) == 3       # 0.375 s a round: 0.375, 0.75, 1.125
    assert rounds(0.5, min_reps=1, min_time=1.0) == 2        # 0.5 s a round: min_time reached exactly
    assert rounds(0.5, min_reps=2, min_time=0.0) == 2        # min_reps reached, max_time far
    assert rounds(0.5, min_reps=5, min_time=0.0) == 5
    assert rounds(0.5, max_time=1.5) == 3                    # slow: max_time reached exactly at the 3rd round
    assert rounds(0.5, max_time=1.5, slow_rounds=5) == 5
    assert rounds(0.5, max_reps=0) == 0


def test_interleaved_on_cuda_accounts_for_every_call_and_keeps_its_clock_check(planned):
    """Each key runs once per warm-up round, per clock warm-up batch and per timed attempt; the clock check knows the
    device's maximum clock (the fake's NVML) and each attempt's clock; the spin is planned on a whole round's host
    time."""
    gpu = FakeGPU()
    n = {"a": 0, "b": 0}

    def counted(k, work):
        def fn():
            n[k] += 1
            work()
        return fn

    fns = {k: counted(k, gpu.call(host_s=200 * US, gpu_s=20 * US)) for k in n}
    t = timers.interleaved_timing(fns, TimerSettings(warmup=2, min_reps=6, max_reps=6, min_time=0.0), ops=gpu)
    ka = t.keep_ahead
    assert n["a"] == n["b"] == 2 + len(t.clock.warm_clocks) + ka["batches"] + ka["retries"] and ka["batches"] == 6
    assert t.clock.info()["max_source"] == "nvml" and t.clock.info()["max_mhz"] == gpu.nvml_hz / 1e6
    assert len(t.clock.batch_clocks) == ka["batches"] + ka["retries"]
    [made] = planned["made"]
    assert made.per_unit_s >= 400 * US                       # the last round's two calls of 200 µs


def test_cuda_timing_accounts_for_every_call():
    gpu, n, fn = _counted_call()
    t = cuda_timing(fn, TimerSettings(warmup=3, min_reps=16, max_reps=16, min_time=0.0), "cuda", cold=False, ops=gpu)
    assert t.keep_ahead["retries"] == 0 and n.n == 3 + len(t.clock.warm_clocks) + len(t.samples) == 3 + 2 + 16


def test_no_graph_unless_asked_even_where_one_can_be_captured():
    gpu = FakeGPU(graphs=True)
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=20 * US), TimerSettings(warmup=1, min_reps=4, max_reps=4,
                    min_time=0.0), "cuda", ops=gpu)
    assert t.used_graph is False and gpu.captures == 0


def test_a_round_that_ran_dry_after_its_last_call_is_held_against_that_call(monkeypatch):
    """The host stops for 3 s after enqueuing each round and before checking it (longer than any spin, which
    MAX_SPIN_S caps at 2 s): no call saw the queue dry, yet every round, retry included, fails; the round's last key
    is the one that counts it (three keys: not the first, nor the last two)."""
    gpu = FakeGPU()

    class Paused(KeepAhead):
        def _attempt(self, units, enqueue, factor):
            def late(n):
                out = enqueue(n)
                gpu.host += 3.0
                return out
            return super()._attempt(units, late, factor)

    monkeypatch.setattr(timers, "KeepAhead", Paused)
    fns = {k: gpu.call(host_s=5 * US, gpu_s=10 * US) for k in "abc"}
    order: list = []
    t = timers.interleaved_timing(fns, TimerSettings(warmup=1, min_reps=12, max_reps=12, min_time=0.0), ops=gpu,
                                  seed=2, order_log=order)
    assert t.keep_ahead["failed"] == t.keep_ahead["batches"] == 12
    assert t.failed_by_key == {k: sum(o[-1] == k for o in order) for k in "abc"}
    assert len({o[-1] for o in order}) > 1 and len({o[0] for o in order}) > 1
