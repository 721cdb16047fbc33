"""The one process pool: forked workers, each with its own pipe, that stop when asked and say when one died."""

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

from normbench.processes.interruption import _State, held
from normbench.processes.phases import phase
from normbench.processes.stuck import say_stuck, stuck_after

#: How long a pool's workers get to exit, after their last task or after SIGTERM, before they are killed.
JOIN_S = 2.0
#: Tasks handed to one pool worker ahead of its results (what ``Pool(chunksize=4)`` did): workers keep busy while the
#: parent does other work, and the indices are small enough never to fill a pipe.
AHEAD = 4


class WorkerDied(RuntimeError):
    """A pool worker died before it sent its result (killed, the OOM killer, a crash): the pool's work is lost, what
    was written before is kept."""


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
