"""Timers: CUDA events with warm-up, L2 flush (cold) and optional CUDA graphs; ``perf_counter`` on CPU.

Both return the per-repetition samples; :func:`normbench.measure.stats.summarize` turns them into median and IQR.
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

    @classmethod
    def quick(cls) -> "TimerSettings":
        # No warm-up: the core's float64 check has already run (and compiled) the forward and backward once.
        return cls(warmup=0, min_reps=5, max_reps=20, min_time=0.05, max_time=0.3)

    def done(self, reps: int, total: float) -> bool:
        return (reps >= self.max_reps or (reps >= self.min_reps and total >= self.min_time)
                or (reps >= 3 and total >= self.max_time))


def cpu_time(fn: Callable[[], object], settings: TimerSettings, pre: Callable[[], object] | None = None) -> list[float]:
    """Seconds per call of ``fn`` on the CPU; ``pre`` (untimed) runs before each call, e.g. to rebuild a graph."""
    for _ in range(settings.warmup):
        if pre is not None:
            pre()
        fn()
    samples: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps:
        if pre is not None:
            pre()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        samples.append(dt)
        total += dt
        if settings.done(len(samples), total):
            break
    return samples


class L2Flusher:
    """Evicts the GPU's L2 cache by writing a buffer of twice its size, at least 256 MiB (cold timing)."""

    def __init__(self, device: torch.device):
        props = torch.cuda.get_device_properties(device)
        size = max(2 * int(getattr(props, "L2_cache_size", 0) or 0), 256 * 2**20)
        self.buf = torch.empty(size // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


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

    ``cold`` flushes L2 before each repetition (outside the events); ``pre`` runs untimed before the flush.
    ``graphs`` replays ``fn`` as a CUDA graph (not with ``pre``); if capture fails it falls back to plain calls.
    """
    device = torch.device(device)
    flush = L2Flusher(device) if cold else None
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
