"""The bandwidth ceiling: the device's copy bandwidth measured in the same run, and datasheet peaks where known.

* GPU: a device-to-device ``copy_`` of a 1 GiB buffer (far larger than any L2), timed with CUDA events.
* CPU: a ``copy_`` of a buffer of 4x the last-level cache, clamped to 256-512 MiB, timed :data:`CPU_REPS` times with
  ``perf_counter`` at the benchmark's thread count.

A copy reads and writes every byte, so ceiling GB/s = 2 · size / median time.

Robust on a shared machine (docs/measurement.md, "Noise"): the spread that judges a run (``normbench.measure.noise``)
is the relative IQR of :data:`CPU_REPS` copies (with 5, one disturbed copy moved it past the limit); a measurement whose
spread is above the limit is taken again, up to :data:`ATTEMPTS` times, and the last one is kept (a moment of
disturbance does not condemn a whole run, a busy machine stays unsteady in every attempt); and a sweep measures it
again every :data:`RECHECK_S` seconds between groups (``normbench.measure.group.refresh_context``), so each record is
judged by, and its percentage taken against, a ceiling measured at most that long before it.

Shared on one machine (CPU only): a steady CPU ceiling is written to normbench's cache (``check.cache_dir()``,
``ceiling/``) and another normbench process on the same machine (same boot, host, thread count, CPU affinity, copy
size and torch) reuses it while it is at most :data:`RECHECK_S` old, the age a sweep already accepts within one
process; its ``ceiling_method`` then says so. ASV runs every benchmark in a fresh process, and each used to spend
1.5 s (quiet) to 9 s (busy, three attempts) on its own copies. An unsteady measurement is never shared, so the next
process measures again; a GPU's ceiling is never shared (which physical device a process sees depends on its
environment).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from normbench.measure.noise import CEILING_SPREAD_LIMIT
from normbench.measure.stats import summarize

#: Copies timed for the CPU ceiling (a 512 MiB copy takes about 40 ms on a 2-core VM: under a second in all).
CPU_REPS = 21
#: Measurements at most when the spread is above ``noise.CEILING_SPREAD_LIMIT``; the last one is kept.
ATTEMPTS = 3
#: Seconds between attempts.
RETRY_PAUSE_S = 1.0
#: A sweep re-measures the ceiling between groups once this many seconds have passed since the last measurement.
RECHECK_S = 60.0

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
    #: Which measurement this is (1 unless earlier ones were unsteady: see :func:`measure`).
    attempt: int = 1
    #: ``time.time()`` when it was measured (None: unknown); a ceiling shared by another process is older than now.
    measured_at: float | None = None

    def age_s(self, clock=time.time) -> float:
        """Seconds since it was measured (0 when unknown)."""
        return max(0.0, clock() - self.measured_at) if self.measured_at is not None else 0.0

    def to_dict(self) -> dict:
        return {"gbps": self.gbps, "method": self.method, "device": self.device, "spread": self.spread,
                "attempt": self.attempt, "measured_at": self.measured_at}


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


def measure_cpu(nbytes: int | None = None, reps: int = CPU_REPS) -> Ceiling:
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
    return Ceiling(2 * size / med / 1e9, method, "cpu", st["iqr"] / med, measured_at=time.time())


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


def measure_cuda(device="cuda", nbytes: int | None = None, reps: int = 20) -> Ceiling:
    """The device-to-device copy ceiling, through the device seam (``normbench.device``: in a rehearsal, a copy of
    the simulated device's ``ceiling_bytes`` on CPU tensors, timed by its simulated stream)."""
    from normbench import device as seam

    dev = seam.get()
    ops = dev.ops(device)
    with ops.context():
        return _measure_cuda(dev, ops, device, nbytes or dev.ceiling_bytes, reps)


def _measure_cuda(dev, ops, device, nbytes: int, reps: int) -> Ceiling:
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=dev.tensor_device(device))
    dst = torch.empty_like(src)
    warmup = dev.ceiling_warmup_s
    warmup_copies(ops.wrap(functools.partial(dst.copy_, src)), ops.sync, warmup, clock=ops.clock)
    copy = ops.wrap(functools.partial(dst.copy_, src))
    events = []
    for _ in range(reps):
        start, end = ops.event(), ops.event()
        start.record()
        copy()
        end.record()
        events.append((start, end))
    ops.sync()
    st = summarize([s.elapsed_time(e) / 1e3 for s, e in events])
    med = st["median"]
    del src, dst
    dev.empty_cache()
    sim = f" on a {dev.describe()}" if dev.simulated else ""
    method = (f"device-to-device copy_ of {nbytes / 2**20:.0f} MiB, CUDA events, median of {reps} after "
              f"{warmup:g} s of warm-up copies{sim}; GB/s = 2·size/time")
    return Ceiling(2 * nbytes / med / 1e9, method, str(device), st["iqr"] / med, measured_at=time.time())


