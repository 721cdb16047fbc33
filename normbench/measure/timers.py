"""Timers: CUDA events with warm-up, L2 flush (cold) and optional CUDA graphs; ``perf_counter`` on CPU.

Both return the per-repetition samples; :func:`normbench.measure.stats.summarize` turns them into median and IQR.
The CUDA paths (flush kinds, keep-ahead, graphs) are unit-tested on the CPU only as far as their pure logic goes;
their effect on the figures must be verified on a GPU (docs/measurement.md, "Verify on a GPU").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch


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
    #: whole batch, so small kernels are timed back to back on the GPU rather than at the host's launch rate.
    keep_ahead: bool = False

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


FLUSHES = ("zero", "rw")


def flush_bytes(l2_bytes: int) -> int:
    """Size of the flush buffer: twice the L2 size, at least 256 MiB."""
    return max(2 * int(l2_bytes or 0), 256 * 2**20)


class L2Flusher:
    """Evicts the GPU's L2 cache before a cold repetition.

    ``"zero"`` writes a buffer of :func:`flush_bytes` (what Triton's ``do_bench`` does). It leaves L2 full of dirty
    lines, which the measured kernel's own traffic must write back to HBM first, so it may *add* time to the
    measurement. ``"rw"`` writes the buffer and then reads it back (a sum), leaving L2 holding clean lines that are
    evicted for free. Which one changes the figures is a GPU measurement (docs/measurement.md).
    """

    def __init__(self, device: torch.device, kind: str = "zero"):
        if kind not in FLUSHES:
            raise ValueError(f"unknown L2 flush {kind!r}; use {', '.join(FLUSHES)}")
        props = torch.cuda.get_device_properties(device)
        self.kind = kind
        self.buf = torch.empty(flush_bytes(getattr(props, "L2_cache_size", 0)) // 4, dtype=torch.float32,
                               device=device)
        self._sink = torch.empty((), dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()
        if self.kind == "rw":
            torch.sum(self.buf, out=self._sink)


def spin_cycles(batch: int, launch_s: float = 20e-6, clock_hz: float = 1.5e9) -> int:
    """Cycles for ``torch.cuda._sleep`` to cover the host enqueueing ``batch`` repetitions (keep-ahead).

    About 20 µs of host time per repetition (event records, the call, a flush) at a conservative clock; the
    spin only has to outlast the enqueueing, and time spent spinning is outside every event pair.
    """
    return int(batch * launch_s * clock_hz)


def _capture_graph(fn: Callable[[], object], device) -> Callable[[], object]:
    """Capture ``fn`` into a CUDA graph (after a warm-up on a side stream); returns the replay callable."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    holder = {}
    with torch.cuda.graph(graph):
        holder["out"] = fn()  # keeps the graph's output buffers alive
    graph._normbench_out = holder
    return graph.replay


def cuda_time(fn: Callable[[], object], settings: TimerSettings, device, *, cold: bool = True,
              pre: Callable[[], object] | None = None, graphs: bool = False) -> tuple[list[float], bool]:
    """Seconds per call of ``fn`` from CUDA events; returns (samples, whether a CUDA graph was used).

    ``cold`` flushes L2 (``settings.flush``) before each repetition (outside the events); ``pre`` runs untimed
    before the flush. ``graphs`` replays ``fn`` as a CUDA graph (not with ``pre``); if capture fails it falls back
    to plain calls. Events, streams and the flush buffer live on ``device`` (made current for the whole timing),
    not on whatever device happens to be current.
    """
    device = torch.device(device)
    with torch.cuda.device(device):
        return _cuda_time(fn, settings, device, cold, pre, graphs)


def _cuda_time(fn, settings, device, cold, pre, graphs):
    flush = L2Flusher(device, settings.flush) if cold else None
    used_graph = False
    call = fn
    if graphs and pre is None:
        try:
            call = _capture_graph(fn, device)
            used_graph = True
        except Exception:  # some ops cannot be captured; timing them without a graph is still correct
            torch.cuda.synchronize(device)
            call = fn
    for _ in range(settings.warmup):
        if pre is not None:
            pre()
        call()
    torch.cuda.synchronize(device)
    samples: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps:
        batch = min(settings.max_reps - len(samples), max(settings.min_reps, 10))
        if settings.keep_ahead:
            torch.cuda._sleep(spin_cycles(batch))
        events = []
        for _ in range(batch):
            if pre is not None:
                pre()
            if flush is not None:
                flush()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        for start, end in events:
            dt = start.elapsed_time(end) / 1e3
            samples.append(dt)
            total += dt
        if settings.done(len(samples), total):
            break
    return samples, used_graph


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


def interleaved_time(fns: dict, settings: TimerSettings, pres: dict | None = None, device: str = "cpu",
                     seed: int = 0, order_log: list | None = None, slow_rounds: int = 3) -> dict:
    """Time several callables head to head: every one warmed up, then rounds in which each runs once, in an order
    shuffled every round (as Google Benchmark's random interleaving), so all of them see the same stretch of the
    machine's state and round ``i`` of one pairs with round ``i`` of another. Returns ``{key: [seconds per round]}``
    (equal lengths). ``pres[key]`` (untimed) runs right before its callable, as in :func:`cpu_time`. On CUDA each
    call is timed with its own pair of events and a round ends with a synchronisation (hot: nothing is flushed).

    Rounds stop by ``settings.done`` applied to the rounds taken and the mean time per callable accumulated, except
    that slow calls stop at ``settings.max_time`` only after ``slow_rounds`` rounds (a paired interval needs them).
    ``seed`` fixes the shuffles (recorded); ``order_log`` receives each round's order.
    """
    import random

    pres = pres or {}
    keys = list(fns)
    rng = random.Random(seed)
    cuda = str(device).startswith("cuda")
    for _ in range(settings.warmup):
        for k in keys:
            if pres.get(k) is not None:
                pres[k]()
            fns[k]()
    if cuda:
        torch.cuda.synchronize(device)
    samples: dict = {k: [] for k in keys}
    total = 0.0
    rounds = 0
    while rounds < settings.max_reps:
        order = keys[:]
        rng.shuffle(order)
        if order_log is not None:
            order_log.append(order)
        took = {}
        for k in order:
            if pres.get(k) is not None:
                pres[k]()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fns[k]()
                end.record()
                took[k] = (start, end)
            else:
                t0 = time.perf_counter()
                fns[k]()
                took[k] = time.perf_counter() - t0
        if cuda:
            torch.cuda.synchronize(device)
            took = {k: s.elapsed_time(e) / 1e3 for k, (s, e) in took.items()}
        for k in keys:
            samples[k].append(took[k])
        rounds += 1
        total += sum(took.values()) / len(keys)
        if rounds >= settings.max_reps or (rounds >= settings.min_reps and total >= settings.min_time) \
                or (rounds >= max(3, slow_rounds) and total >= settings.max_time):
            break
    return samples
