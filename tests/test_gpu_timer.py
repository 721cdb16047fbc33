"""The GPU timers driven through a fake GPU timeline (``tests/fake_gpu.py``: a host clock, one stream, a bounded
launch queue, events completing when the GPU reaches them, a boosting SM clock): keep-ahead times the GPU when the
host is slower, the check catches a queue that ran dry, and a timing that could not be kept ahead is ``host_bound``.
What the timer should report is derived here from the workload's parameters, never read back from the fake.
No wall-clock timing is asserted: the fake's clock is simulated.
"""

from __future__ import annotations

import contextlib
import statistics

import pytest
import torch
from fake_gpu import FakeGPU

from normbench.measure import timers
from normbench.measure.timers import TimerSettings, cuda_timing, interleaved_timing

SETTINGS = TimerSettings(warmup=2, min_reps=20, max_reps=40, min_time=0.0, max_time=30.0)
US = 1e-6


def _exact(samples, seconds):
    return all(abs(s - seconds) < 1e-9 for s in samples)


def test_host_faster_than_gpu_is_clean_and_reports_the_gpu_time():
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=5 * US, gpu_s=50 * US), SETTINGS, "cuda", ops=gpu)
    assert len(t.samples) >= SETTINGS.min_reps and _exact(t.samples, 50 * US)
    assert statistics.median(t.host_s) == pytest.approx(5 * US + gpu.launch_s)
    assert t.keep_ahead["failed"] == 0 and t.keep_ahead["retries"] == 0
    assert t.host_bound() is None


@pytest.mark.parametrize("cold", [True, False])
def test_host_slower_than_gpu_is_kept_ahead_and_times_the_gpu(cold):
    """The H200 case: a Python-launched call whose host path (200 µs) is ten times its kernel (20 µs)."""
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=200 * US, gpu_s=20 * US, kernels=4), SETTINGS, "cuda", cold=cold, ops=gpu)
    assert _exact(t.samples, 20 * US)                     # the GPU's time, not the host's
    assert statistics.median(t.host_s) == pytest.approx(200 * US + 4 * gpu.launch_s)
    assert t.keep_ahead["failed"] == 0 and t.host_bound() is None
    # every spin covered its batch: the host's enqueue time, 1.5-2x, never a retry
    assert t.keep_ahead["retries"] == 0


def test_host_slower_than_gpu_without_keep_ahead_measures_the_host_and_is_flagged():
    gpu = FakeGPU()
    settings = TimerSettings(warmup=2, min_reps=20, max_reps=40, min_time=0.0, keep_ahead=False)
    t = cuda_timing(gpu.call(host_s=200 * US, gpu_s=20 * US), settings, "cuda", ops=gpu)
    # the events enclose the host's launch path less the flush it overlapped: the GPU sat idle waiting for the host
    # (what the H200 records show), here 7x the kernel's 20 µs
    assert statistics.median(t.samples) > 5 * 20 * US
    assert t.keep_ahead is None and len(gpu.spins) == len(t.clock.warm_clocks)   # the clock check's spins alone
    why = t.host_bound()
    assert why and "without keep-ahead" in why


def test_a_call_that_waits_for_the_gpu_cannot_be_kept_ahead_and_is_flagged():
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US, waits=True), SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["failed"] == t.keep_ahead["batches"] > 0   # every batch, retry included, ran dry
    why = t.host_bound()
    assert why and "ran dry" in why


def test_a_host_pause_mid_batch_is_retried_and_its_samples_dropped():
    gpu = FakeGPU()
    pause = SETTINGS.warmup + 4  # the 5th call of the first timed batch (calls are counted from the warm-up's)
    t = cuda_timing(gpu.call(host_s=50 * US, gpu_s=20 * US, stall=lambda i: 5e-3 if i == pause else 0.0),
                    SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["retries"] == 1 and t.keep_ahead["failed"] == 0
    assert _exact(t.samples, 20 * US)          # the batch that waited for the host was timed again, not kept
    assert t.host_bound() is None


def test_recurring_host_pauses_get_longer_spins_and_are_still_timed_at_the_gpu():
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=50 * US, gpu_s=20 * US, stall=lambda i: 5e-3 if i % 3 == 2 else 0.0),
                    SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["failed"] == 0 and _exact(t.samples, 20 * US)
    assert max(t.host_s) > 5e-3 and t.host_bound() is None


def test_a_queue_that_drains_mid_batch_is_flagged():
    """Every third call waits for the GPU (a lazily freed workspace, a data-dependent ``.item()``): the host stops
    in the middle of every batch, retry included, until the spin and all before it ran out."""
    gpu = FakeGPU()
    t = cuda_timing(gpu.call(host_s=50 * US, gpu_s=20 * US, waits=lambda i: i % 3 == 2), SETTINGS, "cuda", ops=gpu)
    assert t.keep_ahead["failed"] > 0
    why = t.host_bound()
    assert why and "ran dry" in why


