"""Machine noise: background load and the spread of repeated ceiling measurements, and when a record is ``noisy``.

A timing taken while other processes compete for the cores (or for memory bandwidth) can move by far more than its
own IQR shows: measured here, CPU timings moved more than 30x within an hour under background load. Each kernel record
therefore carries ``metrics.noise``:

* ``load1``, ``cores``: the 1-minute load average (``os.getloadavg``) and the logical core count when the group of
  cases was measured;
* ``background_load_per_core``: ``max(0, load1 - own) / cores``, where ``own`` is the load this benchmark itself adds
  (its CPU threads for a CPU run, one busy host thread for a GPU run); above the limit, confirmed by half a second of
  ``/proc/stat`` while the benchmark waits (``busy_cores``: the busy cores then), and the smaller of the two kept;
* ``ceiling_spread``: the relative IQR ``(q75 - q25) / median`` of the repeated copy-ceiling measurements of the run
  (a busy memory system shows here even when the load average does not);
* ``ceiling_drop``: how far that ceiling measurement is below the run's best one (``1 - ceiling / best``; the
  ceiling is re-measured every minute of a sweep: ``normbench.measure.ceiling``), or None;
* ``rel_iqr``: the record's own ``time_iqr_s / time_median_s``.

The record is flagged ``noisy`` when the background load per core exceeds :data:`LOAD_PER_CORE_LIMIT`, the ceiling
spread exceeds :data:`CEILING_SPREAD_LIMIT`, the ceiling dropped by more than :data:`CEILING_DROP_LIMIT`, or its own
relative IQR exceeds :data:`REL_IQR_LIMIT` on a CPU, :data:`GPU_REL_IQR_LIMIT` on a GPU (where an IQR above
:data:`GPU_IQR_FLOOR_S`) (the load average lags by a minute; a record's own spread does not).
docs/measurement.md gives the measurements behind the numbers.
"""

from __future__ import annotations

import os
import time

#: Background load per logical core above which timings are not trusted (another process owns half a core or more).
LOAD_PER_CORE_LIMIT = 0.5
#: Relative IQR of the repeated copy-ceiling measurements above which the memory system is judged too busy.
CEILING_SPREAD_LIMIT = 0.10
#: How far (a fraction) the ceiling measured before a record may fall below the run's best measurement: more means
#: the memory system is shared now. On this project's 2-core VMs quiet measurements varied by up to 16 % (31 copies,
#: docs/measurement.md "Noise") and a process on the other core halved it (25 -> 11-12 GB/s).
CEILING_DROP_LIMIT = 0.3
#: A record's own IQR / median above which its median is not trusted: 50 %. In the committed CPU records (bench --quick
#: on a calm machine) the median was 11 % and the 95th percentile 34 %; under a load of 10-13 on 2 cores per-call IQRs
#: reached 30-800 % (docs/measurement.md, "Dispersion").
REL_IQR_LIMIT = 0.5
#: The same limit for a GPU record (CUDA events): 5 %. In the first H200 run's 258 records (tests/fixtures/gpu-runs/
#: 2026-11-27-h200, docs/measurement.md "GPU time and host time") the eager records at the large shapes, whose GPU work
#: outlasts the host's launches, spread by at most 2 %; every Triton, compile and Liger record, timed at the host's
#: pace, by 7.3 % or more. A timing of the GPU itself is far tighter than one of a CPU: no other process shares the SMs.
GPU_REL_IQR_LIMIT = 0.05
#: A GPU record whose IQR is below this is never noisy by its spread: CUDA events resolve about half a microsecond
#: (the CUDA runtime's ``cudaEventElapsedTime``), so a few-microsecond kernel's quartiles may differ by a tick or two.
GPU_IQR_FLOOR_S = 1e-6


