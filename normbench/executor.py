"""Executors: where a norm's work (a check, a group of kernel cases, a training run) runs, isolated from the others.

The interface every executor implements (``InProcessExecutor``, ``WorkerExecutor`` here; the Ray executor of the
scale-out work the same way)::

    with make_executor("worker") as ex:
        fut = ex.submit(Task(fn, args, label="rmsnorm/eager/tokens", timeout=300))   # -> Future[Outcome]
        for outcome in ex.map(tasks):                                               # Outcomes, in task order
            ...

* A :class:`Task` names a module-level function (picklable by reference) and picklable arguments. Work is
  described by names (a norm's registry name, a ``Case``), never by live objects such as a ``NormSpec`` (whose
  factory may be a lambda): the process that runs it discovers the norms itself.
* ``submit`` returns a ``concurrent.futures.Future`` whose result is always an :class:`Outcome`; it never raises for a
  failure of the task. A failure (exception, time limit, no progress, process death) is an ``Outcome`` with
  ``ok=False``, a ``status`` and a readable ``error``. Callers must not assume that ``submit`` blocks or that tasks
  run in order: the in-process and worker executors run one task at a time, a Ray executor runs many at once.
* ``Task.timeout`` is a wall-clock limit (kernel cases). ``Task.stall_timeout`` is a no-progress limit: the task calls
  :func:`heartbeat` as it advances (a training step) and is stopped only when no heartbeat came for that long, so
  long runs live. An executor that cannot enforce limits (``InProcessExecutor``) says so in ``enforces_limits``.
* Results are returned to the caller, who writes records: a task's side effects are its own.
* ``Task.resources`` says what a task holds while it runs (``{"num_gpus": 1}`` for a GPU timing task,
  ``{"node_cpus": True}`` for a CPU timing task: every core of its node). Only a Ray executor, which runs many tasks
  at once, acts on it (``normbench.ray_executor``); the others run one task at a time anyway.
* An executor's process runs a task with :func:`run_task` (the call, any failure turned into an ``Outcome``), its
  heartbeats going wherever the executor installed them (:func:`beating`): the worker here and a Ray task alike.

``WorkerExecutor`` keeps one worker process (torch imported once) and replaces it only after a hang or a crash, so a
hanging or crashing norm costs one process start, not one per norm. Workers are forked from a ``forkserver`` that
imported torch once (a fresh spawned interpreter where there is none), so even a replacement starts quickly.
"""

from __future__ import annotations

import abc
import concurrent.futures
import contextlib
import importlib
import multiprocessing
import os
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as _mp_wait
from typing import Any, Callable, Iterable, Iterator

from normbench import forkserver as _fs
from normbench.processes import env_seconds, say_stuck, stopping, stuck_after, track

#: Environment variables for the defaults (the CLI options ``--executor``, ``--time-limit`` and ``--stall-limit``
#: override them).
EXECUTOR_ENV = "NORMBENCH_EXECUTOR"
TIME_LIMIT_ENV = "NORMBENCH_TIME_LIMIT"
STALL_LIMIT_ENV = "NORMBENCH_STALL_LIMIT"
#: Default wall-clock limit of one kernel task (a group of cases: one norm, backend, shape and dtype, every pass,
#: torch.compile or Triton compilation included): 5 minutes.
DEFAULT_TIME_LIMIT_S = 300.0
#: Default wall-clock limit of one norm's ``check`` (tiny CPU shapes: seconds for an honest norm): 2 minutes.
DEFAULT_CHECK_LIMIT_S = 120.0
#: Default no-progress limit of a training run: 30 minutes without a step (first step: data, model, compilation).
DEFAULT_STALL_LIMIT_S = 1800.0
#: How long a fresh worker may take to import torch and discover the norms before it is declared broken.
WORKER_START_LIMIT_S = 600.0
#: On Ctrl-C or SIGTERM, how long the worker gets to stop by itself after it is sent SIGINT (a training run saves its
#: checkpoint), then after SIGTERM, before SIGKILL: the whole stop fits the 10 s an interruption may take.
INTERRUPT_GRACE_S = 4.0
TERM_GRACE_S = 1.5

OK, ERROR, TIMEOUT, STALLED, CRASHED = "ok", "error", "timeout", "stalled", "crashed"