_CACHE: dict[str, Ceiling] = {}


def steady(measure_once, attempts: int | None = None, pause_s: float | None = None, sleep=None) -> Ceiling:
    """``measure_once()`` until its spread is within ``noise.CEILING_SPREAD_LIMIT``, at most ``attempts`` times; the
    last measurement, with its attempt number (its method says so when it is not the first)."""
    attempts = ATTEMPTS if attempts is None else attempts
    pause_s = RETRY_PAUSE_S if pause_s is None else pause_s
    sleep = time.sleep if sleep is None else sleep
    for attempt in range(1, attempts + 1):
        ceil = measure_once()
        if ceil.spread is None or ceil.spread <= CEILING_SPREAD_LIMIT or attempt == attempts:
            break
        sleep(pause_s)
    if attempt > 1:
        ceil = replace(ceil, attempt=attempt, method=f"{ceil.method}; attempt {attempt} of {attempts} (the earlier "
                                                     f"spread above {100 * CEILING_SPREAD_LIMIT:.0f}%)")
    return ceil


def _shared_path(device: str) -> Path | None:
    """The file a CPU ceiling is shared through, named by what makes two processes' copies comparable; None for a
    GPU or where the machine cannot be told apart (no boot id)."""
    if torch.device(device).type != "cpu":
        return None
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        affinity = sorted(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None
    from normbench.check import cache_dir

    key = json.dumps([boot, platform.node(), torch.get_num_threads(), affinity, cpu_copy_bytes(), CPU_REPS,
                      torch.__version__])
    return cache_dir() / "ceiling" / f"cpu-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def _read_shared(path: Path | None, clock=time.time) -> Ceiling | None:
    """The shared ceiling at ``path`` when it is steady and at most :data:`RECHECK_S` old, else None."""
    if path is None:
        return None
    try:
        d = json.loads(path.read_text())
        ceil = Ceiling(float(d["gbps"]), str(d["method"]), str(d["device"]), float(d["spread"]), int(d["attempt"]),
                       float(d["measured_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    age = clock() - ceil.measured_at
    if not (0 <= age <= RECHECK_S) or ceil.spread > CEILING_SPREAD_LIMIT or not ceil.gbps > 0:
        return None
    return replace(ceil, method=f"{ceil.method}; shared: measured by normbench process {d.get('pid')} on this "
                                f"machine {age:.0f} s earlier")


def _write_shared(path: Path | None, ceil: Ceiling) -> None:
    if path is None or ceil.spread is None or ceil.spread > CEILING_SPREAD_LIMIT or ceil.measured_at is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**ceil.to_dict(), "pid": os.getpid()}))
        os.replace(tmp, path)
    except OSError:
        pass  # sharing is an optimisation: a read-only cache costs each process its own measurement


def measure(device: str = "cpu", fresh: bool = False) -> Ceiling:
    """The copy-bandwidth ceiling of ``device`` (:func:`steady`), measured once per process, or again with ``fresh``
    (a CPU ceiling another process on this machine measured at most :data:`RECHECK_S` ago counts as fresh)."""
    key = f"{device}:{torch.get_num_threads()}"
    if fresh or key not in _CACHE:
        shared = _shared_path(device)
        ceil = _read_shared(shared)
        if ceil is None:
            once = (functools.partial(measure_cuda, device) if torch.device(device).type == "cuda" else measure_cpu)
            ceil = steady(once)
            _write_shared(shared, ceil)
        _CACHE[key] = ceil
    return _CACHE[key]
