"""The same-size copy reference and cache residency: what "% of ceiling" means at a size that fits a cache.

The DRAM ceiling (``normbench.measure.ceiling``) is one copy far larger than any cache. A small case timed hot reads
its data from a cache, so its percentage of that ceiling is not comparable with a DRAM-sized case's. Two things make
it so (issue #28):

* **A same-size copy reference.** For each case, in the same run and timing mode (hot, cold with its flush, host,
  CUDA graphs or not, the same thread count and repetition settings), a ``copy_`` that moves exactly the case's
  minimal bytes (its bytes model): a source of ``bytes_moved / 2`` bytes copied into a destination of the same
  size, so the copy reads half and writes half of the case's volume, and its working set is the case's. Records keep
  ``copy_same_size_gbps`` and ``pct_of_same_size_copy`` beside the DRAM ceiling's figures. One reference is timed
  per (bytes, dtype, timing mode) within a run and shared by every case of that size (:func:`same_size_copy`).
* **Where the data lives.** ``cache_resident`` (``L2``, ``LLC`` or ``none``) compares the case's working set with
  the machine's cache sizes (:func:`cache_sizes`: read from ``/sys/devices/system/cpu/cpu0/cache`` on a CPU, from
  the device properties on a GPU) by ``normbench.records.cache.residency`` (pure, so the site applies the same rule
  to records that predate the field).
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import torch

from normbench.measure.stats import summarize
from normbench.measure.timers import TimerSettings, cpu_time, cuda_time
from normbench.records.cache import RESIDENCIES, residency  # noqa: F401  (the rule lives beside the records)

_SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def _parse_size(text: str) -> int | None:
    text = text.strip().upper()
    digits = text.rstrip("KMGB")
    if not digits.isdigit():
        return None
    return int(digits) * _SIZE_UNITS.get(text.rstrip("B")[-1:], 1)


def cpu_caches(base: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
    """The CPU's data/unified caches as the OS reports them for cpu0: ``{"l2_bytes", "llc_bytes", "source"}``.

    ``l2_bytes`` is the level-2 cache of one core (``None`` when the OS reports none); ``llc_bytes`` the largest
    level (the last-level cache, shared by the cores listed in its ``shared_cpu_list``). Both ``None`` where the OS
    says nothing (not Linux, or no ``cache`` directory).
    """
    levels: dict[int, int] = {}
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    for entry in entries:
        path = os.path.join(base, entry)
        try:
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(path, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not size:
            continue
        levels[level] = max(levels.get(level, 0), size)
    if not levels:
        return {"l2_bytes": None, "llc_bytes": None, "source": f"no cache sizes in {base}"}
    return {"l2_bytes": levels.get(2), "llc_bytes": levels[max(levels)],
            "source": f"{base} (level: bytes) " + ", ".join(f"L{k}: {v}" for k, v in sorted(levels.items()))}


def cache_sizes(device: str = "cpu") -> dict:
    """``{"l2_bytes", "llc_bytes", "source"}`` of ``device``: on a GPU its L2 is its last-level cache."""
    from normbench import device as seam

    if seam.is_cuda(device):
        dev = seam.get()
        l2 = dev.l2_bytes(device)
        return {"l2_bytes": l2, "llc_bytes": l2, "source": f"the L2_cache_size of the {dev.describe()} device"}
    return dict(_cpu_caches_cached())


@functools.lru_cache(maxsize=1)
def _cpu_caches_cached() -> tuple:
    return tuple(cpu_caches().items())


# --- the same-size copy ---------------------------------------------------------------------------------------------

def copy_tensors(nbytes: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) of ``nbytes // 2`` bytes each: a copy between them moves ``nbytes`` (rounded down to an
    even count). In ``dtype`` when the half is a whole number of its elements, else as bytes (``uint8``); a
    same-dtype ``copy_`` is a memory copy either way."""
    half = int(nbytes) // 2
    esize = torch.empty((), dtype=dtype).element_size()
    if half % esize == 0:
        src = torch.ones(half // esize, dtype=dtype, device=device)
    else:
        src = torch.ones(half, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # pages the destination in, as the DRAM ceiling does
    return src, dst


def copy_bytes(src: torch.Tensor) -> int:
    """Bytes one ``dst.copy_(src)`` moves: it reads the source and writes as many bytes."""
    return 2 * src.numel() * src.element_size()


def host_time(fn: Callable[[], object], settings: TimerSettings, device) -> list[float]:
    """Seconds per call with a host clock around a call and ``cuda.synchronize``: the ``host`` timing of the suites."""
    from normbench import device as seam

    ops = seam.get().ops(device)
    fn = ops.wrap(fn)
    for _ in range(settings.warmup):
        fn()
    ops.sync()
    samples: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps:
        t0 = ops.clock()
        fn()
        ops.sync()
        dt = ops.clock() - t0
        samples.append(dt)
        total += dt
        if settings.done(len(samples), total):
            break
    return samples


def time_copy(src: torch.Tensor, dst: torch.Tensor, settings: TimerSettings, *, device: str = "cpu",
              timing: str = "hot", graphs: bool = False) -> tuple[list[float], bool]:
    """(seconds per ``dst.copy_(src)``, whether a CUDA graph was used), timed as a case of ``timing`` is: the CPU's
    ``perf_counter`` (hot), CUDA events with or without the L2 flush (cold / hot, with ``graphs`` replayed as a
    case's are), or a host clock around a synchronised call (host)."""
    def fn():
        return dst.copy_(src)

    if not str(device).startswith("cuda"):
        return cpu_time(fn, settings), False
    if timing == "host":
        from normbench import device as seam

        with seam.get().context(device):
            return host_time(fn, settings, device), False
    return cuda_time(fn, settings, device, cold=timing == "cold", graphs=graphs)


_REFERENCES: dict = {}  # one per (run, bytes, dtype, timing mode) in this process; a worker keeps it between groups


def reference_key(run: str, nbytes: int, dtype: str, case, settings: TimerSettings) -> tuple:
    """What makes two cases share a reference: the run, the bytes, the dtype and every part of the timing mode."""
    s = case.settings(settings)
    return (run, int(nbytes), dtype, str(case.device), case.timing, bool(case.graphs and case.pass_ != "bwd"),
            s.flush if case.timing == "cold" else None, s.keep_ahead, int(case.threads), s.warmup, s.min_reps,
            s.max_reps, s.min_time, s.max_time)


def measure_copy(nbytes: int, dtype: str, case, settings: TimerSettings) -> dict:
    """Time the same-size copy of ``nbytes`` for ``case``'s timing mode; the reference as a record stores it."""
    from normbench.measure.planning import DTYPES

    s = case.settings(settings)
    graphs = bool(case.graphs and case.pass_ != "bwd")
    from normbench import device as seam

    src, dst = copy_tensors(nbytes, DTYPES.get(dtype, torch.float32), seam.tensor_device(case.device))
    try:
        samples, used_graph = time_copy(src, dst, s, device=case.device, timing=case.timing, graphs=graphs)
    finally:
        moved, elem = copy_bytes(src), src.dtype
        del src, dst
    how = {"hot": "no flush" if str(case.device).startswith("cuda") else "perf_counter, nothing flushed",
           "cold": f"CUDA events, L2 flushed ({s.flush}) before each repetition",
           "host": "host clock around a synchronised call"}.get(case.timing, case.timing)
    threads = "" if str(case.device).startswith("cuda") else f", {case.threads} threads"
    return copy_reference(samples, moved, elem,
                          f"timed as the case ({case.timing}: {how}{', CUDA graph' if used_graph else ''}{threads})")


def copy_reference(samples: list[float], moved: int, dtype: torch.dtype, how: str) -> dict:
    """A same-size copy reference as a record stores it: ``samples`` (seconds per copy) of a copy moving ``moved``
    bytes of ``dtype``, timed ``how``."""
    st = summarize(samples)
    method = (f"copy_ of {moved // 2} bytes ({str(dtype).replace('torch.', '')}) into a preallocated buffer, "
              f"{how}, median of {st['reps']}; GB/s = 2·size/time")
    return {"bytes_moved": moved, "gbps": moved / st["median"] / 1e9, "time_median_s": st["median"],
            "time_iqr_s": st["iqr"], "reps": st["reps"], "method": method}


def same_size_copy(run: str, nbytes: int, dtype: str, case, settings: TimerSettings) -> dict | None:
    """The run's same-size copy reference for a case moving ``nbytes``: timed the first time a (bytes, dtype,
    timing mode) is asked for in this process and run, then shared. ``None`` for a case that moves no bytes."""
    if nbytes < 2:
        return None
    key = reference_key(run, nbytes, dtype, case, settings)
    if key not in _REFERENCES:
        _REFERENCES[key] = measure_copy(nbytes, dtype, case, settings)
    return _REFERENCES[key]


def clear() -> None:
    """Forget the references timed in this process (tests; a new run has a new run id anyway)."""
    _REFERENCES.clear()
