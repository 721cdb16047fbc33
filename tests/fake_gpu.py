"""A fake GPU timeline for the GPU timers' CPU tests: the interface of ``normbench.measure.timers.CudaOps`` over a
simulated host clock and one in-order CUDA stream.

The model, and nothing about what a timer should report:

* the host has a clock; every host action (a launch, an event record, a synchronisation, a call's own Python work)
  advances it;
* the stream runs queued operations in order: one starts when the previous one has ended *and* the host has
  launched it (a GPU never runs ahead of the host), and lasts its own GPU time;
* the launch queue holds ``queue`` operations that have not finished; a launch into a full queue blocks the host
  until the oldest finishes (the real limit is about a thousand launches per stream);
* an event is a queued operation of no duration: it completes when the GPU reaches it; ``query()`` says whether it
  has by the host's time now, ``elapsed_time`` (milliseconds, as torch's) refuses events that have not completed;
* the spin (``torch.cuda._sleep``) lasts its cycles at the SM clock, which runs at ``idle_hz`` until the GPU has been
  busy for ``boost_after_s`` and at ``boost_hz`` after (an H200 boosts from 345 to 1980 MHz);
* with ``graphs=True`` a CUDA graph can be captured: while capturing, a launch is recorded in the graph, not run, and
  a synchronisation fails (as CUDA refuses one in a capture); a replay is one launch whose GPU time is the sum of the
  recorded kernels'. Without it, capture always fails (the timers then fall back to plain calls).

:func:`install` points ``torch.cuda``'s calls that the real ``timers.CudaOps`` and ``timers._capture_graph`` make at
a fake, so the real code runs on a CPU; :func:`cuda_on_cpu` also lets ``measure_group`` and ``measure_set`` take
"cuda" cases (modules and tensors stay on the CPU, each timed call also runs a fake workload on the stream).
"""

from __future__ import annotations

import contextlib


class FakeEvent:
    def __init__(self, gpu: "FakeGPU"):
        self.gpu = gpu
        self.t: float | None = None  # when the GPU reaches it

    def record(self) -> None:
        self.gpu.host += self.gpu.record_s
        self.t, _ = self.gpu.enqueue(0.0)

    def query(self) -> bool:
        if self.t is None:
            return True  # torch: an event never recorded counts as complete
        return self.t <= self.gpu.host

    def elapsed_time(self, end: "FakeEvent") -> float:
        for e in (self, end):
            if e.t is None or e.t > self.gpu.host:
                raise RuntimeError("elapsed_time of an event the GPU has not reached yet (synchronise first)")
        return (end.t - self.t) * 1e3


class FakeGPU:
    """One simulated GPU stream and its host (see the module docstring). Times are in seconds."""

    def __init__(self, *, idle_hz: float = 345e6, boost_hz: float = 1980e6, boost_after_s: float = 0.0,
                 queue: int = 1024, launch_s: float = 2e-6, record_s: float = 1e-6, sync_s: float = 5e-6,
                 flush_s: float = 64e-6, graphs: bool = False, l2_bytes: int = 60 * 2**20):
        self.graphs, self.l2_bytes = graphs, l2_bytes
        self._capturing: list[float] | None = None  # the graph being captured: its kernels' GPU times
        self.captures = self.replays = 0
        self.idle_hz, self.boost_hz, self.boost_after_s = idle_hz, boost_hz, boost_after_s
        self.queue, self.launch_s, self.record_s, self.sync_s, self.flush_s = queue, launch_s, record_s, sync_s, flush_s
        self.host = 0.0
        self.gpu_free = 0.0   # when the last queued operation ends
        self.busy_s = 0.0     # GPU time run (or queued) so far: the clock boosts after boost_after_s of it
        self._ends: list[float] = []  # end times of operations that may not have finished yet
        self.spins: list[float] = []  # each spin's duration
        self.launches = 0

    # --- the stream ---------------------------------------------------------------------------------------------
    def enqueue(self, seconds: float, *, cycles: int | None = None) -> tuple[float, float]:
        """Queue one operation (``seconds`` of GPU time, or ``cycles`` at the SM clock); returns (start, end)."""
        self._ends = [e for e in self._ends if e > self.host]
        if len(self._ends) >= self.queue:  # a full queue: the launch blocks until the oldest operation finishes
            self.host = sorted(self._ends)[len(self._ends) - self.queue]
            self._ends = [e for e in self._ends if e > self.host]
        start = max(self.host, self.gpu_free)
        if cycles is not None:
            seconds = self._spin_seconds(cycles)
            self.spins.append(seconds)
        end = start + seconds
        self.busy_s += seconds
        self.gpu_free = end
        self._ends.append(end)
        return start, end

    def _spin_seconds(self, cycles: int) -> float:
        idle_left = max(0.0, self.boost_after_s - self.busy_s)
        if cycles <= idle_left * self.idle_hz:
            return cycles / self.idle_hz
        return idle_left + (cycles - idle_left * self.idle_hz) / self.boost_hz

    def kernel(self, gpu_s: float) -> None:
        self.host += self.launch_s
        if self._capturing is not None:  # recorded in the graph, not run
            self._capturing.append(gpu_s)
            return
        self.launches += 1
        self.enqueue(gpu_s)

    # --- the CudaOps interface ----------------------------------------------------------------------------------
    def context(self):
        return contextlib.nullcontext()

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def spin(self, cycles: int) -> None:
        self.host += self.launch_s
        self.enqueue(0.0, cycles=int(cycles))

    def sync(self) -> None:
        if self._capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.host = max(self.host, self.gpu_free) + self.sync_s

    def flusher(self, kind: str):
        return lambda: self.kernel(self.flush_s)

    def capture(self, fn):
        if not self.graphs:
            raise RuntimeError("the fake GPU captures no graphs")
        graph = FakeGraph(self)
        with graph.capturing():
            fn()
        return graph.replay

    def clock(self) -> float:
        return self.host

    # --- what a timed call does ---------------------------------------------------------------------------------
    def call(self, host_s: float, gpu_s: float, kernels: int = 1, *, waits: bool = False, stall=None):
        """A callable that spends ``host_s`` of host time launching ``kernels`` kernels of ``gpu_s`` in all; with
        ``waits`` (True, or a function of the call's index) it then waits for the GPU (as ``.item()`` does, or the
        caching allocator freeing memory); ``stall(i)`` adds host seconds to its ``i``-th call (a pause of the host:
        the garbage collector, another process). Calls are counted from 0, warm-up included."""
        count = [0]

        def fn():
            i = count[0]
            count[0] += 1
            if stall is not None:
                self.host += stall(i)
            for _ in range(kernels):
                self.host += host_s / kernels
                self.kernel(gpu_s / kernels)
            if waits(i) if callable(waits) else waits:
                self.sync()

        return fn


