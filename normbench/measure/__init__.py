"""The measurement core: timers, memory, bytes-moved models, bandwidth ceilings, float64 error, sweeps.

Heavy pieces import lazily: ``from normbench.measure.core import plan, run_sweep`` (or ``normbench.measure.plan``).
"""

from __future__ import annotations

_LAZY = {
    "Case": "core", "Prepared": "core", "Unsupported": "core", "plan": "core", "measure_group": "core",
    "run_sweep": "core", "make_context": "core", "TimerSettings": "timers", "bytes_moved": "bytes_model",
    "summarize": "stats",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"normbench.measure.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'normbench.measure' has no attribute {name!r}")
