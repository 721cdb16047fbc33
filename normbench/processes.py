"""Processes that stop when asked: the one fork pool every normbench process pool runs on, the command's interruption
handling (Ctrl-C and SIGTERM, once, with a deadline), the stuck report, and the test-only phase hook."""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait as _wait
from typing import Callable, Iterable, Iterator

#: Seconds a pool (or the executor) may wait with no progress before it says where it is stuck; 0: never.
STUCK_ENV = "NORMBENCH_STUCK_S"
DEFAULT_STUCK_S = 300.0
#: From the first Ctrl-C or SIGTERM, how long a command may take to stop (cleaning up, keeping what it finished)
#: before it is forced to: below the 10 s that the interruption tests allow.
STOP_DEADLINE_S = 8.0
#: How long a pool's workers get to exit, after their last task or after SIGTERM, before they are killed.
JOIN_S = 2.0
#: Tasks handed to one pool worker ahead of its results (what ``Pool(chunksize=4)`` did): workers keep busy while the
#: parent does other work, and the indices are small enough never to fill a pipe.
AHEAD = 4
#: The test-only hook (see :func:`phase`): the phase at which to pause, and the file that says where it paused.
PHASE_ENV = "NORMBENCH_TEST_PHASE"
PHASE_FILE_ENV = "NORMBENCH_TEST_PHASE_FILE"
PHASE_PAUSE_S = 60.0


class WorkerDied(RuntimeError):
    """A pool worker died before it sent its result (killed, the OOM killer, a crash): the pool's work is lost, what
    was written before is kept."""


# --- the command's interruption ---------------------------------------------------------------------------------

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
        # else the process is on its way out: a repeated signal still must not kill it mid-exit, and the deadline
        # bounds the exit as it bounded the stop


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


# --- where a command is stuck -----------------------------------------------------------------------------------