def test_a_full_launch_queue_is_caught_and_the_batch_halved():
    """200 launches per call: 8 repetitions (~1600 queue entries) overflow a 1024-entry queue, the host blocks until
    the spin is gone; the retry with 4 repetitions (~800) fits, and later batches keep that size."""
    gpu = FakeGPU(queue=1024)
    t = cuda_timing(gpu.call(host_s=200 * US, gpu_s=200 * US, kernels=200), SETTINGS, "cuda", cold=False, ops=gpu)
    assert t.keep_ahead["retries"] == 1 and t.keep_ahead["failed"] == 0
    assert _exact(t.samples, 200 * US)


def test_the_spin_is_calibrated_to_the_boosted_clock():
    """The clock boosts only after 3 ms of GPU work, after the calibration: the first spins at the boosted clock are
    shorter than planned; the check catches it and the rate is re-measured from each batch's own spin."""
    gpu = FakeGPU(boost_after_s=3e-3)
    t = cuda_timing(gpu.call(host_s=300 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False, ops=gpu)
    # the rate seen includes the spin's launch gap (2 µs in 0.5 ms), as a real GPU's would
    assert t.keep_ahead["spin_clock_hz"] == pytest.approx(gpu.boost_hz, rel=0.01)
    assert t.keep_ahead["failed"] == 0 and _exact(t.samples, 20 * US)


def test_interleaved_rounds_are_kept_ahead_per_key():
    gpu = FakeGPU()
    fns = {"slow_host": gpu.call(host_s=150 * US, gpu_s=10 * US), "fast_host": gpu.call(host_s=10 * US, gpu_s=40 * US)}
    t = interleaved_timing(fns, SETTINGS, ops=gpu, seed=1)
    assert _exact(t.samples["slow_host"], 10 * US) and _exact(t.samples["fast_host"], 40 * US)
    assert statistics.median(t.host_s["slow_host"]) == pytest.approx(150 * US + gpu.launch_s)
    assert t.keep_ahead["failed"] == 0 and t.host_bound("slow_host") is None
    off = FakeGPU()
    fns = {"slow_host": off.call(host_s=150 * US, gpu_s=10 * US), "fast_host": off.call(host_s=10 * US, gpu_s=40 * US)}
    t = interleaved_timing(fns, TimerSettings(warmup=2, min_reps=20, max_reps=20, min_time=0.0, keep_ahead=False),
                           ops=off)
    assert statistics.median(t.samples["slow_host"]) > 140 * US and t.host_bound("slow_host")


def test_interleaved_round_that_waits_for_the_gpu_is_flagged():
    """Each backend is judged on its own calls (issue #48): the one that waits is flagged, its partner, whose calls
    after the drained queue get a fresh spin, is not, and is timed at its GPU time."""
    gpu = FakeGPU()
    fns = {"a": gpu.call(host_s=20 * US, gpu_s=10 * US, waits=True), "b": gpu.call(host_s=10 * US, gpu_s=40 * US)}
    t = interleaved_timing(fns, TimerSettings(warmup=1, min_reps=10, max_reps=10, min_time=0.0), ops=gpu)
    assert t.keep_ahead["failed"] > 0 and t.host_bound("a") and not t.host_bound("b")
    assert _exact(t.samples["b"], 40 * US)


def test_the_real_ops_call_torch_cuda(monkeypatch):
    """``CudaOps`` (the default) is a thin pass-through to torch.cuda: with torch.cuda's event, spin and synchronise
    patched to the fake, the default path times the same as the fake passed directly."""
    gpu = FakeGPU()
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: gpu.event())
    monkeypatch.setattr(torch.cuda, "_sleep", gpu.spin)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: gpu.sync())
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(timers.CudaOps, "clock", staticmethod(gpu.clock))
    t = cuda_timing(gpu.call(host_s=200 * US, gpu_s=20 * US), SETTINGS, "cuda", cold=False)
    assert _exact(t.samples, 20 * US) and t.keep_ahead["failed"] == 0 and len(gpu.spins) > 2


def test_spin_cycles_need_a_calibrated_clock():
    assert timers.spin_cycles(1e-3, 2e9) == 2_000_000
    with pytest.raises(ValueError, match="calibrated"):
        timers.spin_cycles(1e-3, None)


def test_a_slow_host_path_gets_shorter_batches_not_endless_spins():
    gpu = FakeGPU()
    settings = TimerSettings(warmup=1, min_reps=6, max_reps=6, min_time=0.0)
    t = cuda_timing(gpu.call(host_s=0.4, gpu_s=20 * US), settings, "cuda", cold=False, ops=gpu)
    assert _exact(t.samples, 20 * US) and t.keep_ahead["failed"] == 0
    assert max(gpu.spins) <= timers.MAX_SPIN_S  # batches of 2 (2 x 0.4 s enqueue, a 1.6 s spin), not 8