def load_average() -> float | None:
    """The 1-minute load average, or ``None`` where the OS has none (Windows)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def machine_load(own: float = 0.0, busy=None) -> dict:
    """``{"load1", "cores", "background_load_per_core"}`` now; ``own`` is the load this process itself adds.

    A load average above the limit is confirmed by sampling the CPUs for half a second while this process waits
    (:func:`busy_cores`, or ``busy()``; its value is kept as ``busy_cores``): the load average remembers the last
    minute, including this benchmark's own bursts (``torch.compile``'s inductor worker processes pushed it to 12-17
    on 2 cores during a quick sweep, with the cores idle again by the time the cases were timed), while the sample
    shows what other processes do now. The background is then the smaller of the two."""
    cores = os.cpu_count() or 1
    load1 = load_average()
    background = None if load1 is None else max(0.0, load1 - own) / cores
    out = {"load1": load1, "cores": cores, "background_load_per_core": background}
    if background is not None and background > LOAD_PER_CORE_LIMIT:
        now = (busy or busy_cores)()
        if now is not None:
            out["busy_cores"] = now
            out["background_load_per_core"] = min(background, now / cores)
    return out


def own_load(device: str, threads: int) -> float:
    """The load average a running benchmark contributes by itself: its compute threads on a CPU, one on a GPU."""
    return 1.0 if str(device).startswith("cuda") else float(max(1, threads))


def rel_iqr_limit(device: str) -> float:
    """The relative IQR above which a record of ``device`` is noisy: :data:`GPU_REL_IQR_LIMIT` on CUDA, else
    :data:`REL_IQR_LIMIT`."""
    return GPU_REL_IQR_LIMIT if str(device).startswith("cuda") else REL_IQR_LIMIT


def reasons(noise: dict, device: str = "cpu", iqr_s: float | None = None) -> list[str]:
    """Why a record of ``device`` with these ``metrics.noise`` values (and IQR ``iqr_s`` seconds) is noisy (empty
    when it is not)."""
    out = []
    gpu = str(device).startswith("cuda")
    limit = rel_iqr_limit(device)
    bg = noise.get("background_load_per_core")
    if bg is not None and bg > LOAD_PER_CORE_LIMIT:
        out.append(f"background load {bg:.2f} per core (load average {noise.get('load1'):.2f} on "
                   f"{noise.get('cores')} cores) is above {LOAD_PER_CORE_LIMIT:g}")
    rel = noise.get("rel_iqr")
    if rel is not None and rel > limit and not (gpu and iqr_s is not None and iqr_s < GPU_IQR_FLOOR_S):
        out.append(f"the repetitions spread by {100 * rel:.{1 if gpu else 0}f}% of the median (IQR / median), above "
                   f"{100 * limit:.0f}%" + (" (the GPU limit)" if gpu else ""))
    drop = noise.get("ceiling_drop")
    if drop is not None and drop > CEILING_DROP_LIMIT:
        out.append(f"the copy ceiling measured before it is {100 * drop:.0f}% below the run's best measurement "
                   f"(above {100 * CEILING_DROP_LIMIT:.0f}%): the memory system is shared now")
    spread = noise.get("ceiling_spread")
    if spread is not None and spread > CEILING_SPREAD_LIMIT:
        out.append(f"the copy ceiling's repeated measurements spread by {100 * spread:.0f}% (relative IQR), above "
                   f"{100 * CEILING_SPREAD_LIMIT:.0f}%")
    return out


def ceiling_warning(spread: float | None) -> str | None:
    """A warning to print once the run's copy ceiling is measured (after its retries), when its spread alone flags
    the records judged by it noisy."""
    if spread is None or spread <= CEILING_SPREAD_LIMIT:
        return None
    return (f"warning: the copy ceiling's repeated measurements spread by {100 * spread:.0f}% (above "
            f"{100 * CEILING_SPREAD_LIMIT:.0f}%) in every attempt: every record measured until the ceiling is "
            "measured steady again (every minute) will be flagged 'noisy' and none ranked. The memory system is "
            "unsteady now; if this repeats, stop (Ctrl-C keeps what is written) and re-run when it is quieter.")


def busy_cores(interval_s: float = 0.5, read=None, sleep=None) -> float | None:
    """Cores kept busy over the next ``interval_s`` seconds, from Linux's ``/proc/stat`` (non-idle time of all CPUs
    over wall time); ``None`` where there is none. Unlike the load average it does not remember the last minute."""
    def totals():
        try:
            if read:
                text = read()
            else:
                with open("/proc/stat") as f:
                    text = f.readline()
            fields = [int(v) for v in text.splitlines()[0].split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        except (OSError, ValueError, IndexError):
            return None
        return sum(fields[:8]) - idle, sum(fields[:8])

    first = totals()
    (sleep or time.sleep)(interval_s)
    second = totals()
    if first is None or second is None or second[1] <= first[1]:
        return None
    return (os.cpu_count() or 1) * (second[0] - first[0]) / (second[1] - first[1])


def busy_warning(device: str, threads: int, busy=None) -> str | None:
    """A warning to print at the start of a run when the machine is already busy, else ``None``. A load average
    above the limit is confirmed by sampling the CPUs for half a second (:func:`busy_cores`): right after another
    run ends the load average still counts it for a minute while the cores are idle."""
    load = machine_load(busy=busy)  # before the run starts, all of the load is someone else's
    bg = load["background_load_per_core"]
    if bg is None or bg <= LOAD_PER_CORE_LIMIT:
        return None
    now = load.get("busy_cores")
    seen = f"; {now:.1f} cores busy just now" if now is not None else ""
    per_core = max(0.0, load["load1"]) / load["cores"]
    return (f"warning: this machine is busy (load average {load['load1']:.2f} on {load['cores']} cores, "
            f"{per_core:.2f} per core{seen}); timings will be noisy and records measured now are flagged 'noisy'. "
            "Stop other work, or re-run later with --force.")