@dataclass
class Task:
    """One unit of isolated work: ``fn(*args, **kwargs)`` with limits."""

    fn: Callable[..., Any] | str          # a module-level function, or "package.module:function"
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str = ""                       # what a failure is reported as, e.g. the norm's name
    timeout: float | None = None          # wall-clock seconds (None: no limit)
    stall_timeout: float | None = None    # seconds without a heartbeat (None: no limit)
    resources: dict = field(default_factory=dict)   # what it holds while it runs (see the module docstring)


@dataclass
class Outcome:
    """What became of a task: its return value, or why there is none."""

    label: str
    status: str                           # ok | error | timeout | stalled | crashed
    value: Any = None
    error: str = ""                       # one line: what happened, for the user
    exc_type: str = ""                    # the exception's class name when status == "error"
    message: str = ""                     # str(exception) when status == "error"
    traceback: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def broke(self) -> str | None:
        """``"hung"`` (stopped at its time or no-progress limit), ``"crashed"`` (its process died), else ``None``
        (it returned, or raised an ordinary exception). A task that broke this way would break again on the same
        work: callers skip that norm's remaining work and say so in these words."""
        if self.status in (TIMEOUT, STALLED):
            return "hung"
        if self.status == CRASHED:
            return "crashed"
        return None


def _resolve(fn):
    """``normbench.registry.resolve``, imported when first needed (this module imports no torch)."""
    from normbench.registry import resolve

    return resolve(fn)


