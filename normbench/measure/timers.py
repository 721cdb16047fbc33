"""Timers: CUDA events kept ahead of the host, with warm-up, L2 flush (cold) and optional CUDA graphs; ``perf_counter``
on CPU.

Both return the per-repetition samples; :func:`normbench.measure.summary.summarize` turns them into median and IQR. On a
GPU the events time the GPU only while its queue is ahead of the host: :class:`KeepAhead` queues a calibrated spin
before each batch and checks that the host enqueued the whole batch while it ran; the host's own time per call is kept
beside the GPU time (``CudaTiming.host_s``), and a timing that could not be kept ahead says so
(:func:`host_bound_reason`). Every CUDA operation goes through :class:`CudaOps`, so the tests drive these timers with a
fake GPU timeline (``tests/fake_gpu.py``); their effect on real figures is verified on a GPU (docs/measurement.md,
"GPU time and host time").
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from normbench import device as seam
from normbench.device import FLUSHES, CudaOps, L2Flusher, flush_bytes  # noqa: F401  (their home was here)
from normbench.measure.clock import (  # noqa: F401  (the clock check's names, re-exported)
    CLOCK_LIMIT_S,
    CLOCK_LOW,
    CLOCK_MIN_WORK_S,
    CLOCK_READY,
    MIN_SPIN_S,
    ClockWatch,
    spin_cycles,
)


@dataclass(frozen=True)
class TimerSettings:
    """How long to warm up and how many repetitions to take.

    Repetitions stop at ``max_reps``, once at least ``min_reps`` were taken and ``min_time`` seconds of
    timed work accumulated, or (for slow calls) once ``max_time`` seconds accumulated over at least 3
    repetitions. Warm-up runs ``warmup`` calls (compilation and autotuning happen there).
    """

    warmup: int = 5
    min_reps: int = 20
    max_reps: int = 1000
    min_time: float = 0.5
    max_time: float = 30.0
    #: cold timing's L2 flush: "zero" (``zero_()`` of a buffer, as Triton's ``do_bench``) or "rw" (write, then
    #: read back, a buffer larger than L2, so the lines left behind are clean: see :class:`L2Flusher`).
    flush: str = "zero"
    #: CUDA only: before each batch of repetitions, queue a spin kernel long enough for the host to enqueue the
    #: whole batch, and check that it was (:class:`KeepAhead`), so the events time the GPU, not the host's launches.
    keep_ahead: bool = True

    @classmethod
    def quick(cls) -> "TimerSettings":
        # No warm-up: the core's float64 check has already run (and compiled) the forward and backward once.
        return cls(warmup=0, min_reps=5, max_reps=20, min_time=0.05, max_time=0.3)

    def done(self, reps: int, total: float) -> bool:
        return (reps >= self.max_reps or (reps >= self.min_reps and total >= self.min_time)
                or (reps >= 3 and total >= self.max_time))


def minor_faults() -> int:
    """Minor page faults of this process so far (all its threads); 0 where ``resource`` is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def cpu_time(fn: Callable[[], object], settings: TimerSettings, pre: Callable[[], object] | None = None,
             faults: list | None = None) -> list[float]:
    """Seconds per call of ``fn`` on the CPU; ``pre`` (untimed) runs before each call, e.g. to rebuild a graph.

    ``faults``, if given, receives the minor page faults of each timed call. glibc maps a block above its mmap
    threshold (at most 32 MiB) fresh on every allocation and unmaps it on free, so a call that allocates a large
    output first-touches each of its pages (a fault per 4 KiB): part of what eager PyTorch costs on a CPU, but not
    of a copy into a preallocated buffer (the ceiling). Records state it (``metrics.page_faults_per_rep``)."""
    for _ in range(settings.warmup):
        if pre is not None:
            pre()
        fn()
    samples: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps:
        if pre is not None:
            pre()
        f0 = minor_faults() if faults is not None else 0
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if faults is not None:
            faults.append(minor_faults() - f0)
        samples.append(dt)
        total += dt
        if settings.done(len(samples), total):
            break
    return samples


# --- GPU timing: CUDA events, the GPU's queue kept ahead of the host ------------------------------------------------

