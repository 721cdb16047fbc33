"""A fake GPU timeline for the GPU timers' CPU tests: the interface of ``normbench.device.CudaOps`` over a simulated
host clock and one in-order CUDA stream. The stream model lives in ``normbench.rehearsal`` (a rehearsal's simulated
device is built on it; its docstring states the model, and nothing about what a timer should report). Here it gains:

* with ``graphs=True`` a CUDA graph can be captured: while capturing, a launch is recorded in the graph, not run, and
  a synchronisation fails (as CUDA refuses one in a capture); a replay is one launch whose GPU time is the sum of the
  recorded kernels'. Without it, capture always fails (the timers then fall back to plain calls).

:func:`install` points ``torch.cuda``'s calls that the real ``CudaOps`` and ``_capture_graph`` make at a fake, so the
real code runs on a CPU; :func:`cuda_on_cpu` also puts a fake CUDA device behind the device seam
(``normbench.device.get()``), so ``measure_group`` and ``measure_set`` take "cuda" cases (modules and tensors stay on
the CPU, each timed call also runs a fake workload on the stream). Unlike a rehearsal, records made this way carry
no ``rehearsal`` flag: they stand for what the real code writes on a GPU with the fake's timeline.
"""

from __future__ import annotations

import contextlib

from normbench import rehearsal
from normbench.rehearsal import FakeEvent, SimulatedCuda

__all__ = ["FakeEvent", "FakeGPU", "FakeGraph", "install", "cuda_on_cpu"]


class FakeGPU(rehearsal.FakeGPU):
    """``normbench.rehearsal.FakeGPU`` that can capture CUDA graphs (``graphs=True``) and reports an L2 size."""

    def __init__(self, *, graphs: bool = False, l2_bytes: int = 60 * 2**20, **kw):
        super().__init__(**kw)
        self.graphs, self.l2_bytes = graphs, l2_bytes
        self._capturing: list[float] | None = None  # the graph being captured: its kernels' GPU times
        self.captures = self.replays = 0

    def kernel(self, gpu_s: float) -> None:
        if self._capturing is not None:  # recorded in the graph, not run
            self.host += self.launch_s
            self._capturing.append(gpu_s)
            return
        super().kernel(gpu_s)

    def sync(self) -> None:
        if self._capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        super().sync()

    def capture(self, fn):
        if not self.graphs:
            raise RuntimeError("the fake GPU captures no graphs")
        graph = FakeGraph(self)
        with graph.capturing():
            fn()
        return graph.replay


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

    from normbench import device

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
    monkeypatch.setattr(device.CudaOps, "clock", staticmethod(gpu.clock))
    monkeypatch.setattr(device.CudaOps, "flusher", lambda self, kind: gpu.flusher(kind))
    monkeypatch.setattr(device.CudaOps, "max_clock_hz", lambda self: gpu.max_clock_hz())


def cuda_on_cpu(monkeypatch, gpu: FakeGPU, *, host_s: float, gpu_s: float, kernels: int = 1, waits=False,
                copy_gbps: float = 4000.0) -> None:
    """:func:`install`, and "cuda" cases measured by ``measure_group`` and ``measure_set`` on the CPU: ``Prepared``
    builds the module and tensors on the CPU, and each timed call of a pass (and each same-size copy) also runs a fake
    call on the stream (:meth:`FakeGPU.call`'s ``host_s``, ``gpu_s``, ``kernels``, ``waits``; the copy: one kernel
    moving its bytes at ``copy_gbps``). Everything else (the timers, the records, their flags) is the real code."""
    from normbench import device
    from normbench.measure import group, headtohead, reference

    install(monkeypatch, gpu)
    monkeypatch.setattr(device, "_REAL", FakeCudaDevice(gpu))

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


class FakeCudaDevice(SimulatedCuda):
    """The rehearsal's simulated device with this fake GPU behind it (its stream, L2 size and clock), standing in for
    the seam's real CUDA device: not ``simulated``, so records carry no ``rehearsal`` flag and the real CUDA branches
    that key on it run."""

    simulated = False
    scenario = None

    def __init__(self, gpu: FakeGPU):
        self.gpu = gpu

    def describe(self) -> str:
        return "fake GPU"

    def l2_bytes(self, device=None) -> int:
        return self.gpu.l2_bytes

    def hardware(self, device=None) -> dict:
        return {"gpu": "fake GPU", "gpu_memory_gb": 141.0, "cuda": None, "driver": None}

    def max_sm_clock_hz(self, device=None) -> float | None:
        return self.gpu.max_clock_hz()

    def free_bytes(self, device=None) -> int | None:
        return 100 * 2**30
