"""The Ray executor: normbench tasks spread over a Ray cluster (an embedded local instance, or one joined by address).

``RayExecutor`` implements :class:`normbench.executor.Executor`; ``--executor ray`` selects it for ``check``,
``bench``, ``train`` and ``sweep``. Ray does the scheduling, the worker processes and the fault handling; this module
only maps normbench's tasks onto it:

* **Resources** (``Task.resources``): ``{"num_gpus": 1}`` (a GPU timing task: Ray gives it one whole GPU through
  ``CUDA_VISIBLE_DEVICES`` and schedules no other GPU task on that GPU while it runs), ``{"node_cpus": True}`` (a CPU
  timing task: it asks for every CPU Ray manages on one node, pinned to that node, so nothing else Ray runs shares
  the cores; nodes are used in turn), ``{"num_cpus": n}`` / ``{"num_gpus": n, "num_cpus": m}`` (training), nothing
  (one CPU: checks).
* **Faults**: a task whose worker process or node dies is run again up to ``retries`` times by Ray itself
  (``max_retries``), then reported as ``crashed`` with Ray's reason. A task's own exception is an ``error`` outcome and
  is never retried (it would fail again). ``Task.timeout`` and ``Task.stall_timeout`` are enforced from the driver:
  the task is cancelled with ``ray.cancel(force=True)`` (which kills its worker process; Ray does not retry a
  cancelled task) and reported as ``timeout`` or ``stalled``. Both limits count from when a worker starts the task
  (its first heartbeat), never from a wait in Ray's queue. Heartbeats reach the driver through a small actor.
* **Cancelling**: ``Future.cancel()`` on a task that has not finished cancels it in Ray (forced), so a caller can
  drop the rest of a norm's work once one of its tasks hung.
* **Writing**: tasks return values; the driver (the process that created the executor) writes every record, so it
  is the only writer of the results store in a cluster run.

Ray's usage statistics are always off (``RAY_USAGE_STATS_ENABLED=0``, set before Ray is imported) and the dashboard
is never started by normbench. Without ``address`` (and without ``$RAY_ADDRESS``) a fresh local Ray instance is
started inside this process and stopped on ``close()``; with one, the executor joins that cluster and only
disconnects on ``close()``. Every node needs the same Python environment: normbench, its plugins, torch.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import os
import sys
import threading
import time
from dataclasses import replace

from normbench.executor import CRASHED, ERROR, STALLED, TIMEOUT, Executor, Outcome, Task, run_task

#: Ray's usage statistics go to outside hosts: normbench never enables them.
_RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
#: At shutdown a Ray process flushes its task events (the dashboard's data, which normbench never starts) to the
#: GCS for up to 5 s by default; when the GCS is already gone (a SIGTERM to the command's whole group reaches it
#: too) the driver waited those 5 s, past the command's stop deadline. One second is plenty for a live GCS.
_RAY_DEFAULTS = {"RAY_task_events_shutdown_flush_timeout_ms": "1000"}
DEFAULT_RETRIES = 1
#: How often the driver looks at deadlines and heartbeats.
_POLL_S = 0.5


class RayUnavailable(ValueError):
    """Ray is not installed (or too old); the message says what to install."""


def import_ray():
    """``ray``, imported with usage statistics off; a clear :class:`RayUnavailable` when it is missing."""
    os.environ.update(_RAY_ENV)
    for k, v in _RAY_DEFAULTS.items():
        os.environ.setdefault(k, v)
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--executor ray needs Ray, an optional extra: pip install 'normbench[ray]' "
                             f"(-c constraints.txt for the tested version) ({exc})") from None
    return ray


def _reachable(address: str) -> None:
    """Fail fast, and clearly, when nothing listens at a ``host:port`` address (Ray itself retries for minutes)."""
    import socket

    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return  # "auto", ray://... (Ray Client): left to Ray
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
    except OSError as exc:
        raise ValueError(f"could not join the Ray cluster at {address}: nothing answers there ({exc}). Start one "
                         "with `ray start --head` (docs/scale-out.md) or pass the address it printed") from None


def _private_token() -> None:
    """An embedded instance gets a token of its own (recent Ray authenticates every connection by token): passed to
    its processes in the environment, so Ray does not write one into ~/.ray for a cluster that lives only as long as
    this process."""
    if not any(os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        import secrets

        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        # Ray read its configuration (the auth mode among it) when it was imported: have it read the environment
        # again, as Ray's own ``_enable_token_auth`` does; without this the driver starts a cluster whose GCS
        # demands the token and then connects without it ("Failed to start GCS ... InvalidAuthToken").
        from ray._raylet import Config

        Config.initialize("")


# --- inside a Ray worker --------------------------------------------------------------------------------------------

def _run_task(task: Task, beats, key) -> tuple[Outcome, str]:
    """What a Ray worker runs for one :class:`Task`: :func:`normbench.executor.run_task` (any failure of the task
    is its outcome, not Ray's), its heartbeats counted by the ``beats`` actor; the outcome and this node's name."""
    import platform

    # A task's prints must not land on the driver's stdout (it may be a --json document).
    sys.stdout = sys.stderr
    beat = None
    if beats is not None:
        beats.beat.remote(key)  # "started": the limits count from here, not from a wait in Ray's queue
        last = [0.0]

        def beat() -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0:
                last[0] = now
                beats.beat.remote(key)

    return run_task(task, beat), platform.node()


class _Beats:
    """A Ray actor counting heartbeats per running task; the driver compares counts between its polls."""

    def __init__(self):
        self.counts: dict = {}

    def beat(self, key) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def get(self, keys) -> dict:
        return {k: self.counts.get(k, 0) for k in keys}

    def forget(self, keys) -> None:
        for k in keys:
            self.counts.pop(k, None)


class _Pending:
    __slots__ = ("task", "future", "ref", "key", "t0", "beats", "progress_at", "started_at")

    def __init__(self, task, future, ref, key):
        self.task, self.future, self.ref, self.key = task, future, ref, key
        self.t0 = self.progress_at = time.monotonic()
        self.beats = 0
        self.started_at = None  # when its worker began it (first heartbeat); None while it waits in Ray's queue


class RayExecutor(Executor):
    """Runs :class:`Task` s as Ray tasks, many at once (see the module docstring)."""

    name = "ray"
    remote = True

    def __init__(self, address: str | None = None, retries: int | None = None, num_cpus: int | None = None):
        ray = self._ray = import_ray()
        self.retries = DEFAULT_RETRIES if retries is None else int(retries)
        if self.retries < 0:
            raise ValueError("--retries must be 0 or more")
        address = address or os.environ.get("RAY_ADDRESS") or None
        self.address = address
        self._owns_ray = False
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, configure_logging=True, logging_level="warning",
                          log_to_driver=True)
            if address:
                _reachable(address)
                try:
                    ray.init(address=address, **kwargs)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    auth = ""
                    if not os.environ.get("RAY_AUTH_MODE"):
                        auth = (" If the cluster uses token authentication (the default of `ray start` since Ray "
                                "2.5x), set RAY_AUTH_MODE=token and give its token in ~/.ray/auth_token or "
                                "RAY_AUTH_TOKEN.")
                    raise ValueError(f"could not join the Ray cluster at {address}: {exc}. Is `ray start --head` "
                                     f"running there, and is this the address it printed?{auth}") from None
            else:
                _private_token()
                # "local": a fresh instance, never a cluster some other `ray start` left on this machine.
                ray.init(address="local", num_cpus=num_cpus, **kwargs)
                self._owns_ray = True
            # ray.init installs its own SIGTERM handler (a sys.exit that skips the Ctrl-C path): take it back.
            from normbench.processes import reinstall

            reinstall()
        # The embedded instance's processes (GCS, raylet, agents: children of this process, which Ray starts with
        # SIGINT blocked and killed by the kernel if this process dies) are killed too if the command's stop
        # overruns its deadline; its workers are the raylet's children and end with it.
        self._ray_pids = [p for _, p in _embedded_processes(ray)] if self._owns_ray else []
        from normbench.processes import track

        for pid in self._ray_pids:
            track(pid)
        self._remote = ray.remote(_run_task)
        self._beats_actor = None
        self._pending: dict = {}          # ref -> _Pending
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._node_turn = itertools.count()
        self._closed = False
        self._monitor = threading.Thread(target=self._watch, name="normbench-ray-monitor", daemon=True)
        self._monitor.start()

    # -- submitting ---------------------------------------------------------------------------------------------
    def _nodes(self) -> list[dict]:
        nodes = [n for n in self._ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        return sorted(nodes, key=lambda n: n["NodeID"])

    def _options(self, task: Task) -> dict:
        res = dict(task.resources or {})
        opts = {"max_retries": self.retries, "retry_exceptions": False}
        if res.pop("node_cpus", False):
            nodes = self._nodes()
            if not nodes:
                raise RuntimeError("the Ray cluster has no live node with CPUs")
            node = nodes[next(self._node_turn) % len(nodes)]
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["num_cpus"] = int(node["Resources"]["CPU"])
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        if "num_gpus" in res:
            opts["num_gpus"] = res.pop("num_gpus")
        if "num_cpus" in res:
            opts["num_cpus"] = res.pop("num_cpus")
        if "memory" in res:
            opts["memory"] = res.pop("memory")
        if res:
            opts["resources"] = res   # custom resources, e.g. {"H100": 1}
        return opts

    def _beats(self):
        if self._beats_actor is None:
            self._beats_actor = self._ray.remote(num_cpus=0)(_Beats).remote()
        return self._beats_actor

    def submit(self, task: Task) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if self._closed:
            raise RuntimeError("this executor is closed")
        key = f"{next(self._keys)}:{task.label}"
        limited = task.stall_timeout is not None or task.timeout is not None
        beats = self._beats() if limited else None
        try:
            ref = self._remote.options(**self._options(task)).remote(task, beats, key)
        except Exception as exc:  # unschedulable resources, an unpicklable argument: the task's failure
            fut.set_result(Outcome(task.label, ERROR, error=f"Ray could not start it: {type(exc).__name__}: {exc}",
                                   exc_type=type(exc).__name__, message=str(exc)))
            return fut
        with self._lock:
            self._pending[ref] = _Pending(task, fut, ref, key)
        return fut

    # -- the driver's watch over running tasks -------------------------------------------------------------------
    def _resolve(self, p: _Pending, outcome: Outcome) -> None:
        with self._lock:
            if self._pending.pop(p.ref, None) is None:
                return  # already resolved (the monitor and close() may both get here)
        if self._beats_actor is not None and (p.task.stall_timeout is not None or p.task.timeout is not None):
            with contextlib.suppress(Exception):
                self._beats_actor.forget.remote([p.key])
        if p.future.cancelled():
            # Future.cancel() alone does not wake concurrent.futures.wait / as_completed: this does.
            p.future.set_running_or_notify_cancel()
        elif not p.future.done():
            p.future.set_result(outcome)

    def _collect(self, p: _Pending) -> None:
        ray = self._ray
        wall = time.monotonic() - p.t0
        try:
            outcome, node = ray.get(p.ref)
        except Exception as exc:  # the worker or node died (after Ray's retries), or the task was cancelled
            self._resolve(p, Outcome(p.task.label, CRASHED, wall_s=wall, exc_type=type(exc).__name__,
                                     error=_ray_failure(exc, self.retries)))
            return
        where = {} if outcome.ok else {"error": f"{outcome.error} (on node {node})"}
        self._resolve(p, replace(outcome, wall_s=wall, **where))

    def _stop(self, p: _Pending, status: str, error: str) -> None:
        with contextlib.suppress(Exception):
            self._ray.cancel(p.ref, force=True)
        self._resolve(p, Outcome(p.task.label, status, wall_s=time.monotonic() - p.t0, error=error))

    def _watch(self) -> None:
        ray = self._ray
        last_beat_poll = 0.0
        while not self._closed:
            with self._lock:
                pending = list(self._pending.values())
            if not pending:
                time.sleep(_POLL_S / 5)
                continue
            try:
                ready, _ = ray.wait([p.ref for p in pending], num_returns=len(pending), timeout=_POLL_S)
            except Exception:  # the connection went away (close, Ctrl-C): nothing left to watch
                if self._closed:
                    return
                time.sleep(_POLL_S)
                continue
            ready = set(ready)
            now = time.monotonic()
            limited = [p for p in pending if p.ref not in ready
                       and (p.task.stall_timeout is not None or p.task.timeout is not None)]
            if limited and self._beats_actor is not None and now - last_beat_poll >= 2 * _POLL_S:
                last_beat_poll = now
                with contextlib.suppress(Exception):
                    counts = ray.get(self._beats_actor.get.remote([p.key for p in limited]), timeout=30)
                    for p in limited:
                        if counts.get(p.key, 0) != p.beats:
                            p.beats, p.progress_at = counts[p.key], now
                            if p.started_at is None:
                                p.started_at = now
            for p in pending:
                if p.ref in ready:
                    self._collect(p)
                elif p.future.cancelled():
                    self._stop(p, CRASHED, "cancelled")
                elif p.started_at is None:
                    continue  # still queued (waiting for a GPU, say): no limit runs yet
                elif p.task.timeout is not None and now - p.started_at >= p.task.timeout:
                    self._stop(p, TIMEOUT, f"no result within the time limit of {p.task.timeout:g}s; stopped")
                elif p.task.stall_timeout is not None and now - p.progress_at >= p.task.stall_timeout:
                    self._stop(p, STALLED, f"no progress for {p.task.stall_timeout:g}s (no training step); stopped")

    # -- the interface ---------------------------------------------------------------------------------------------
    def map(self, tasks):
        futures = [self.submit(t) for t in tasks]
        for f in futures:
            yield f.result()

    def cluster_resources(self) -> dict:
        """Ray's view of the cluster's total resources (CPU, GPU, memory, custom ones)."""
        return dict(self._ray.cluster_resources())

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(interrupted=exc_type is not None and issubclass(exc_type, KeyboardInterrupt))

    def close(self, interrupted: bool = False) -> None:
        """Cancel what still runs and leave Ray: an embedded instance is stopped, a joined cluster only left.
        ``interrupted`` (or a command on its way out: Ctrl-C, SIGTERM): an embedded instance's processes are killed
        at once instead of Ray's graceful shutdown, which waits a second or more per process (GCS, raylet, their
        agents) and, after a SIGTERM to the whole group, outran the command's stop deadline."""
        if self._closed:
            return
        from normbench.processes import stopping, track

        interrupted = interrupted or stopping()
        kill = interrupted and self._owns_ray
        with self._lock:
            pending = list(self._pending.values())
        for p in pending:
            if not kill:  # the embedded instance goes whole below; a joined cluster must stop running our tasks
                with contextlib.suppress(Exception):
                    self._ray.cancel(p.ref, force=True)
            self._resolve(p, Outcome(p.task.label, CRASHED, error="the executor was closed before it finished"))
        self._closed = True
        self._monitor.join(1 if interrupted else 5)
        if kill:
            _kill_embedded(self._ray)
        with contextlib.suppress(Exception):
            self._ray.shutdown()  # stops the embedded instance; for a joined cluster, only disconnects
        for pid in self._ray_pids:
            track(pid, False)