#: Repetitions per keep-ahead batch, at most. The host must enqueue a whole batch before the spin ends, and a CUDA
#: stream holds about a thousand pending launches before the next launch blocks the host (a host launching small
#: kernels back to back stalls after ~1000 of them: Stack Overflow question 53970187, NVIDIA's forum thread 68937);
#: a blocked host waits for the spin to run out. A repetition queues the flush, two events, the untimed ``pre`` and
#: the call's own kernels, so 8 repetitions stay under the limit for calls of up to ~120 launches each (an eager
#: backward launches 10-30). A call with more fails the check, whose retry halves the batch (down to 1).
KEEP_AHEAD_BATCH = 8
#: The spin lasts this many times the host's measured enqueue time of the previous batch (scaled to this batch's
#: repetitions): the 2x is room for the host's jitter between one batch and the next.
SPIN_FACTOR = 2.0
#: A batch that failed the check is timed again once, with a spin this many times the failed batch's own (longer)
#: enqueue time and half as many repetitions; when that fails too, the record is flagged ``host_bound``.
RETRY_FACTOR = 4.0
#: The least host time per repetition a spin plans for, and the guess before any was measured.
MIN_HOST_S = 20e-6
#: A batch is cut to fewer repetitions where its spin would last longer than this (a slow host path): an interrupt
#: waits for the spin at most about this long.
MAX_SPIN_S = 2.0
#: Cycles of each calibration spin: ~0.5 ms at an H200's 1980 MHz boost clock, ~2.9 ms at its 345 MHz idle clock.
CALIBRATION_CYCLES = 1_000_000
#: Without keep-ahead nothing checks that the GPU never waited for the host inside the events: the record is flagged
#: ``host_bound`` when the host's time per call is at least this share of the GPU time the events measured.
HOST_SHARE_LIMIT = 0.5


