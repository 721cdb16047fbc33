"""The test-only phase hook: named points of a command's run where the interruption tests pause it and signal it."""

from __future__ import annotations

import os
import threading
import time

from normbench.processes.interruption import _State

#: The test-only hook (see :func:`phase`): the phase at which to pause, and the file that says where it paused.
PHASE_ENV = "NORMBENCH_TEST_PHASE"
PHASE_FILE_ENV = "NORMBENCH_TEST_PHASE_FILE"
PHASE_PAUSE_S = 60.0


def phase(name: str, until: threading.Event | None = None) -> None:
    """A named point of a command's run (``read``, ``judge``, ``task``, ``write``, ``render``, ``pool-end``,
    ``swap``, ``lane``...). Inert unless ``$NORMBENCH_TEST_PHASE`` names it: then the first process to get there
    (once per run) writes ``<name> <pid>`` to ``$NORMBENCH_TEST_PHASE_FILE`` and pauses (up to a minute) for the
    interruption test to signal it there. Outside the main thread (which no signal interrupts) the pause also ends
    when the command is stopping or ``until`` is set, as the thread's real work there would."""
    if os.environ.get(PHASE_ENV) != name:
        return
    path = os.environ.get(PHASE_FILE_ENV)
    if path:
        try:  # the first process there pauses, once: the run goes on past it afterwards (a worker killed there)
            os.close(os.open(path + ".taken", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{name} {os.getpid()}\n")
    deadline = time.monotonic() + PHASE_PAUSE_S
    while (time.monotonic() < deadline and _State.pending is None
           and not (threading.current_thread() is not threading.main_thread()
                    and (_State.stopping or (until is not None and until.is_set())))):
        time.sleep(0.02)