def _embedded_processes(ray) -> list[tuple[str, int]]:
    """(type, pid) of every process the embedded Ray instance started from this process."""
    from ray._private import worker

    node = worker._global_node
    out = []
    for kind, infos in (getattr(node, "all_processes", None) or {}).items():
        for info in infos:
            pid = getattr(getattr(info, "process", None), "pid", None)
            if pid:
                out.append((kind, pid))
    return out


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``; none elsewhere)."""
    kids = []
    with contextlib.suppress(OSError):
        for d in os.listdir("/proc"):
            if d.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{d}/stat", "rb") as f:
                        stat = f.read()
                    if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                        kids.append(int(d))
    return kids


def _kill_embedded(ray) -> None:
    """SIGKILL the embedded instance: the raylet's children first (the workers, one running the interrupted task
    among them: a killed raylet would leave them to notice on their own), then every process Ray started here."""
    import signal

    procs = _embedded_processes(ray)
    victims = [c for kind, pid in procs if kind == "raylet" for c in _children(pid)] + [pid for _, pid in procs]
    for pid in victims:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    from ray._private import worker

    node = worker._global_node
    with contextlib.suppress(Exception):
        # reaps them (no zombie), each already dead: Ray's shutdown then finds nothing left to wait for
        node.kill_all_processes(check_alive=False, allow_graceful=False, wait=False)


def _ray_failure(exc: BaseException, retries: int) -> str:
    """One line saying why Ray could not run a task to its end."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    if "Cancel" in name:
        return "cancelled"
    tries = f" (tried {retries + 1} time{'s' if retries else ''})"
    if "WorkerCrashed" in name or "ActorDied" in name:
        return f"the Ray worker process running it died{tries}: {first}"
    if "NodeDied" in name or "Unschedulable" in name:
        return f"the Ray node running it died or left the cluster{tries}: {first}"
    if "OutOfMemory" in name:
        return f"Ray's memory monitor killed it (out of memory){tries}"
    return f"Ray could not run it ({name}{tries}): {first}"
