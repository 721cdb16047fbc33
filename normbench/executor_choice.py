"""Choosing an executor: by name (``worker``, ``inprocess``, ``ray``) or from the command line's options.

Above both executor modules (``normbench.executor``: the interface and the local executors; ``normbench.ray_executor``:
Ray), so neither imports the other's chooser.
"""

from __future__ import annotations

import os

from normbench.executor import EXECUTOR_ENV, Executor, InProcessExecutor, WorkerExecutor

EXECUTORS = ("worker", "inprocess", "ray")


def make_executor(name: str | None = None, *, address: str | None = None, retries: int | None = None,
                  **kwargs) -> Executor:
    """The executor called ``name`` (default: ``$NORMBENCH_EXECUTOR`` or ``worker``); ``kwargs`` go to the worker's.

    ``address`` and ``retries`` are for ``ray`` only (a cluster's address, else ``$RAY_ADDRESS``, else an embedded
    local instance; how often a task whose worker or node died is run again).
    """
    name = (name or os.environ.get(EXECUTOR_ENV) or "worker").strip().lower()
    if name != "ray" and address:
        raise ValueError("--address is for --executor ray (a Ray cluster's address)")
    if name == "worker":
        return WorkerExecutor(**kwargs)
    if name == "inprocess":
        return InProcessExecutor()
    if name == "ray":
        from normbench.ray_executor import RayExecutor  # Ray is imported only when asked for

        return RayExecutor(address=address, retries=retries)
    raise ValueError(f"unknown executor {name!r}; use one of {', '.join(EXECUTORS)}")


def from_args(args, name: str | None = None, **kwargs) -> Executor:
    """The executor the CLI options in ``args`` ask for (``--executor``, ``--address``, ``--retries``); ``kwargs``
    go to the worker's (Ray workers import what a task needs themselves)."""
    return make_executor(name or getattr(args, "executor", None), address=getattr(args, "address", None),
                         retries=getattr(args, "retries", None), **kwargs)


def add_arguments(parser, *, stall: bool = False) -> None:
    """The executor options shared by check, bench, train and sweep."""
    parser.add_argument("--executor", choices=EXECUTORS, default=None,
                        help="where each norm's work runs: worker (default; a reusable process, replaced after a "
                             "hang or crash), inprocess (no isolation, no limits) or ray (many tasks at once on a "
                             "Ray cluster; pip install 'normbench[ray]', docs/scale-out.md); env NORMBENCH_EXECUTOR")
    parser.add_argument("--address", default=None, metavar="HOST:PORT",
                        help="--executor ray: the Ray cluster to join (default: $RAY_ADDRESS, else an embedded "
                             "local Ray instance)")
    parser.add_argument("--retries", type=int, default=None, metavar="N",
                        help="--executor ray: run a task again up to N times when its worker process or node dies "
                             "(default 1; a task's own error or time-out is never retried)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="wall-clock limit of one norm's check (default 120) and of one group of kernel "
                             "cases (one norm, backend, shape, dtype; compilation included; default 300); env "
                             "NORMBENCH_TIME_LIMIT; 0 = no limit")
    if stall:
        parser.add_argument("--stall-limit", type=float, default=None, metavar="SECONDS",
                            help="stop a run after this many seconds without a training step (default 1800; "
                                 "env NORMBENCH_STALL_LIMIT; 0 = no limit). Long runs that progress are never "
                                 "stopped")
