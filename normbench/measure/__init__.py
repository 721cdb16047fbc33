"""The measurement core: timers, memory, bytes-moved models, bandwidth ceilings, float64 error, sweeps.

A sweep is planned (``planning``: cases, grids, record ids), measured group by group (``group``: one built module,
its passes timed, their records) and run (``sweep``: every group through an executor, records written as they
come). Heavy pieces import lazily: ``from normbench.measure.sweep import run_sweep`` (or ``normbench.measure.plan``).
"""

from __future__ import annotations

_LAZY = {
    "Case": "planning", "plan": "planning", "default_device": "planning", "Prepared": "group",
    "Unsupported": "group", "measure_group": "group", "make_context": "group", "run_sweep": "sweep",
    "TimerSettings": "timers", "bytes_moved": "bytes_model", "summarize": "stats",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"normbench.measure.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'normbench.measure' has no attribute {name!r}")
