"""The one device seam: every CUDA-only call the measurement path makes (the timers' operations, the L2 flush, the copy
ceiling, memory, the float64 reference, provenance's GPU query and nvidia-smi, the NVML clock, the check gate's CUDA
device) goes through :func:`get`, which returns the real CUDA device or, under ``NORMBENCH_REHEARSE=<scenario>``, a
simulated one (``normbench.rehearsal.SimulatedCuda``) that runs the kernels on CPU tensors while the plan and the
records say "cuda". What cannot be routed through it is listed, with why, in :data:`NOT_REHEARSED`.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from typing import Callable

import torch

#: The environment variable that swaps in the simulated device: its value names the scenario
#: (``normbench.rehearsal.SCENARIOS``: normal, host_bound, clock_ramp, low_clock).
REHEARSE_ENV = "NORMBENCH_REHEARSE"

#: What a GPU run reaches that a rehearsal does not run, and why (qualified name: one line). With the GPU window
#: script's own (``scripts/gpu_window.py``'s ``SCRIPT_NOT_REHEARSED``) at most 10 (issue #48); a test
#: (tests/test_rehearsal_device.py) fails when one is added without being listed here. (NVML's maximum SM clock,
#: ``_max_sm_clock_hz``, is not here: a rehearsal runs it against its simulated NVML.)
NOT_REHEARSED = {
    "normbench.kernels._env.Launcher.launch": "hashed: launches Triton on the tensor's GPU (a rehearsal's Triton runs "
                                              "in the interpreter on CPU tensors)",
    "normbench.kernels._env.Launcher.device_properties": "hashed: the GPU's properties for the kernels' launch plans",
    "normbench.kernels._env.unavailable": "hashed: the Triton backends' availability probe (torch.cuda.is_available)",
    "normbench.kernels._env._on": "hashed: makes the tensor's GPU current for a launch",
    "normbench.kernels._common.device_properties": "hashed: the current CUDA device's index for the launch plans",
    "normbench.kernels.compile_watch": "torch.compile's CUDA code generation (inductor emits C++ for the CPU in a "
                                       "rehearsal); the watch itself runs",
    "normbench.measure.memory.cuda_peak_above": "the CUDA caching allocator's peak: a rehearsal measures none "
                                                "(peak_mem_bytes null, said in its rehearsal flag's reason)",
    "normbench.device.CudaOps.capture": "CUDA graph capture: the simulated stream captures nothing (timed plainly)",
    "normbench.device.CudaDevice.nvidia_smi": "the driver's nvidia-smi: a rehearsal records no driver",
}


def flush_bytes(l2_bytes: int) -> int:
    """Size of the flush buffer: twice the L2 size, at least 256 MiB."""
    return max(2 * int(l2_bytes or 0), 256 * 2**20)


FLUSHES = ("zero", "rw")


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


class CudaOps:
    """The CUDA operations the GPU timers use: the device context, timing events, the spin kernel, a device
    synchronisation, the L2 flush, graph capture, the host clock, and ``wrap`` (the timed callable as the device
    runs it: unchanged on a real GPU). These are the real ones; a rehearsal's stream
    (``normbench.rehearsal.RehearsalGPU``) and the tests' fake GPU have the same interface."""

    def __init__(self, device):
        self.device = torch.device(device)

    def context(self):
        return torch.cuda.device(self.device)

    def event(self):
        return torch.cuda.Event(enable_timing=True)

    def spin(self, cycles: int) -> None:
        torch.cuda._sleep(int(cycles))

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def flusher(self, kind: str) -> Callable[[], object]:
        return L2Flusher(self.device, kind)

    def capture(self, fn: Callable[[], object]) -> Callable[[], object]:
        return _capture_graph(fn, self.device)

    @staticmethod
    def clock() -> float:
        return time.perf_counter()

    @staticmethod
    def wrap(fn: Callable[[], object]) -> Callable[[], object]:
        return fn

    def max_clock_hz(self) -> float | None:
        """The device's maximum SM clock (NVML), or None where it cannot be read."""
        try:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        except Exception:  # no CUDA runtime to ask: no maximum known (the clock check uses the highest seen)
            return None
        return _max_sm_clock_hz(index)


