"""A command's interruption: the first SIGINT or SIGTERM raises ``KeyboardInterrupt``, once, and a stop that
overruns its deadline says where it is stuck and is forced; steps that must all happen run ``held``."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading

#: From the first Ctrl-C or SIGTERM, how long a command may take to stop (cleaning up, keeping what it finished)
#: before it is forced to: below the 10 s that the interruption tests allow.
STOP_DEADLINE_S = 8.0


class _State:
    installed = False     # whether this process's SIGINT/SIGTERM handlers are ours (a command, not a library use)
    stopping = False      # a first signal was taken: the command is on its way out
    held = 0              # inside held(): a signal is noted, raised when the block ends
    pending: int | None = None
    done = threading.Event()   # set when a command run inside another program returns: no deadline then
    children: set = set()  # pids this process must not leave behind (pool workers), killed if stopping overruns


def _on_signal(signum, frame) -> None:
    if _State.stopping:
        return  # a repeated signal: the stop under way is bounded by its deadline, a second raise would cut cleanup
    if _State.held:
        _State.pending = signum
        return
    _begin_stop(signum)
    raise KeyboardInterrupt


def _begin_stop(signum: int) -> None:
    _State.stopping = True
    done = _State.done
    threading.Thread(target=_deadline, args=(signum, done), name="normbench-stop-deadline", daemon=True).start()


def _deadline(signum: int, done: threading.Event) -> None:
    """After :data:`STOP_DEADLINE_S` still alive: say where it is stuck, kill the pool workers, exit."""
    if done.wait(STOP_DEADLINE_S):
        return
    with contextlib.suppress(Exception):
        sys.stderr.write(f"normbench: did not stop within {STOP_DEADLINE_S:g}s of {signal.Signals(signum).name}; "
                         "where it was (results already written are kept):\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    for pid in list(_State.children):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(130)


@contextlib.contextmanager
def interruptible(program: bool = False):
    """For a command's run (``cli.main``): the first SIGINT or SIGTERM raises ``KeyboardInterrupt`` (what is written
    is kept, workers are stopped on the way out); repeated signals do not cut that cleanup short, nor the exit that
    follows (the handlers stay then); a stop that takes longer than :data:`STOP_DEADLINE_S` says where it is stuck
    and is forced. ``program``: this process ends when the block does (the ``normbench`` command); otherwise (a
    command run inside another program, a test) the handlers are restored and the deadline dropped at its end.
    Outside the main thread, or inside another ``interruptible`` block (a library call that takes the signals when
    run on its own, made by a command that already did): no change."""
    if threading.current_thread() is not threading.main_thread() or _State.installed:
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _State.installed, _State.stopping, _State.held, _State.pending = True, False, 0, None
    _State.done = threading.Event()
    try:
        yield
    finally:
        _State.installed = False
        if not (program and _State.stopping):
            _State.done.set()
            _State.stopping = False
            for s, h in previous.items():
                signal.signal(s, h)


def exit_stopped(code: int) -> None:
    """End a program whose command was interrupted (``interruptible(program=True)`` took a signal) now: stdio
    flushed, the atexit handlers run (the forkserver's stop, Ray's shutdown, logging), then ``os._exit(code)``. What
    it skips is the interpreter's teardown of every loaded module, torch's above all: 1 s for ``import torch``
    alone, 2.5 s for ``bench`` here (3.4 s at load 5), after the command had already stopped in milliseconds.
    Nothing of normbench's is left to it (records and the site are written atomically and closed). No-op when the
    command was not interrupted, off the main thread, or while another non-daemon thread runs (one may still be
    finishing a file: the normal exit waits for it)."""
    main = threading.main_thread()
    if not _State.stopping or threading.current_thread() is not main:
        return
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    import atexit

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()   # what the interpreter's exit would run first (the zygote of the tests does the same)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def reinstall() -> None:
    """Take SIGINT and SIGTERM back after a library replaced the handlers (``ray.init`` installs its own SIGTERM
    handler, a ``sys.exit`` that skips the Ctrl-C path)."""
    if _State.installed and threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, _on_signal)


@contextlib.contextmanager
def held():
    """SIGINT and SIGTERM noted but not acted on inside the block (a few renames that must all happen: the site's
    swap), then raised as ``KeyboardInterrupt`` when it ends. Only where :func:`interruptible` runs; elsewhere the
    caller's own clean-up covers an interruption."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
        if not _State.held and _State.pending is not None and not _State.stopping:
            signum, _State.pending = _State.pending, None
            _begin_stop(signum)
            raise KeyboardInterrupt


def track(pid: int, on: bool = True) -> None:
    """Count ``pid`` among the processes this command must not leave behind (killed if its stop overruns)."""
    if on:
        _State.children.add(pid)
    else:
        _State.children.discard(pid)


def stopping() -> bool:
    """Whether this command was asked to stop."""
    return _State.stopping