def env_seconds(env: str, default: float) -> float | None:
    """Seconds from the environment variable ``env`` (``default`` when unset; 0 or less: none, i.e. no limit)."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{env} must be a number of seconds, got {raw!r}") from None
    return None if value <= 0 else value


def stuck_after() -> float | None:
    """Seconds without progress after which a wait says where it is stuck (``$NORMBENCH_STUCK_S``; 0: never)."""
    return env_seconds(STUCK_ENV, DEFAULT_STUCK_S)


def say_stuck(what: str) -> None:
    """One line on stderr: what this command has waited on, and for how long."""
    with contextlib.suppress(Exception):
        print(f"normbench: still waiting: {what}", file=sys.stderr, flush=True)


# --- the test-only phase hook ------------------------------------------------------------------------------------

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


# --- the pool ----------------------------------------------------------------------------------------------------

def can_fork() -> bool:
    """Whether this platform starts processes by fork (the pool's workers share the parent's loaded data)."""
    return "fork" in multiprocessing.get_all_start_methods()


def _worker(fn: Callable, conn, others: list) -> None:
    """A pool worker: SIGTERM's default action (the parent's teardown and a group's SIGTERM end it, whatever it waits
    on), SIGINT ignored (the parent decides; a Ctrl-C to the group must not print a traceback here), its stack on
    stderr at SIGUSR1 (the parent's stuck report); then each index it is sent, ``fn(index)`` back, until ``None``."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _State.installed, _State.stopping, _State.held, _State.pending = False, False, 0, None
    _State.children = set()
    with contextlib.suppress(Exception):
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    for c in others:  # the other workers' pipe ends: a copy here would hide that worker's death from the parent
        with contextlib.suppress(OSError):
            c.close()
    while True:
        try:
            i = conn.recv()
        except (EOFError, OSError):
            return
        if i is None:
            return
        try:
            msg = ("ok", i, fn(i))
        except BaseException as exc:  # noqa: BLE001 - the parent raises it
            text = traceback.format_exc()
            try:
                pickle.dumps(exc)
                msg = ("error", i, (exc, text))
            except Exception:
                msg = ("error", i, (None, text))
        try:
            conn.send(msg)
        except (BrokenPipeError, ConnectionResetError):
            return  # the parent is gone
        except Exception as exc:  # an unpicklable result
            conn.send(("error", i, (None, f"the result of task {i} could not be sent back: {exc}")))


class Pool:
    """``jobs`` forked workers running ``fn(index)``, each with its own pipe (no lock shared between processes, so a
    worker that dies at any instant blocks nobody); results come back as they are done (:meth:`results`). Leaving
    the ``with`` block after the results: workers told to stop, joined, killed after :data:`JOIN_S`; leaving it by
    an exception (``KeyboardInterrupt`` included): workers sent SIGTERM, joined, killed after :data:`JOIN_S`. A
    worker that dies before sending its result raises :class:`WorkerDied`. ``what`` names the pool in messages.
    ``fn`` and whatever it reads need no pickling (the workers are forks); results and exceptions are pickled."""

    def __init__(self, fn: Callable[[int], object], jobs: int, what: str = "pool"):
        if not can_fork():
            raise RuntimeError("normbench.processes.Pool needs fork (use one job on this platform)")
        self.fn, self.jobs, self.what = fn, max(1, int(jobs)), what
        self._procs: list = []
        self._conns: list = []
        self.pids: list[int] = []

    def __enter__(self) -> "Pool":
        ctx = multiprocessing.get_context("fork")
        main = threading.current_thread() is threading.main_thread()
        try:
            for _ in range(self.jobs):
                parent, child = ctx.Pipe(duplex=True)
                others = [*self._conns, parent]
                proc = ctx.Process(target=_worker, args=(self.fn, child, others), daemon=True,
                                   name=f"normbench-{self.what}")
                # Signals blocked across the fork (the child sets its own dispositions first, then takes them) and
                # held here (a KeyboardInterrupt between fork and bookkeeping would orphan the child).
                with held():
                    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if main else None
                    try:
                        proc.start()
                    finally:
                        if old is not None:
                            signal.pthread_sigmask(signal.SIG_SETMASK, old)
                    self._procs.append(proc)
                    self._conns.append(parent)
                    self.pids.append(proc.pid)
                    _State.children.add(proc.pid)
                child.close()
        except BaseException:
            self._teardown(clean=False)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._teardown(clean=exc_type is None)

    def results(self, indices: Iterable[int]) -> Iterator[tuple[int, object]]:
        """``(index, fn(index))`` for every index, in the order they finish. The first tasks are handed out now,
        so the workers run while the caller does something else before it iterates."""
        todo = list(indices)[::-1]
        busy: dict[int, list] = {w: [] for w in range(len(self._procs))}   # worker -> indices sent, oldest first
        since: dict[int, float] = {}

        def feed(w: int) -> None:
            while todo and len(busy[w]) < AHEAD:
                i = todo.pop()
                self._conns[w].send(i)
                busy[w].append(i)
                since.setdefault(w, time.monotonic())

        for w in busy:
            feed(w)
        return self._collect(busy, since, feed)

    def _collect(self, busy: dict, since: dict, feed) -> Iterator[tuple[int, object]]:
        by_conn = {id(c): w for w, c in enumerate(self._conns)}
        by_sentinel = {p.sentinel: w for w, p in enumerate(self._procs)}
        stuck = stuck_after()
        last = time.monotonic()
        while any(busy.values()):
            waiting = [self._conns[w] for w in busy if busy[w]]
            ready = _wait(waiting + [self._procs[w].sentinel for w in busy if busy[w]],
                          timeout=stuck if stuck else None)
            if not ready:
                self._report_stuck(busy, since, time.monotonic() - last)
                continue
            for r in ready:
                if r in by_sentinel:
                    w = by_sentinel[r]
                    if busy[w] and not self._conns[w].poll():
                        self._died(w, busy[w][0])
                    continue
                w = by_conn[id(r)]
                try:
                    kind, i, payload = r.recv()
                except (EOFError, OSError):
                    self._died(w, busy[w][0] if busy[w] else None)
                busy[w].remove(i)
                since[w] = time.monotonic()
                last = since[w]
                if kind == "error":
                    err, text = payload
                    if err is None:
                        raise RuntimeError(f"{self.what}: task {i} failed in a worker:\n{text}")
                    raise err
                feed(w)
                yield i, payload
        phase("pool-end")

    def _died(self, w: int, i) -> None:
        proc = self._procs[w]
        proc.join(JOIN_S)
        code = proc.exitcode
        how = f"killed by {signal.Signals(-code).name}" if isinstance(code, int) and code < 0 else f"exit code {code}"
        raise WorkerDied(f"a worker of the {self.what} (pid {proc.pid}) died ({how}) while on task {i}; what was "
                         "written before is kept; run the command again (or with one job)")

    def _report_stuck(self, busy: dict, since: dict, quiet: float) -> None:
        now = time.monotonic()
        parts = [f"worker pid {self._procs[w].pid} on task {busy[w][0]} for {now - since.get(w, now):.0f}s"
                 for w in busy if busy[w]]
        say_stuck(f"{self.what}: no result for {quiet:.0f}s; " + "; ".join(parts)
                  + " (their stacks follow on stderr)")
        for w in busy:
            if busy[w]:
                with contextlib.suppress(OSError):
                    os.kill(self._procs[w].pid, signal.SIGUSR1)

    def _teardown(self, clean: bool) -> None:
        """Never blocks past ``2 * JOIN_S``: told to stop (``clean``) or SIGTERM, then joined, then SIGKILL."""
        for conn in self._conns:
            if clean:
                with contextlib.suppress(OSError, ValueError):
                    conn.send(None)
        if not clean:
            for proc in self._procs:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    proc.terminate()
        deadline = time.monotonic() + JOIN_S
        for proc in self._procs:
            with contextlib.suppress(ValueError, AttributeError):
                proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            with contextlib.suppress(ValueError, AttributeError, OSError):
                if proc.exitcode is None:
                    proc.kill()
                    proc.join(JOIN_S)
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()
        for proc in self._procs:
            _State.children.discard(proc.pid)
            with contextlib.suppress(ValueError, AttributeError):
                proc.close()
        self._procs, self._conns = [], []
