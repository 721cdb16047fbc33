"""The GPU's SM clock during a timing: warm-up until it ramped, each batch's clock from its own spin, and the
``low_clock`` judgement (docs/measurement.md, "Clock and warm-up")."""

from __future__ import annotations

import math
from typing import Callable


def spin_cycles(seconds: float, clock_hz: float) -> int:
    """Cycles for ``torch.cuda._sleep`` to spin ``seconds`` at ``clock_hz`` (the calibrated, fastest seen, clock:
    at a slower clock the spin only lasts longer)."""
    if not clock_hz or clock_hz <= 0:
        raise ValueError(f"the spin's clock rate must be calibrated first (got {clock_hz!r})")
    return max(1, math.ceil(seconds * clock_hz))


#: The clock check (docs/measurement.md, "Clock and warm-up"). Before timing, warm-up batches (a spin that loads the GPU
#: and measures its SM clock, then one timed unit of the case's own work) run until two consecutive batches are at
#: >= CLOCK_READY of the device's maximum SM clock (NVML's; without NVML the highest seen, once CLOCK_MIN_WORK_S of
#: GPU work ran), or until CLOCK_LIMIT_S of host time passed: then the record is flagged ``low_clock``. Every timed
#: batch's clock is measured from its own spin; one below CLOCK_LOW of the maximum flags the record ``low_clock``.
CLOCK_READY = 0.95
CLOCK_LOW = 0.90
CLOCK_MIN_WORK_S = 0.2
CLOCK_LIMIT_S = 3.0
#: Each warm-up batch's spin at the maximum clock (longer at a lower one): GPU load that ramps the clock.
WARM_SPIN_S = 5e-3
#: The shortest spin a batch gets: its clock reading then includes at most ~2 % of a launch gap.
MIN_SPIN_S = 100e-6


class ClockWatch:
    """The SM clock of one timing: the device's maximum (NVML, or the highest seen), the warm-up until it ramped, and
    each timed batch's clock measured from its own spin (``torch.cuda._sleep`` counts SM cycles)."""

    def __init__(self, max_hz: float | None):
        self.nvml_hz = max_hz if max_hz and max_hz > 0 else None
        self.warm_clocks: list[float] = []
        self.batch_clocks: list[float] = []
        self.warm_work_s = 0.0
        self.warm_host_s = 0.0
        self.ramped: bool | None = None   # None: no warm-up ran (no spin: keep-ahead off)

    @property
    def max_hz(self) -> float | None:
        return self.nvml_hz or max(self.warm_clocks + self.batch_clocks, default=None)

    def warm(self, ops, unit: Callable[[], object], limit_s: float | None = None) -> bool:
        """Warm-up batches until the clock is ready (see :data:`CLOCK_READY`) or ``limit_s`` (default
        :data:`CLOCK_LIMIT_S`) seconds of host time; returns whether it got there."""
        limit_s = CLOCK_LIMIT_S if limit_s is None else limit_s
        t0 = ops.clock()
        streak = 0
        while True:
            ref = self.max_hz or 1.98e9
            cycles = spin_cycles(WARM_SPIN_S, ref)
            a, b, c = ops.event(), ops.event(), ops.event()
            a.record()
            ops.spin(cycles)
            b.record()
            unit()
            c.record()
            ops.sync()
            spin_s = a.elapsed_time(b) / 1e3
            self.warm_work_s += a.elapsed_time(c) / 1e3
            hz = cycles / spin_s if spin_s > 0 else 0.0
            self.warm_clocks.append(hz)
            ready = hz >= CLOCK_READY * (self.max_hz or hz) and (self.nvml_hz or
                                                                  self.warm_work_s >= CLOCK_MIN_WORK_S)
            streak = streak + 1 if ready else 0
            self.warm_host_s = ops.clock() - t0
            if streak >= 2:
                self.ramped = True
                return True
            if self.warm_host_s >= limit_s:
                self.ramped = False
                return False

    def low_reason(self) -> str | None:
        """The ``low_clock`` flag's reason, or None."""
        top = self.max_hz
        if not top:
            return None
        src = "NVML's maximum SM clock" if self.nvml_hz else "the highest clock seen"
        why = []
        if self.ramped is False:
            why.append(f"the clock did not reach {100 * CLOCK_READY:.0f}% of {src} ({top / 1e6:.0f} MHz) in two "
                       f"consecutive warm-up batches within {self.warm_host_s:.1f} s (last "
                       f"{self.warm_clocks[-1] / 1e6:.0f} MHz)")
        low = [hz for hz in self.batch_clocks if hz < CLOCK_LOW * top]
        if low:
            why.append(f"{len(low)} of {len(self.batch_clocks)} timed batches ran below {100 * CLOCK_LOW:.0f}% of "
                       f"{src} ({top / 1e6:.0f} MHz; slowest {min(low) / 1e6:.0f} MHz)")
        return "; ".join(why) + ": the GPU was not at its clock, its times are not the device's" if why else None

    def info(self) -> dict:
        """What a record keeps (``metrics.clock``): clocks in MHz."""
        top = self.max_hz
        return {"max_mhz": round(top / 1e6, 1) if top else None,
                "max_source": "nvml" if self.nvml_hz else "highest seen",
                "warmup": {"ramped": self.ramped, "batches": len(self.warm_clocks), "work_s": self.warm_work_s,
                           "host_s": self.warm_host_s,
                           "mhz": [round(hz / 1e6, 1) for hz in self.warm_clocks[-4:]]},
                "batch_mhz": [round(hz / 1e6, 1) for hz in self.batch_clocks],
                "low_batches": sum(hz < CLOCK_LOW * top for hz in self.batch_clocks) if top else 0}


