"""The forkserver normbench's worker processes fork from (``executor.WorkerExecutor``): started with SIGINT blocked,
ended at once on an interruption, one start or stop at a time (the training lanes start workers from several
threads); and a spawned worker's start without the caller's ``__main__``."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from normbench.processes import track


def start() -> None:
    """Start the forkserver (under ``LOCK``) with SIGINT blocked: it imports torch before it ignores
    SIGINT, and a Ctrl-C to the process group meanwhile printed a traceback from it. (The mask survives its exec; it
    ignores SIGINT from then on, and each worker unblocks SIGINT first, since a Ctrl-C is how a worker is asked to
    stop.)"""
    import signal
    from multiprocessing import forkserver, resource_tracker

    # The resource tracker first: starting it, multiprocessing blocks SIGINT and SIGTERM around its spawn and then
    # *unblocks* them, which would undo this block just before the forkserver's own spawn (a lane thread's first
    # worker: a group Ctrl-C then hit the forkserver's interpreter while it imported site, "Fatal Python error").
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    server = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_pid", None):
        track(server._forkserver_pid)
    global _atexit
    if not _atexit:
        import atexit

        # Left alone it exits when it notices this process gone: at its own pace (tearing torch down), after us.
        atexit.register(stop)
        _atexit = True


_atexit = False
#: The lanes of ``accuracy_suite.train_cells`` start and stop workers from several threads: one forkserver start or
#: stop at a time (two threads stopping it at once, each in multiprocessing's unlocked ``_stop``, printed a traceback).
LOCK = threading.RLock()


def stop() -> None:
    """On an interruption, end the forkserver now: left to notice that its command is gone, it does so only after
    its own start (importing torch: seconds, under load tens of them), an orphan meanwhile. The next worker starts
    a fresh one."""
    from multiprocessing import forkserver

    with LOCK:
        server = getattr(forkserver, "_forkserver", None)
        pid = getattr(server, "_forkserver_pid", None)
        if pid:
            _kill_forkserver(server, pid)


def kill_now() -> None:
    """SIGTERM to the forkserver without waiting for ``LOCK`` (held by a thread starting a worker, for as
    long as the forkserver imports torch): that thread's start then ends at once (EOF); :func:`stop`
    cleans up after it."""
    import signal
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def _kill_forkserver(server, pid: int) -> None:
    import signal

    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)   # its SIGTERM is the default action, even while it imports
    with contextlib.suppress(Exception):
        server._stop()   # closes its pipe, reaps it (dead already), forgets it
    track(pid, on=False)


@contextlib.contextmanager
def main_module_hidden():
    """Start a spawned worker without re-running the caller's main script in it.

    ``spawn`` normally re-imports ``__main__`` in the child (a user's script without an ``if __name__ ==
    "__main__"`` guard would then run again there). Tasks name functions in importable modules, so the worker
    needs none of it.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        main.__dict__.pop("__file__", None)
        if "__spec__" in saved:
            main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