class KeepAhead:
    """Keeps the GPU's queue ahead of the host for each batch of timed calls, and checks that it did.

    Before a batch the GPU is idle (the previous batch was synchronised). A spin kernel is queued first, lasting
    :data:`SPIN_FACTOR` times the host's enqueue time of the previous batch (the first batch: of one timed unit in the
    warm-up, its flush and event records included), then an event (``spun``); while the GPU spins, the host enqueues
    the whole batch. If ``spun`` is still pending once the last call is enqueued, every repetition was queued before
    the GPU reached it, so no event pair contains time the GPU waited for the host. If it completed, the batch is
    timed again with a longer spin and half the repetitions; a second failure counts in ``failed`` (the record is
    flagged ``host_bound``). The spin's clock rate is calibrated with events after warm-up (GPU clocks boost with
    load: 345 -> 1980 MHz on an H200) and again from every batch's own spin; the fastest rate seen is used, so a
    slower clock only makes a spin longer; each batch's rate is kept (``clock.batch_clocks``).
    """

    def __init__(self, ops, per_unit_s: float = MIN_HOST_S, clock: ClockWatch | None = None):
        self.ops = ops
        self.per_unit_s = max(float(per_unit_s), MIN_HOST_S)  # host enqueue time of one unit (repetition or round)
        self.rate_hz: float | None = None
        self.batches = self.retries = self.failed = 0
        self.spin_s = 0.0  # GPU seconds spent spinning, as planned
        self.cap = KEEP_AHEAD_BATCH  # units per batch; a retry that passed with fewer lowers it (a fuller queue)
        self.clock = clock if clock is not None else ClockWatch(None)
        self.spun = None  # the event that ends the spin the host is now enqueueing behind
        self.drained = False  # the queue ran dry behind some call of this attempt (``respin``)

    def _observe(self, cycles: int, seconds: float, batch: bool = False) -> None:
        if seconds > 0:
            self.rate_hz = max(self.rate_hz or 0.0, cycles / seconds)
            if batch:
                self.clock.batch_clocks.append(cycles / seconds)

    def calibrate(self, spins: int = 2) -> float:
        """Time ``spins`` spins of :data:`CALIBRATION_CYCLES` with events; returns the clock rate (cycles/s)."""
        for _ in range(spins):
            a, b = self.ops.event(), self.ops.event()
            a.record()
            self.ops.spin(CALIBRATION_CYCLES)
            b.record()
            self.ops.sync()
            self._observe(CALIBRATION_CYCLES, a.elapsed_time(b) / 1e3)
        if not self.rate_hz:
            raise RuntimeError("the spin kernel's clock rate could not be calibrated (its events measured no time)")
        return self.rate_hz

    def respin(self, units: float, factor: float = SPIN_FACTOR) -> None:
        """Queue a fresh spin for ``units`` more units mid-batch (the queue ran dry behind one call of an interleaved
        round: the calls after it get a spin of their own) and make its end the event checked. The attempt is then
        not kept ahead (it is retried once, as any)."""
        self.drained = True
        self.ops.spin(spin_cycles(min(max(factor * self.per_unit_s * units, MIN_SPIN_S), MAX_SPIN_S), self.rate_hz))
        self.spun = self.ops.event()
        self.spun.record()

    def _attempt(self, units: int, enqueue: Callable[[int], object], factor: float) -> tuple[bool, object]:
        seconds = min(max(factor * self.per_unit_s * units, MIN_SPIN_S), MAX_SPIN_S)
        cycles = spin_cycles(seconds, self.rate_hz)
        t0 = self.ops.clock()
        begin, spun = self.ops.event(), self.ops.event()
        begin.record()
        self.ops.spin(cycles)
        spun.record()
        self.spun, self.drained = spun, False
        out = enqueue(units)
        t1 = self.ops.clock()
        # still spinning: the host enqueued the whole batch before the GPU needed it
        ahead = not self.spun.query() and not self.drained
        self.ops.sync()
        self._observe(cycles, begin.elapsed_time(spun) / 1e3, batch=True)
        self.per_unit_s = max((t1 - t0) / units, MIN_HOST_S)
        self.spin_s += seconds
        return ahead, out

    def run(self, units: int, enqueue: Callable[[int], object], halve: bool = True) -> tuple[bool, object]:
        """``enqueue(n)`` queues ``n`` units behind a spin; checked, synchronised, and retried once on failure (with
        half the units where ``halve``). Returns (whether the last attempt was kept ahead, what its ``enqueue``
        returned); its events are complete."""
        if halve:  # a slow host path: fewer units per batch rather than a spin of many seconds
            units = max(1, min(units, int(MAX_SPIN_S / (SPIN_FACTOR * self.per_unit_s))))
        base = self.per_unit_s
        ok, out = self._attempt(units, enqueue, SPIN_FACTOR)
        if not ok:
            self.retries += 1
            units = max(1, units // 2) if halve else units
            ok, out = self._attempt(units, enqueue, RETRY_FACTOR)
            if ok:
                self.cap = min(self.cap, units)
            else:
                self.failed += 1
                # a batch that waited for the device measured that wait, not the host's pace: planning on it would
                # grow every later spin (a call that synchronises on every repetition)
                self.per_unit_s = base
        self.batches += 1
        return ok, out

    def info(self) -> dict:
        """What a record keeps of it (``metrics.keep_ahead``)."""
        return {"batches": self.batches, "retries": self.retries, "failed": self.failed,
                "spin_clock_hz": self.rate_hz, "spin_s": self.spin_s}


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def host_bound_reason(gpu_s: list[float], host_s: list[float], keep_ahead: dict | None) -> str | None:
    """Why a GPU timing measured the host rather than the GPU (the ``host_bound`` flag's reason), or None.

    With keep-ahead: some batch failed its check even after the retry. Without: the host's median time per call is at
    least :data:`HOST_SHARE_LIMIT` of the events' median, and nothing checked that the GPU never waited for it."""
    if not gpu_s or not host_s:
        return None
    gpu, host = statistics.median(gpu_s), statistics.median(host_s)
    if keep_ahead is not None:
        if not keep_ahead.get("failed"):
            return None
        return (f"the GPU's queue ran dry before the host had enqueued the batch in {keep_ahead['failed']} of "
                f"{keep_ahead['batches']} batches, even after a retry with a spin {RETRY_FACTOR:g}x the host's "
                f"enqueue time: those repetitions include time the GPU waited for the host (host {_us(host)} per "
                f"call, events {_us(gpu)}); the call synchronises with the GPU, or its host path varies too much to "
                "keep ahead of")
    if host >= HOST_SHARE_LIMIT * gpu:
        return (f"timed without keep-ahead while the host spent {_us(host)} per call, at least "
                f"{100 * HOST_SHARE_LIMIT:.0f}% of the {_us(gpu)} the events measured: the GPU may have waited for "
                "the host inside the events; time it with keep-ahead (the default on CUDA)")
    return None


def host_info(gpu_s: list[float], host_s: list[float], keep_ahead: dict | None, clock: dict | None = None,
              low_clock: str | None = None, l2_flush: str | None = None) -> dict:
    """``{"host_s": median host seconds per call (None if none was > 0), "keep_ahead": the check or None,
    "host_bound": the flag's reason or None, "clock": the clock check (``ClockWatch.info``) or None, "low_clock": that
    flag's reason or None, "l2_flush": the flush run before each timed call, or None (hot)}``."""
    host = statistics.median(host_s) if host_s else None
    return {"host_s": host if host and host > 0 else None, "keep_ahead": keep_ahead,
            "host_bound": host_bound_reason(gpu_s, host_s, keep_ahead), "clock": clock, "low_clock": low_clock,
            "l2_flush": l2_flush}


@dataclass
class CudaTiming:
    """What :func:`cuda_timing` measured: GPU seconds per repetition (events), whether a CUDA graph was replayed,
    the host's seconds in each timed call (no synchronisation inside), the keep-ahead check (None when off), the
    clock check, and the L2 flush run before each timed call (None: hot, nothing flushed)."""

    samples: list[float]
    used_graph: bool
    host_s: list[float]
    keep_ahead: dict | None
    clock: ClockWatch | None = None
    l2_flush: str | None = None

    def host_bound(self) -> str | None:
        return host_bound_reason(self.samples, self.host_s, self.keep_ahead)

    def low_clock(self) -> str | None:
        return self.clock.low_reason() if self.clock is not None else None

    def host_info(self) -> dict:
        """What a record keeps of it beside the GPU time (``normbench.measure.group.build_record``'s ``host``)."""
        return host_info(self.samples, self.host_s, self.keep_ahead,
                         self.clock.info() if self.clock is not None else None, self.low_clock(), self.l2_flush)


def cuda_time(fn: Callable[[], object], settings: TimerSettings, device, *, cold: bool = True,
              pre: Callable[[], object] | None = None, graphs: bool = False) -> tuple[list[float], bool]:
    """(seconds per call of ``fn`` from CUDA events, whether a CUDA graph was used): :func:`cuda_timing`'s samples."""
    t = cuda_timing(fn, settings, device, cold=cold, pre=pre, graphs=graphs)
    return t.samples, t.used_graph


def _max_clock(ops) -> float | None:
    get = getattr(ops, "max_clock_hz", None)
    return get() if get is not None else None


def cuda_timing(fn: Callable[[], object], settings: TimerSettings, device, *, cold: bool = True,
                pre: Callable[[], object] | None = None, graphs: bool = False,
                ops: CudaOps | None = None) -> CudaTiming:
    """Time ``fn`` on a GPU with CUDA events, one pair per repetition (see :class:`CudaTiming`).

    ``cold`` flushes L2 (``settings.flush``) before each repetition (outside the events); ``pre`` runs untimed
    before the flush. ``graphs`` replays ``fn`` as a CUDA graph (not with ``pre``); if capture fails it falls back
    to plain calls. Warm-up runs whole timed units (``pre``, flush, events, call), so every kernel a repetition
    launches ran once before timing, then the clock check (:class:`ClockWatch`). With ``settings.keep_ahead`` (the
    default) each batch of repetitions runs behind a spin and is checked (:class:`KeepAhead`). Events, streams and
    the flush buffer live on ``device`` (made current for the whole timing), not on whatever device happens to be
    current. ``ops``: the CUDA operations (default: the device seam's, ``normbench.device``; tests pass a fake).
    """
    ops = ops or seam.get().ops(device)
    with ops.context():
        return _cuda_timing(fn, settings, ops, cold, pre, graphs)


def _cuda_timing(fn, settings, ops, cold, pre, graphs) -> CudaTiming:
    flush = ops.flusher(settings.flush) if cold else None
    used_graph = False
    call = fn
    if graphs and pre is None:
        try:
            call = ops.capture(fn)
            used_graph = True
        except Exception:  # some ops cannot be captured; timing them without a graph is still correct
            ops.sync()
            call = fn
    call = ops.wrap(call)  # as the device runs it (a rehearsal: the CPU work, and its GPU time simulated)
    pre = ops.wrap(pre) if pre is not None else None

    def unit(events: list | None = None, hosts: list | None = None) -> None:
        """One repetition as it is timed: ``pre``, the flush, the events around the call."""
        if pre is not None:
            pre()
        if flush is not None:
            flush()
        start, end = ops.event(), ops.event()
        start.record()
        h0 = ops.clock()
        call()
        if hosts is not None:
            hosts.append(ops.clock() - h0)
        end.record()
        if events is not None:
            events.append((start, end))

    last = None
    for _ in range(max(settings.warmup, 1)):  # every kernel of a repetition (the flush's too) runs once first
        t0 = ops.clock()
        unit()
        last = ops.clock() - t0
    ops.sync()
    clock = ClockWatch(_max_clock(ops))
    clock.warm(ops, unit)
    ahead = None
    if settings.keep_ahead:
        ahead = KeepAhead(ops, last or MIN_HOST_S, clock)
        ahead.calibrate()

    def enqueue(n: int):
        events, hosts = [], []
        for _ in range(n):
            unit(events, hosts)
        return events, hosts

    samples: list[float] = []
    host_s: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps:
        left = settings.max_reps - len(samples)
        if ahead is not None:
            _, (events, hosts) = ahead.run(min(left, ahead.cap), enqueue)
        else:
            events, hosts = enqueue(min(left, max(settings.min_reps, 10)))
            ops.sync()
        host_s += hosts
        for start, end in events:
            dt = start.elapsed_time(end) / 1e3
            samples.append(dt)
            total += dt
        if settings.done(len(samples), total):
            break
    return CudaTiming(samples, used_graph, host_s, ahead.info() if ahead is not None else None, clock,
                      settings.flush if cold else None)


def timing_label(device: str, harness_timer: str, cold: bool) -> str:
    """What a record's ``config.timing`` says, from how it was actually timed.

    ``cold``: CUDA events with L2 flushed between repetitions; ``hot``: CUDA events without a flush, or
    ``perf_counter`` on a CPU (where nothing is flushed); ``host``: a host clock around a synchronised GPU call
    (pytest-benchmark's and ASV's timers), which includes launch and synchronisation overhead and no flush.
    """
    if not str(device).startswith("cuda"):
        return "hot"
    if harness_timer == "events":
        return "cold" if cold else "hot"
    return "host"


@dataclass
class Interleaved:
    """What :func:`interleaved_timing` measured: ``{key: [seconds per round]}`` (equal lengths); on CUDA also
    ``{key: [host seconds per call]}``, the keep-ahead check of the rounds (None when off or on a CPU) with each key's
    own failed rounds (``failed_by_key``: rounds in which the queue ran dry behind that key's call, even after the
    retry), the clock check, and the L2 flush run before each timed call (None: hot)."""

    samples: dict
    host_s: dict
    keep_ahead: dict | None
    failed_by_key: dict | None = None
    clock: ClockWatch | None = None
    l2_flush: str | None = None

    def _keep_ahead(self, key) -> dict | None:
        if self.keep_ahead is None:
            return None
        return {**self.keep_ahead, "failed": (self.failed_by_key or {}).get(key, 0)}

    def host_bound(self, key) -> str | None:
        """Judged on ``key``'s own calls: a round that ran dry behind another key's call is not held against it."""
        return host_bound_reason(self.samples[key], self.host_s.get(key) or [], self._keep_ahead(key))

    def low_clock(self) -> str | None:
        return self.clock.low_reason() if self.clock is not None else None

    def host_info(self, key) -> dict | None:
        """As :meth:`CudaTiming.host_info`, for ``key``; None on a CPU."""
        if key not in self.host_s:
            return None
        return host_info(self.samples[key], self.host_s[key], self._keep_ahead(key),
                         self.clock.info() if self.clock is not None else None, self.low_clock(), self.l2_flush)


def interleaved_time(fns: dict, settings: TimerSettings, pres: dict | None = None, device: str = "cpu",
                     seed: int = 0, order_log: list | None = None, slow_rounds: int = 3) -> dict:
    """``{key: [seconds per round]}``: :func:`interleaved_timing`'s samples."""
    return interleaved_timing(fns, settings, pres, device, seed, order_log, slow_rounds).samples


def interleaved_timing(fns: dict, settings: TimerSettings, pres: dict | None = None, device: str = "cpu",
                       seed: int = 0, order_log: list | None = None, slow_rounds: int = 3,
                       ops: CudaOps | None = None, cold: bool = False) -> Interleaved:
    """Time several callables head to head: every one warmed up, then rounds in which each runs once, in an order
    shuffled every round (as Google Benchmark's random interleaving), so all of them see the same stretch of the
    machine's state and round ``i`` of one pairs with round ``i`` of another. ``pres[key]`` (untimed) runs right
    before its callable, as in :func:`cpu_time`. On CUDA each call is timed with its own pair of events, with L2
    flushed (``settings.flush``) before it, outside the events, where ``cold``; its host time is kept, and a round
    ends with a synchronisation. The warm-up runs whole rounds as they are timed (flush and events included), then
    the clock check (:class:`ClockWatch`). With ``settings.keep_ahead`` (the default) each round is queued behind a
    spin and checked, as a batch of :func:`cuda_timing` is (a round that fails is timed again once with a longer
    spin: :class:`KeepAhead`), and each key is judged on its own calls: where the queue ran dry behind one call, the
    calls after it in the round get a fresh spin, and only that key's record counts the round as failed. ``ops``: the
    CUDA operations (default: the device seam's; tests pass a fake).

    Rounds stop by ``settings.done`` applied to the rounds taken and the mean time per callable accumulated, except
    that slow calls stop at ``settings.max_time`` only after ``slow_rounds`` rounds (a paired interval needs them).
    ``seed`` fixes the shuffles (recorded); ``order_log`` receives each round's order.
    """
    cuda = ops is not None or str(device).startswith("cuda")
    if not cuda:
        if cold:
            raise ValueError("cold timing (L2 flushed before each call) needs CUDA; CPU timing is hot")
        return _interleaved(fns, settings, pres or {}, None, seed, order_log, slow_rounds, False)
    ops = ops or seam.get().ops(device)
    with ops.context():
        return _interleaved(fns, settings, pres or {}, ops, seed, order_log, slow_rounds, cold)


def _interleaved(fns, settings, pres, ops, seed, order_log, slow_rounds, cold) -> Interleaved:
    import random

    keys = list(fns)
    rng = random.Random(seed)
    cuda = ops is not None
    clock = ops.clock if cuda else time.perf_counter
    flush = ops.flusher(settings.flush) if cuda and cold else None
    if cuda:  # as the device runs them (a rehearsal: the CPU work, and its GPU time simulated)
        fns = {k: ops.wrap(f) for k, f in fns.items()}
        pres = {k: ops.wrap(p) for k, p in pres.items() if p is not None}
    ahead = None

    def call(k, took: dict | None = None, hosts: dict | None = None) -> None:
        """One timed call of ``k`` as a round runs it: ``pre``, the flush, the events around the call."""
        if pres.get(k) is not None:
            pres[k]()
        if flush is not None:
            flush()
        start, end = ops.event(), ops.event()
        start.record()
        h0 = clock()
        fns[k]()
        if hosts is not None:
            hosts[k] = clock() - h0
        end.record()
        if took is not None:
            took[k] = (start, end)

    def enqueue(order):
        took, hosts, dry = {}, {}, []
        for i, k in enumerate(order):
            call(k, took, hosts)
            if ahead is not None and ahead.spun.query():  # the queue ran dry behind k's call
                dry.append(k)
                if i + 1 < len(order):
                    ahead.respin((len(order) - i - 1) / len(order))
        return took, hosts, dry

    last = None
    for _ in range(max(settings.warmup, 1 if cuda else 0)):
        t0 = clock()
        for k in keys:
            if cuda:
                call(k)
            else:
                if pres.get(k) is not None:
                    pres[k]()
                fns[k]()
        last = clock() - t0
    watch = None
    failed_by_key = {k: 0 for k in keys} if cuda else None
    if cuda:
        ops.sync()
        watch = ClockWatch(_max_clock(ops))
        watch.warm(ops, lambda: [call(k) for k in keys])
        if settings.keep_ahead:
            ahead = KeepAhead(ops, last or MIN_HOST_S * len(keys), watch)
            ahead.calibrate()
    samples: dict = {k: [] for k in keys}
    host_s: dict = {k: [] for k in keys} if cuda else {}
    total = 0.0
    rounds = 0

    while rounds < settings.max_reps:
        order = keys[:]
        rng.shuffle(order)
        if order_log is not None:
            order_log.append(order)
        if cuda:
            if ahead is not None:
                ok, (took, hosts, dry) = ahead.run(1, lambda _n: enqueue(order), halve=False)
                if not ok:
                    for k in dry or order[-1:]:
                        failed_by_key[k] += 1
            else:
                took, hosts, _ = enqueue(order)
                ops.sync()
            took = {k: s.elapsed_time(e) / 1e3 for k, (s, e) in took.items()}
            for k in keys:
                host_s[k].append(hosts[k])
        else:
            took = {}
            for k in order:
                if pres.get(k) is not None:
                    pres[k]()
                t0 = time.perf_counter()
                fns[k]()
                took[k] = time.perf_counter() - t0
        for k in keys:
            samples[k].append(took[k])
        rounds += 1
        total += sum(took.values()) / len(keys)
        if rounds >= settings.max_reps or (rounds >= settings.min_reps and total >= settings.min_time) \
                or (rounds >= max(3, slow_rounds) and total >= settings.max_time):
            break
    return Interleaved(samples, host_s, ahead.info() if ahead is not None else None, failed_by_key, watch,
                       settings.flush if flush is not None else None)
