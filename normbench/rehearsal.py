"""A simulated GPU for rehearsing the GPU measurement path on a CPU: one in-order stream and its host on a simulated
clock (the model ``tests/fake_gpu.py`` used), an SM clock that ramps, and :class:`SimulatedCuda`, the device that
``normbench.device`` swaps in under ``NORMBENCH_REHEARSE=<scenario>``.

The model of the stream, and nothing about what a timer should report:

* the host has a clock; every host action (a launch, an event record, a synchronisation, a call's own Python work)
  advances it;
* the stream runs queued operations in order: one starts when the previous one has ended *and* the host has
  launched it (a GPU never runs ahead of the host), and lasts its own GPU time;
* the launch queue holds ``queue`` operations that have not finished; a launch into a full queue blocks the host
  until the oldest finishes (the real limit is about a thousand launches per stream);
* an event is a queued operation of no duration: it completes when the GPU reaches it; ``query()`` says whether it
  has by the host's time now, ``elapsed_time`` (milliseconds, as torch's) refuses events that have not completed;
* the SM clock runs at ``idle_hz`` until the GPU has been busy for ``boost_after_s`` and at ``boost_hz`` after (an
  H200 boosts from 345 to 1980 MHz); a spin (``torch.cuda._sleep``) lasts its cycles at that clock, and with
  ``clock_scales_work`` a kernel's GPU time (stated at ``boost_hz``) stretches by ``boost_hz / clock`` too.

In a rehearsal (:class:`SimulatedCuda`) the kernels run for real on CPU tensors; a timed call's GPU time is its
measured CPU time times :data:`GPU_PER_CPU` (the stated model: a GPU runs a norm about 20x faster than one CPU core
does; only ratios between calls of one run matter), its host cost is the scenario's ``host_call_s`` (deterministic,
so the keep-ahead check does not depend on this machine's load), and the L2 flush is a kernel of ``flush_s``.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time

#: A rehearsal's GPU seconds per CPU second of a call's real work (see the module docstring).
GPU_PER_CPU = 0.05

#: The scenarios ``NORMBENCH_REHEARSE`` names: what the simulated GPU and its host do.
SCENARIOS: dict[str, dict] = {
    "normal": {"what": "a GPU at its maximum clock from the start, a host faster than the queue needs",
               "idle_share": 1.0, "boost_after_s": 0.0, "host_call_s": 30e-6, "waits": False},
    "host_bound": {"what": "every timed call waits for the GPU (as an .item() does): the queue cannot be kept ahead",
                   "idle_share": 1.0, "boost_after_s": 0.0, "host_call_s": 30e-6, "waits": True},
    "clock_ramp": {"what": "the SM clock at 60 % of its maximum until the GPU has been busy for 150 ms, then at its "
                           "maximum", "idle_share": 0.6, "boost_after_s": 0.15, "host_call_s": 30e-6,
                   "waits": False},
    "low_clock": {"what": "the SM clock stays at 60 % of its maximum (a throttled or power-capped GPU)",
                  "idle_share": 0.6, "boost_after_s": math.inf, "host_call_s": 30e-6, "waits": False},
}

#: The simulated GPU's maximum SM clock (an H200's boost clock) and L2 size.
MAX_HZ = 1980e6
L2_BYTES = 60 * 2**20


class FakeEvent:
    def __init__(self, gpu: "FakeGPU"):
        self.gpu = gpu
        self.t: float | None = None  # when the GPU reaches it

    def record(self, stream=None) -> None:
        self.gpu._absorb()
        self.gpu.host += self.gpu.record_s
        self.t, _ = self.gpu.enqueue(0.0)

    def query(self) -> bool:
        if self.t is None:
            return True  # torch: an event never recorded counts as complete
        return self.t <= self.gpu.host

    def synchronize(self) -> None:
        if self.t is not None:
            self.gpu.host = max(self.gpu.host, self.t)

    def elapsed_time(self, end: "FakeEvent") -> float:
        for e in (self, end):
            if e.t is None or e.t > self.gpu.host:
                raise RuntimeError("elapsed_time of an event the GPU has not reached yet (synchronise first)")
        return (end.t - self.t) * 1e3


class FakeGPU:
    """One simulated GPU stream and its host (see the module docstring). Times are in seconds. It has the interface
    of ``normbench.device.CudaOps`` (what the GPU timers use)."""

    def __init__(self, *, idle_hz: float = 345e6, boost_hz: float = 1980e6, boost_after_s: float = 0.0,
                 queue: int = 1024, launch_s: float = 2e-6, record_s: float = 1e-6, sync_s: float = 5e-6,
                 flush_s: float = 64e-6, clock_scales_work: bool = False, nvml_hz: float | None = -1.0):
        self.idle_hz, self.boost_hz, self.boost_after_s = idle_hz, boost_hz, boost_after_s
        self.queue, self.launch_s, self.record_s, self.sync_s, self.flush_s = queue, launch_s, record_s, sync_s, flush_s
        self.clock_scales_work = clock_scales_work
        self.nvml_hz = boost_hz if nvml_hz == -1.0 else nvml_hz  # what NVML's maximum SM clock reads (None: no NVML)
        self.host = 0.0
        self.gpu_free = 0.0   # when the last queued operation ends
        self.busy_s = 0.0     # GPU time run (or queued) so far: the clock boosts after boost_after_s of it
        self._ends: list[float] = []  # end times of operations that may not have finished yet
        self.spins: list[float] = []  # each spin's duration
        self.launches = 0
        self.flushes = 0

    def _absorb(self) -> None:
        """Hook for :class:`SimulatedCuda` (work done outside the model's operations); nothing here."""

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
        elif self.clock_scales_work and seconds > 0:
            seconds = self._spin_seconds(seconds * self.boost_hz)
        end = start + seconds
        self.busy_s += seconds
        self.gpu_free = end
        self._ends.append(end)
        return start, end

    def _spin_seconds(self, cycles: float) -> float:
        idle_left = max(0.0, self.boost_after_s - self.busy_s)
        if cycles <= idle_left * self.idle_hz:
            return cycles / self.idle_hz
        return idle_left + (cycles - idle_left * self.idle_hz) / self.boost_hz

    def clock_hz(self) -> float:
        """The SM clock now (what NVML's current clock would read)."""
        return self.idle_hz if self.busy_s < self.boost_after_s else self.boost_hz

    def kernel(self, gpu_s: float) -> None:
        self.host += self.launch_s
        self.launches += 1
        self.enqueue(gpu_s)

    # --- the CudaOps interface ----------------------------------------------------------------------------------
    def context(self):
        return contextlib.nullcontext()

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def spin(self, cycles: int) -> None:
        self._absorb()
        self.host += self.launch_s
        self.enqueue(0.0, cycles=int(cycles))

    def sync(self) -> None:
        self._absorb()
        self.host = max(self.host, self.gpu_free) + self.sync_s

    def _flush(self) -> None:
        self.flushes += 1
        self.kernel(self.flush_s)

    def flusher(self, kind: str):
        return self._flush

    def capture(self, fn):
        raise RuntimeError("the simulated GPU captures no graphs")

    def clock(self) -> float:
        self._absorb()
        return self.host

    def wrap(self, fn):
        """The callable the timers time (a fake's calls model their own GPU work: unchanged)."""
        return fn

    def max_clock_hz(self) -> float | None:
        return self.nvml_hz

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


class SimulatedNvml:
    """What the simulated GPU answers to NVML: the calls of the pynvml module that normbench makes, with its units
    (clocks in MHz), for one GPU (index 0). ``normbench.device._max_sm_clock_hz`` reads it as it reads pynvml on a
    GPU; ``queries`` counts the maximum-clock queries it answered."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, gpu: "FakeGPU"):
        self.gpu = gpu
        self.queries = 0

    def nvmlInit(self) -> None:
        if self.gpu.nvml_hz is None:
            raise self.NVMLError("NVML Shared Library Not Found (the simulated device has no NVML)")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index != 0:
            raise self.NVMLError(f"Invalid Argument: the simulated device has one GPU, not index {index}")
        return index

    def _check(self, clock: int) -> None:
        if clock != self.NVML_CLOCK_SM:
            raise self.NVMLError(f"Not Supported: clock type {clock} (the simulated device has an SM clock)")

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        self._check(clock)
        self.queries += 1
        return int(round(self.gpu.nvml_hz / 1e6))

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        self._check(clock)
        return int(round(self.gpu.clock_hz() / 1e6))

    def nvidia_smi(self, cmd, **kw) -> subprocess.CompletedProcess:
        """``subprocess.run`` of an ``nvidia-smi`` command line, for the reader's fallback: never the machine's own
        (a rehearsal on a GPU machine must not read that GPU). Reached only where NVML fails, so it fails as
        nvidia-smi does without NVML."""
        return subprocess.CompletedProcess(cmd, 9, "", "NVIDIA-SMI has failed: the simulated device has no NVML\n")


class RehearsalGPU(FakeGPU):
    """The stream of a rehearsal: calls wrapped by :meth:`wrap` run their real CPU work and enqueue its GPU time.
    Its maximum SM clock is read through ``read_max_clock`` (``normbench.device._max_sm_clock_hz``, what a GPU's
    timers call) from its simulated NVML; without a reader (built outside the seam), the stated ``nvml_hz``."""

    def __init__(self, scenario: dict, read_max_clock=None, **kw):
        super().__init__(idle_hz=scenario["idle_share"] * MAX_HZ, boost_hz=MAX_HZ,
                         boost_after_s=scenario["boost_after_s"], clock_scales_work=True, **kw)
        self.host_call_s = scenario["host_call_s"]
        self.waits = scenario["waits"]
        self.cpu_s = 0.0  # real CPU seconds of the wrapped calls so far
        self.nvml = SimulatedNvml(self)
        self.read_max_clock = read_max_clock

    def max_clock_hz(self) -> float | None:
        if self.read_max_clock is None:
            return self.nvml_hz
        return self.read_max_clock(0, nvml=self.nvml, run=self.nvml.nvidia_smi)

    def run(self, fn, *, waits: bool | None = None):
        """Run ``fn`` for real; its GPU work is its CPU time times :data:`GPU_PER_CPU`; returns what ``fn`` did."""
        t0 = time.perf_counter()
        out = fn()
        cpu = time.perf_counter() - t0
        self.cpu_s += cpu
        self.host += self.host_call_s
        self.kernel(cpu * GPU_PER_CPU)
        if self.waits if waits is None else waits:
            self.sync()
        return out

    def wrap(self, fn):
        def call():
            return self.run(fn)
        return call


class SimulatedCuda:
    """The device ``normbench.device.get()`` returns under ``NORMBENCH_REHEARSE=<scenario>``: "cuda" in the plan and
    the records, CPU tensors underneath, one :class:`RehearsalGPU` stream per process, a simulated NVML clock."""

    simulated = True

    def __init__(self, scenario: str, read_max_clock=None):
        """``read_max_clock``: the seam's NVML reader (``normbench.device._max_sm_clock_hz``), run against this
        device's simulated NVML (``self.gpu.nvml``)."""
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown rehearsal scenario {scenario!r}; scenarios are {', '.join(SCENARIOS)}")
        self.scenario = scenario
        self.gpu = RehearsalGPU(SCENARIOS[scenario], read_max_clock=read_max_clock)

    def describe(self) -> str:
        return f"simulated GPU (rehearsal, scenario {self.scenario}: {SCENARIOS[self.scenario]['what']})"

    # availability and where tensors go
    def missing(self) -> str | None:
        return None

    def tensor_device(self, device) -> str:
        return "cpu"

    def initialized(self) -> bool:
        return True

    def bf16_supported(self) -> bool:
        return True

    # the timers' operations
    def ops(self, device):
        return self.gpu

    def synchronize(self, device=None) -> None:
        self.gpu.sync()

    def context(self, device):
        return contextlib.nullcontext()

    # properties, provenance, clocks
    def l2_bytes(self, device=None) -> int:
        return L2_BYTES

    def hardware(self, device=None) -> dict:
        return {"gpu": f"Simulated GPU rehearsal {self.scenario}", "gpu_memory_gb": 0.0, "cuda": None,
                "driver": None}

    def nvidia_smi(self, query: str) -> str | None:
        return None

    def max_sm_clock_hz(self, device=None) -> float | None:
        return self.gpu.max_clock_hz()

    def sm_clock_hz(self, device=None) -> float | None:
        return self.gpu.clock_hz()

    def free_bytes(self, device=None) -> int | None:
        return None

    def empty_cache(self) -> None:
        pass

    #: The copy ceiling's size and warm-up here (a rehearsal copies on the CPU).
    ceiling_bytes = 32 * 2**20
    ceiling_warmup_s = 0.01