class CudaDevice:
    """The real CUDA device (torch.cuda, NVML, nvidia-smi)."""

    simulated = False
    scenario = None
    ceiling_bytes = 2**30
    ceiling_warmup_s = 1.0

    def describe(self) -> str:
        return "CUDA"

    def missing(self) -> str | None:
        return None if torch.cuda.is_available() else "no CUDA device here (torch.cuda.is_available() is False)"

    def tensor_device(self, device) -> str:
        return str(device)

    def initialized(self) -> bool:
        """Whether this process has started CUDA (a synchronisation would otherwise start it)."""
        return torch.cuda.is_available() and torch.cuda.is_initialized()

    def bf16_supported(self) -> bool:
        return torch.cuda.is_bf16_supported()

    def ops(self, device) -> CudaOps:
        return CudaOps(device)

    def synchronize(self, device=None) -> None:
        torch.cuda.synchronize(device)

    def context(self, device):
        return torch.cuda.device(torch.device(device))

    @staticmethod
    def _index(device) -> int:
        dev = torch.device(device if device is not None else "cuda")
        return dev.index if dev.index is not None else torch.cuda.current_device()

    def l2_bytes(self, device=None) -> int | None:
        props = torch.cuda.get_device_properties(self._index(device))
        return int(getattr(props, "L2_cache_size", 0) or 0) or None

    def hardware(self, device=None) -> dict:
        props = torch.cuda.get_device_properties(self._index(device))
        hip = getattr(torch.version, "hip", None)
        return {"gpu": props.name, "gpu_memory_gb": round(props.total_memory / 2**30, 1),
                "cuda": torch.version.cuda or (f"hip {hip}" if hip else None),
                "driver": self.nvidia_smi("driver_version")}

    def nvidia_smi(self, query: str) -> str | None:
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode != 0 or not out.stdout.strip():
            return None
        return out.stdout.strip().splitlines()[0].strip()

    def max_sm_clock_hz(self, device=None) -> float | None:
        """The device's maximum SM clock from NVML (through torch's or pynvml's binding), else nvidia-smi's
        ``clocks.max.sm``; None where neither answers."""
        return _max_sm_clock_hz(self._index(device))

    def sm_clock_hz(self, device=None) -> float | None:
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(self._index(device))
            return float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)) * 1e6
        except Exception:
            return None

    def free_bytes(self, device=None) -> int | None:
        try:
            return int(torch.cuda.mem_get_info(torch.device(device or "cuda"))[0])
        except Exception:
            return None

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()


@functools.lru_cache(maxsize=None)
def _max_sm_clock_hz(index: int, nvml=None, run=None) -> float | None:
    """The maximum SM clock of GPU ``index`` in Hz: NVML's (``nvml``: the pynvml module's interface; default pynvml
    itself), else nvidia-smi's ``clocks.max.sm`` (``run``: ``subprocess.run``'s interface; default it); None where
    neither answers. A rehearsal's simulated device passes its own NVML and nvidia-smi
    (``normbench.rehearsal.SimulatedNvml``), so this same code reads the simulated device's answer there."""
    try:
        if nvml is None:
            import pynvml as nvml

        nvml.nvmlInit()
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        return float(nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)) * 1e6
    except Exception:
        pass
    try:
        out = (run or subprocess.run)(["nvidia-smi", "-i", str(index), "--query-gpu=clocks.max.sm",
                                       "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        return float(out.stdout.strip().splitlines()[0]) * 1e6 if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


_REAL = CudaDevice()
_SIMULATED: dict[str, object] = {}


def scenario() -> str | None:
    """The rehearsal scenario ``NORMBENCH_REHEARSE`` names, or None (a real GPU, if any)."""
    return os.environ.get(REHEARSE_ENV, "").strip() or None


def get():
    """The CUDA device the measurement path uses now: the real one, or the simulated one of the scenario
    ``NORMBENCH_REHEARSE`` names (one per scenario and process, so its stream and clock persist across calls)."""
    name = scenario()
    if name is None:
        return _REAL
    if name not in _SIMULATED:
        from normbench.rehearsal import SimulatedCuda

        # its NVML is read by the real reader (this module sits above normbench.rehearsal: handed in, not imported)
        _SIMULATED[name] = SimulatedCuda(name, read_max_clock=_max_sm_clock_hz)
    return _SIMULATED[name]


def reset() -> None:
    """Forget the simulated devices (tests: a fresh stream and clock)."""
    _SIMULATED.clear()


def is_cuda(device) -> bool:
    return str(device).startswith("cuda")


def available() -> bool:
    """Whether a CUDA device (real or simulated) is there."""
    return get().missing() is None


def tensor_device(device) -> str:
    """Where tensors of a case planned on ``device`` live: ``device`` itself, or the CPU in a rehearsal."""
    return get().tensor_device(device) if is_cuda(device) else str(device)


def rehearsal_reason() -> str | None:
    """The ``rehearsal`` flag's reason when records are being made in a rehearsal, else None."""
    dev = get()
    if not dev.simulated:
        return None
    return (f"measured in a rehearsal ({REHEARSE_ENV}={dev.scenario}) on a {dev.describe()}: the kernels ran on "
            "CPU tensors and the GPU times are the simulation's, not a GPU's; no memory was measured (peak_mem_bytes "
            "null: no GPU allocator to read)")