class FakeGraph:
    """A captured CUDA graph on the fake GPU (``torch.cuda.CUDAGraph``'s ``replay``, and ``torch.cuda.graph``'s
    capture as :meth:`capturing`)."""

    def __init__(self, gpu: FakeGPU):
        self.gpu = gpu
        self.kernels: list[float] = []

    @contextlib.contextmanager
    def capturing(self):
        gpu = self.gpu
        if not gpu.graphs:
            raise RuntimeError("the fake GPU captures no graphs")
        gpu._capturing = self.kernels
        try:
            yield self
        finally:
            gpu._capturing = None
        gpu.captures += 1

    def replay(self) -> None:
        gpu = self.gpu
        gpu.host += gpu.launch_s
        gpu.launches += 1
        gpu.replays += 1
        gpu.enqueue(sum(self.kernels))


class _FakeStream:
    def wait_stream(self, other) -> None:
        pass


def install(monkeypatch, gpu: FakeGPU) -> None:
    """Point the ``torch.cuda`` calls the real GPU timers make (events, the spin, synchronisation, the device
    context and properties, streams and graph capture) and ``CudaOps``' clock and L2 flush at ``gpu``, so
    ``normbench.measure.timers`` runs its real code (``CudaOps``, ``_capture_graph``) on the CPU. The L2 flush is the
    fake's (``L2Flusher`` allocates device memory)."""
    import types

    import torch

    from normbench.measure import reference, timers

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Event", lambda enable_timing=False, **kw: gpu.event())
    monkeypatch.setattr(cuda, "_sleep", gpu.spin)
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: gpu.sync())
    monkeypatch.setattr(cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "get_device_properties", lambda device=None: types.SimpleNamespace(
        name="fake GPU", L2_cache_size=gpu.l2_bytes, total_memory=141 * 2**30))
    monkeypatch.setattr(cuda, "Stream", lambda device=None, **kw: _FakeStream())
    monkeypatch.setattr(cuda, "current_stream", lambda device=None: _FakeStream())
    monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(cuda, "CUDAGraph", lambda *a, **kw: FakeGraph(gpu))
    monkeypatch.setattr(cuda, "graph", lambda g, **kw: g.capturing())
    monkeypatch.setattr(timers.CudaOps, "clock", staticmethod(gpu.clock))
    monkeypatch.setattr(timers.CudaOps, "flusher", lambda self, kind: gpu.flusher(kind))
    reference._cuda_caches.cache_clear()
    monkeypatch.setattr(reference, "_cuda_caches", lambda index: (gpu.l2_bytes, f"fake GPU {index} L2"))


def cuda_on_cpu(monkeypatch, gpu: FakeGPU, *, host_s: float, gpu_s: float, kernels: int = 1, waits=False,
                copy_gbps: float = 4000.0) -> None:
    """:func:`install`, and "cuda" cases measured by ``measure_group`` and ``measure_set`` on the CPU: ``Prepared``
    builds the module and tensors on the CPU, and each timed call of a pass (and each same-size copy) also runs a fake
    call on the stream (:meth:`FakeGPU.call`'s ``host_s``, ``gpu_s``, ``kernels``, ``waits``; the copy: one kernel
    moving its bytes at ``copy_gbps``). Everything else (the timers, the records, their flags) is the real code."""
    from normbench.measure import group, headtohead, reference

    install(monkeypatch, gpu)

    class OnFakeCuda(group.Prepared):
        def __init__(self, spec, backend, shape, dtype, device, seed=0, mode="train"):
            super().__init__(spec, backend, shape, dtype, "cpu", seed, mode)

        def pass_fns(self, pass_):
            fn, pre = super().pass_fns(pass_)
            work = gpu.call(host_s, gpu_s, kernels, waits=waits)

            def timed():
                out = fn()
                work()
                return out

            return timed, pre

    real_copy_tensors = reference.copy_tensors

    class FakeDst:
        def __init__(self, dst):
            self.dst = dst

        def copy_(self, src):
            self.dst.copy_(src)
            gpu.kernel(2 * src.numel() * src.element_size() / (copy_gbps * 1e9))
            return self.dst

    def copy_tensors(nbytes, dtype, device):
        src, dst = real_copy_tensors(nbytes, dtype, "cpu")
        return src, FakeDst(dst)

    monkeypatch.setattr(group, "Prepared", OnFakeCuda)
    monkeypatch.setattr(headtohead, "Prepared", OnFakeCuda)
    monkeypatch.setattr(reference, "copy_tensors", copy_tensors)
    reference.clear()