def _describe_exc(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


# --- running one task, wherever an executor runs it ---------------------------------------------------------------

_beat: Callable[[], None] | None = None


def heartbeat() -> None:
    """Say that the running task is making progress (a training step). Cheap; a no-op outside a worker."""
    if _beat is not None:
        _beat()


@contextlib.contextmanager
def beating(beat: Callable[[], None] | None):
    """While the block runs, :func:`heartbeat` calls ``beat`` (how the process running a task tells its executor
    that the task progresses: a message up a pipe, a call to a Ray actor); ``None`` leaves it as it is. What was
    installed before is restored after."""
    global _beat
    previous = _beat
    if beat is not None:
        _beat = beat
    try:
        yield
    finally:
        _beat = previous


def run_task(task: Task, beat: Callable[[], None] | None = None) -> Outcome:
    """Run ``task`` here and now, with ``beat`` as its heartbeat (see :func:`beating`): the body of a worker process
    and of a Ray task. Any failure of the task is an ``error`` :class:`Outcome` (never an exception) except a
    ``KeyboardInterrupt``, which stops whoever runs it. The limits are enforced from outside, by the executor that
    watches this process; ``wall_s`` is the call's own duration."""
    from normbench.processes import phase

    t0 = time.perf_counter()
    with beating(beat):
        try:
            phase("task")
            value = _resolve(task.fn)(*task.args, **task.kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure of the task is its outcome
            return Outcome(task.label, ERROR, error=_describe_exc(exc), exc_type=type(exc).__name__,
                           message=str(exc), traceback=traceback.format_exc(), wall_s=time.perf_counter() - t0)
    return Outcome(task.label, OK, value=value, wall_s=time.perf_counter() - t0)


# --- the interface --------------------------------------------------------------------------------------------------

class Executor(abc.ABC):
    """Runs :class:`Task` s and turns every result or failure into an :class:`Outcome` (see the module docstring)."""

    #: Whether ``Task.timeout`` and ``Task.stall_timeout`` are enforced (a hang is stopped and reported).
    enforces_limits: bool = True
    name: str = "executor"
    #: Whether tasks run at once, on other machines: callers then submit everything before waiting, and work that
    #: depends on the machine (the copy ceiling, provenance, the hardware part of record ids) is done by the task.
    remote: bool = False

    @abc.abstractmethod
    def submit(self, task: Task) -> concurrent.futures.Future:
        """Start ``task``; the future's result is its :class:`Outcome` (never an exception from the task)."""

    def map(self, tasks: Iterable[Task]) -> Iterator[Outcome]:
        """Outcomes of ``tasks``, in task order. Executors that run tasks concurrently submit them all first."""
        for task in tasks:
            yield self.submit(task).result()

    def close(self) -> None:
        """Release processes or connections; the executor is not used afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _done(outcome: Outcome) -> concurrent.futures.Future:
    fut: concurrent.futures.Future = concurrent.futures.Future()
    fut.set_result(outcome)
    return fut


class InProcessExecutor(Executor):
    """Runs tasks in this process, one after the other. No isolation and no limits: a hang hangs the caller.

    For library use, tests and ``torchrun`` (where the process is the unit of distribution).
    """

    enforces_limits = False
    name = "inprocess"

    def submit(self, task: Task) -> concurrent.futures.Future:
        t0 = time.perf_counter()
        try:
            value = _resolve(task.fn)(*task.args, **task.kwargs)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            return _done(Outcome(task.label, ERROR, error=_describe_exc(exc), exc_type=type(exc).__name__,
                                 message=str(exc), traceback=traceback.format_exc(),
                                 wall_s=time.perf_counter() - t0))
        return _done(Outcome(task.label, OK, value=value, wall_s=time.perf_counter() - t0))


# --- the worker process ---------------------------------------------------------------------------------------------

#: A worker's exit status when it finds its parent gone (its heartbeat pipe broken) in the middle of a task.
ORPHANED_EXIT = 75


def _first_interrupt_only(signum, frame) -> None:
    """A worker's SIGINT and SIGTERM handler: the first of either raises ``KeyboardInterrupt``, any later one is
    ignored (the parent ends a worker that does not stop with SIGKILL, after its grace)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _worker_main(conn, env: dict, preload: tuple = ()) -> None:
    """The worker's loop: receive a task, run it (:func:`run_task`), send its outcome; heartbeats go up the same
    pipe."""
    last = [0.0]

    def beat() -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:  # at most two messages a second, however fast the steps
            last[0] = now
            try:
                conn.send(("beat", None))
            except (BrokenPipeError, ConnectionResetError):
                # The sweep that asked is gone (killed without its Ctrl-C path): stop now rather than keep timing
                # on a machine whose next run would measure this orphan's load (a halved copy ceiling, seen).
                os._exit(ORPHANED_EXIT)
            except (OSError, ValueError):
                pass

    try:
        # Inside the try: a Ctrl-C passed on while this worker starts (a lane interrupted as it forks its worker) may
        # land on any of these lines, and must end it quietly (it printed "Process normbench-worker: Traceback").
        import signal

        # One Ctrl-C stops a worker; later ones are ignored: the group's SIGINT is followed by the parent's (which
        # passes the interruption on: it cannot know that the group's reached the worker), and a second
        # KeyboardInterrupt in the worker's exit (multiprocessing's _exit_function) printed a traceback.
        signal.signal(signal.SIGINT, _first_interrupt_only)
        # SIGTERM (the group's: a CI runner's timeout, ``kill -- -PGID``; the parent's _kill) takes the same path: by
        # default it ended the worker at once, leaving a file it was writing atomically as a ``.tmp`` (the check
        # gate's cache, seen in the suites' interrupted lanes).
        signal.signal(signal.SIGTERM, _first_interrupt_only)
        # Forked from a forkserver started with SIGINT blocked (forkserver.start): a Ctrl-C must reach a worker.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        # Whatever a norm prints belongs on stderr: stdout may be a --json document being written by the parent.
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            os.dup2(2, 1)
        sys.stdout = sys.stderr
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update(env)

        import torch  # noqa: F401  (the import this worker exists to pay once)

        from normbench.discovery import REGISTRY

        REGISTRY.specs
        for mod in preload:  # paid before any task's clock starts
            importlib.import_module(mod)
        conn.send(("ready", None))
    except KeyboardInterrupt:
        return   # the command was interrupted while this worker started: nothing to say
    except (BrokenPipeError, ConnectionResetError):
        return   # the parent gave up on this worker while it started (interrupted): no one to tell
    except BaseException as exc:  # a worker that cannot start says why
        with contextlib.suppress(OSError):
            conn.send(("start_failed", _describe_exc(exc)))
        return
    # Ctrl-C (the group's, or passed on by the parent) ends this worker quietly wherever it lands: the parent
    # reports the interruption.
    with contextlib.suppress(KeyboardInterrupt):
        _serve(conn, beat, last)


def _serve(conn, beat, last: list) -> None:
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:
            return
        task = msg
        # Unpickling the task may have imported modules for a while: the stall clock starts now.
        last[0] = 0.0
        beat()
        try:
            outcome = run_task(task, beat)
        except KeyboardInterrupt:
            return
        try:
            conn.send(("done", outcome))
        except Exception as exc:  # an unpicklable return value is the task's error, not the worker's death
            msg = f"the task's result could not be sent back: {exc}"
            conn.send(("done", Outcome(task.label, ERROR, error=msg, exc_type=type(exc).__name__, message=msg)))


class _Watched:
    """A worker process watched through its own pid (a pidfd on Linux), not only through multiprocessing's ``Popen``.

    A forkserver's child is not this process's child: ``Popen`` learns of its exit from the forkserver, and once the
    forkserver is gone (an interruption stops it: :func:`normbench.forkserver.stop`) it reports every child of it
    dead (exit 255) and its ``terminate()``/``kill()`` send nothing, while the child lives on: a lane's worker
    outlived its interrupted command that way (issue #36). Here liveness, waiting and signals go to the process
    itself."""

    def __init__(self, proc):
        self.proc, self.pid = proc, proc.pid
        self.fd = None
        with contextlib.suppress(AttributeError, OSError):   # no pidfd (not Linux, kernel < 5.3): by pid
            self.fd = os.pidfd_open(proc.pid)

    @property
    def sentinel(self):
        """What to wait on (``multiprocessing.connection.wait``) for this process's exit."""
        return self.fd if self.fd is not None else self.proc.sentinel

    def alive(self) -> bool:
        if self.fd is not None:
            return not _mp_wait([self.fd], timeout=0)
        if self.proc.is_alive():
            return True
        if self.proc.exitcode != 255:   # the exit status its forkserver (or this process) saw: gone
            return False
        try:   # 255: perhaps only its forkserver died; ask the system (a zombie is reaped by init)
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True

    def wait(self, timeout: float) -> bool:
        """Whether it ended within ``timeout`` seconds."""
        if self.fd is not None:
            return bool(_mp_wait([self.fd], timeout=max(0.0, timeout)))
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def signal(self, signum: int) -> None:
        import signal

        with contextlib.suppress(ProcessLookupError):
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signum)
            elif self.alive():
                os.kill(self.pid, signum)

    def exitcode(self, wait: float = 5.0):
        """Its exit status as its parent saw it (the forkserver reports it shortly after the exit; ``None`` or 255
        where the forkserver is gone)."""
        with contextlib.suppress(ValueError, AssertionError):
            self.proc.join(wait)
        return self.proc.exitcode

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


class WorkerExecutor(Executor):
    """Runs tasks one at a time in a reusable worker process (torch imported once; see the module docstring).

    A task that exceeds its time limit, stops sending heartbeats, or kills its process (``os._exit``, a segfault,
    the OOM killer) is reported as such and the worker is replaced before the next task. ``env`` is applied to the
    worker's environment; ``preload`` names modules a worker imports when it starts, before any time limit runs.
    """

    name = "worker"

    def __init__(self, env: dict | None = None, preload: Iterable[str] = (), start_method: str | None = None):
        if start_method is None:
            # forkserver: the server imports torch once; each (re)started worker is a fork of it, ready in a blink.
            # spawn (a fresh interpreter per worker) where there is no forkserver (Windows).
            methods = multiprocessing.get_all_start_methods()
            start_method = "forkserver" if "forkserver" in methods else "spawn"
        self._ctx = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload(["torch", "normbench.registry", "normbench.norms.specs"])
        self._env = dict(env or {})
        self._preload = tuple(preload)
        self._proc = None
        self._watch: _Watched | None = None
        self._conn = None
        self.restarts = 0
        self._interrupted: float | None = None   # when interrupt() was called: no task starts any more (see _run)

    def _start(self) -> str | None:
        parent, child = self._ctx.Pipe(duplex=True)
        # The caller's environment as it is now (a forkserver started earlier has an older one), plus ``env``.
        env = {**os.environ, **self._env}
        proc = self._ctx.Process(target=_worker_main, args=(child, env, self._preload), daemon=True,
                                 name="normbench-worker")
        forkserver = self._ctx.get_start_method() == "forkserver"
        # Under the forkserver's lock from the last look at _interrupted to the fork: interrupt() either comes first
        # (no forkserver is started again, nor a worker) or stops the forkserver this start then holds, which
        # releases the start at once (EOF) instead of letting it run into a new one (Process.start() would start
        # it itself: seconds of importing torch, after the command was told to stop).
        with _fs.LOCK if forkserver else contextlib.nullcontext():
            if self._interrupted is not None:   # not even a forkserver started (interrupt() stopped the last one)
                child.close()
                parent.close()
                return "interrupted before its worker process started"
            if forkserver:
                _fs.start()
                if self._interrupted is not None:   # interrupt() came meanwhile (and may have found none to stop)
                    _fs.stop()
                    child.close()
                    parent.close()
                    return "interrupted before its worker process started"
            try:
                with _fs.main_module_hidden():
                    proc.start()
            except (EOFError, OSError):
                if self._interrupted is None:
                    raise
                child.close()
                parent.close()
                return "interrupted while its worker process started"   # interrupt() stopped the forkserver
        child.close()
        self._proc, self._watch, self._conn = proc, _Watched(proc), parent
        track(proc.pid)
        deadline = time.monotonic() + WORKER_START_LIMIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                return f"the worker process did not start within {WORKER_START_LIMIT_S:.0f}s"
            ready = _mp_wait([parent, self._watch.sentinel], timeout=min(left, 0.1))
            if self._interrupted is not None:   # interrupt() came before this worker was there to be told
                self._kill(TERM_GRACE_S)
                return "interrupted while its worker process started"
            if parent in ready:
                try:
                    kind, payload = parent.recv()
                except (EOFError, OSError):
                    kind, payload = "start_failed", "the worker process died while starting"
                if kind == "ready":
                    return None
                self._kill()
                return str(payload)
            if self._watch.sentinel in ready:
                code = self._watch.exitcode()
                self._kill()
                return f"the worker process died while starting (exit code {code})"

    def _kill(self, grace: float = 5.0) -> None:
        """End the worker, whatever state it and its forkserver are in: SIGTERM, then SIGKILL after ``grace``."""
        watch, conn = self._watch, self._conn
        self._proc = self._watch = self._conn = None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
        if watch is None:
            return
        import signal

        if watch.alive():
            watch.signal(signal.SIGTERM)
            if not watch.wait(grace):
                watch.signal(signal.SIGKILL)
                watch.wait(grace)
        watch.exitcode(0)   # reaped where it is this process's child (spawn)
        watch.close()
        track(watch.pid, on=False)

    def submit(self, task: Task) -> concurrent.futures.Future:
        return _done(self._run(task))

    def interrupt(self) -> None:
        """From another thread: pass a Ctrl-C to the worker (the task stops, a training run saves its checkpoint);
        the thread waiting on it then sees the worker end, or ends it after ``INTERRUPT_GRACE_S`` (SIGTERM, then
        SIGKILL). No task starts on this executor afterwards: a worker still starting is stopped, and so is the
        forkserver (a thread waiting on it to fork a worker, while it imports torch for seconds, is released at
        once). Without this, an interruption that came while a worker started was missed and the thread trained its
        whole run before it looked again (the suites' lanes)."""
        import signal

        self._interrupted = time.monotonic()
        watch = self._watch
        if watch is not None:
            watch.signal(signal.SIGINT)
        if self._ctx.get_start_method() == "forkserver":
            # First without the lock, which a thread starting a worker holds while the forkserver imports torch:
            # the forkserver's end releases that thread (EOF); then, with the lock, whatever forkserver is there.
            _fs.kill_now()
            _fs.stop()

    def _run(self, task: Task) -> Outcome:
        if self._interrupted is not None:
            return Outcome(task.label, CRASHED, error="interrupted before it started")
        if self._watch is None or not self._watch.alive():
            if self._watch is not None:
                self.restarts += 1
            self._kill()
            problem = self._start()
            if problem is not None:
                return Outcome(task.label, CRASHED, error=problem)
        if self._interrupted is not None:
            return Outcome(task.label, CRASHED, error="interrupted before it started")
        t0 = time.monotonic()
        last_beat = t0
        try:
            self._conn.send(task)
        except Exception as exc:
            return Outcome(task.label, ERROR, error=f"the task could not be sent to the worker: {exc}",
                           exc_type=type(exc).__name__)
        stuck = stuck_after()
        said = t0
        watch = self._watch
        try:
            while True:
                now = time.monotonic()
                if stuck is not None and now - max(last_beat, said) >= stuck:
                    # No result and no heartbeat for a while (a limit may be far or none): say what it waits on.
                    said = now
                    say_stuck(f"task {task.label or task.fn!r} in worker pid {watch.pid}: running "
                              f"{now - t0:.0f}s, last heartbeat {now - last_beat:.0f}s ago")
                # At most a quarter second at a time: interrupt(), from another thread, is seen without a wake-up.
                waits = [0.25 if stuck is None else max(0.0, min(0.25, max(last_beat, said) + stuck - now))]
                if task.timeout is not None:
                    waits.append(t0 + task.timeout - now)
                if task.stall_timeout is not None:
                    waits.append(last_beat + task.stall_timeout - now)
                ready = _mp_wait([self._conn, watch.sentinel], timeout=max(0.0, min(waits)))
                now = time.monotonic()
                if self._conn in ready:
                    try:
                        kind, payload = self._conn.recv()
                    except (EOFError, OSError):
                        ready = [watch.sentinel]
                    else:
                        if kind == "beat":
                            last_beat = now
                            continue
                        return replace(payload, wall_s=now - t0)  # "done": the task's outcome
                if watch.sentinel in ready:
                    code = watch.exitcode()
                    self._kill()
                    return Outcome(task.label, CRASHED, wall_s=now - t0,
                                   error=f"the process running it died (exit code {code}{_signal_name(code)})")
                interrupted = self._interrupted
                if interrupted is not None and now - interrupted >= INTERRUPT_GRACE_S:
                    # Told to stop (SIGINT) by interrupt() and still running: ended, as _interrupt would.
                    self._kill(TERM_GRACE_S)
                    return Outcome(task.label, CRASHED, wall_s=now - t0,
                                   error=f"interrupted; it did not stop within {INTERRUPT_GRACE_S:g}s, so it was "
                                         "ended")
                if task.timeout is not None and now - t0 >= task.timeout:
                    self._kill()
                    return Outcome(task.label, TIMEOUT, wall_s=now - t0,
                                   error=f"no result within the time limit of {task.timeout:g}s; stopped")
                if task.stall_timeout is not None and now - last_beat >= task.stall_timeout:
                    self._kill()
                    return Outcome(task.label, STALLED, wall_s=now - t0,
                                   error=f"no progress for {task.stall_timeout:g}s (no training step); stopped")
        except KeyboardInterrupt:
            self._interrupt()
            raise

    def _interrupt(self) -> None:
        """Pass the interruption on: the worker may have had no signal (SIGTERM to this process alone), so it is
        sent SIGINT (a training run saves its checkpoint and returns), then SIGTERM, then SIGKILL, all within the
        bound an interruption may take (``INTERRUPT_GRACE_S`` + 2 * ``TERM_GRACE_S``)."""
        watch = self._watch
        if watch is not None and watch.alive():
            import signal

            watch.signal(signal.SIGINT)
            watch.wait(INTERRUPT_GRACE_S)
        self._kill(TERM_GRACE_S)
        _fs.stop()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
        if self._watch is not None:
            self._watch.wait(TERM_GRACE_S if stopping() else 5)
        self._kill(TERM_GRACE_S if stopping() else 5)
        if stopping():
            _fs.stop()


def _signal_name(code) -> str:
    if isinstance(code, int) and code < 0:
        import signal

        with contextlib.suppress(ValueError):
            return f", killed by {signal.Signals(-code).name}"
    return ""


def time_limit(explicit: float | None = None, check: bool = False) -> float | None:
    """The wall-clock limit in seconds: ``explicit``, else ``$NORMBENCH_TIME_LIMIT``, else 300 for a group of kernel
    cases or 120 for a ``check`` (``check=True``); 0 = no limit."""
    if explicit is not None:
        return None if explicit <= 0 else float(explicit)
    return env_seconds(TIME_LIMIT_ENV, DEFAULT_CHECK_LIMIT_S if check else DEFAULT_TIME_LIMIT_S)


def stall_limit(explicit: float | None = None) -> float | None:
    """The training no-progress limit in seconds: ``explicit``, else ``$NORMBENCH_STALL_LIMIT``, else 1800."""
    if explicit is not None:
        return None if explicit <= 0 else float(explicit)
    return env_seconds(STALL_LIMIT_ENV, DEFAULT_STALL_LIMIT_S)
