"""Processes that stop when asked, in four parts: the one fork pool every normbench process pool runs on (``pool``),
the command's interruption handling, Ctrl-C and SIGTERM, once, with a deadline (``interruption``), the stuck report
(``stuck``), and the test-only phase hook (``phases``). Every name is imported from here
(``from normbench.processes import Pool``)."""

from normbench.processes.interruption import (
    STOP_DEADLINE_S,
    _on_signal,
    _State,
    exit_stopped,
    held,
    interruptible,
    reinstall,
    stopping,
    track,
)
from normbench.processes.phases import PHASE_ENV, PHASE_FILE_ENV, PHASE_PAUSE_S, phase
from normbench.processes.pool import AHEAD, JOIN_S, Pool, WorkerDied, _worker, can_fork
from normbench.processes.stuck import DEFAULT_STUCK_S, STUCK_ENV, env_seconds, say_stuck, stuck_after

__all__ = [
    "AHEAD", "DEFAULT_STUCK_S", "JOIN_S", "PHASE_ENV", "PHASE_FILE_ENV", "PHASE_PAUSE_S", "STOP_DEADLINE_S",
    "STUCK_ENV", "Pool", "WorkerDied", "_State", "_on_signal", "_worker", "can_fork", "env_seconds", "exit_stopped",
    "held", "interruptible", "phase", "reinstall", "say_stuck", "stopping", "stuck_after", "track",
]
