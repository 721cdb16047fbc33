"""The bandwidth ceiling: the device's copy bandwidth measured in the same run, and datasheet peaks where known.

* GPU: a device-to-device ``copy_`` of a 1 GiB buffer (far larger than any L2), timed with CUDA events.
* CPU: a ``copy_`` of a buffer of 4x the last-level cache, clamped to 256-512 MiB, timed with
  ``perf_counter`` at the benchmark's thread count.

A copy reads and writes every byte, so ceiling GB/s = 2 · size / median time.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import torch

from normbench.measure.stats import summarize

#: Vendor datasheet HBM bandwidths (GB/s). Matched against the GPU name, most specific first.
DATASHEET_PEAK_GBPS = (
    ("H200", 4800.0),            # H200 SXM and NVL: 4.8 TB/s
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),            # H100 SXM5 (80GB HBM3): 3.35 TB/s
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),            # A100 40GB
    ("MI300X", 5300.0),
)


def datasheet_peak_gbps(gpu_name: str | None) -> float | None:
    """The datasheet memory bandwidth of ``gpu_name`` in GB/s, or ``None`` when unknown (or a CPU)."""
    if not gpu_name:
        return None
    for key, value in DATASHEET_PEAK_GBPS:
        if key.lower() in gpu_name.lower():
            return value
    return None


@dataclass(frozen=True)
class Ceiling:
    """A measured copy bandwidth and how it was measured."""

    gbps: float
    method: str
    device: str
    #: Relative IQR (q75 - q25) / median of the repeated copy timings: how steady the memory system was.
    spread: float | None = None

    def to_dict(self) -> dict:
        return {"gbps": self.gbps, "method": self.method, "device": self.device, "spread": self.spread}


def _llc_bytes() -> int:
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as f:
                    text = f.read().strip().upper()
            except OSError:
                continue
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, int(digits) * mult)
    except OSError:
        pass
    return best


def cpu_copy_bytes() -> int:
    """Size of the CPU copy: 4x the largest cache, clamped to [256 MiB, 512 MiB] (a copy moves twice that)."""
    return int(min(max(4 * _llc_bytes(), 256 * 2**20), 512 * 2**20))


def measure_cpu(nbytes: int | None = None, reps: int = 5) -> Ceiling:
    n = (nbytes or cpu_copy_bytes()) // 4
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # page in the destination before timing
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        dst.copy_(src)
        samples.append(time.perf_counter() - t0)
    st = summarize(samples)
    med = st["median"]
    size = n * 4
    method = (f"torch copy_ of {size / 2**20:.0f} MiB on CPU, {torch.get_num_threads()} threads, "
              f"median of {reps}; GB/s = 2·size/time")
    return Ceiling(2 * size / med / 1e9, method, "cpu", st["iqr"] / med)


#: Seconds of copies before the ceiling is timed: GPU clocks ramp up over hundreds of milliseconds from idle.
CUDA_WARMUP_S = 1.0


def warmup_copies(copy, sync, seconds: float, clock=time.perf_counter, min_calls: int = 3) -> int:
    """Run ``copy`` until at least ``seconds`` of wall time (synchronised) and ``min_calls`` calls; returns calls."""
    calls = 0
    t0 = clock()
    while True:
        for _ in range(min_calls):
            copy()
        calls += min_calls
        sync()
        if clock() - t0 >= seconds:
            return calls


def measure_cuda(device="cuda", nbytes: int = 2**30, reps: int = 20) -> Ceiling:
    device = torch.device(device)
    with torch.cuda.device(device):
        return _measure_cuda(device, nbytes, reps)


def _measure_cuda(device, nbytes: int, reps: int) -> Ceiling:
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    warmup_copies(functools.partial(dst.copy_, src), functools.partial(torch.cuda.synchronize, device), CUDA_WARMUP_S)
    events = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize(device)
    st = summarize([s.elapsed_time(e) / 1e3 for s, e in events])
    med = st["median"]
    del src, dst
    torch.cuda.empty_cache()
    method = (f"device-to-device copy_ of {nbytes / 2**20:.0f} MiB, CUDA events, median of {reps} after "
              f"{CUDA_WARMUP_S:g} s of warm-up copies; GB/s = 2·size/time")
    return Ceiling(2 * nbytes / med / 1e9, method, str(device), st["iqr"] / med)


_CACHE: dict[str, Ceiling] = {}


def measure(device: str = "cpu") -> Ceiling:
    """The copy-bandwidth ceiling of ``device``, measured once per process."""
    key = f"{device}:{torch.get_num_threads()}"
    if key not in _CACHE:
        _CACHE[key] = measure_cuda(device) if torch.device(device).type == "cuda" else measure_cpu()
    return _CACHE[key]
