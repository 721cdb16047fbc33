"""Running training runs: a list of :class:`~normbench.train.loop.Run` through an executor, records written as
they come.

Two plain-value settings describe a call (the CLI's options map onto their fields one to one):

* :class:`RunSettings`: how each run trains (``--quick``, recipe overrides, device, data, checkpoints, ...);
  ``RunSettings.runs`` makes the runs of one (norm, task, model, variant, placement) for some seeds;
* :class:`ExecSettings`: where the runs go and where their records are written (``out``, the executor and its
  limits, ``force``, and ``on_record``, called with each new record).

:func:`execute` trains the runs, in order, each through the executor (a reusable worker process by default) with a
no-progress watchdog. The norms under test must have passed ``normbench check`` (``force`` overrides, flagging
the records). A run that hangs, crashes or fails is reported on stderr and the next one starts.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Callable, Iterable

# Errors a run can raise that mean "this run failed" (reported, the rest go on); anything else is a bug and is raised.
_RUN_ERRORS = ("KeyError", "ValueError", "ImportError", "ModuleNotFoundError", "RuntimeError", "BackendUnavailable",
               "AssertionError", "TypeError", "FloatingPointError", "NotImplementedError")


@dataclass(frozen=True)
class RunSettings:
    """How every run of one call trains (what ``normbench train``/``sweep`` options set, as plain values)."""

    #: The recipe's quick budget (``Recipe.for_quick``) and the task's quick data subset.
    quick: bool = False
    #: Recipe overrides (recorded in the record's recipe: other cells).
    steps: int | None = None
    lr: float | None = None
    batch_size: int | None = None
    #: Activation norm used with a weight or attention norm under test; QK-Norm in the GPT's attention.
    base_norm: str | None = None
    qk_norm: bool = False
    #: Implementation of the norm under test ("eager", "compile", "triton", ...).
    backend: str = "eager"
    device: str = "cpu"
    threads: int | None = 1
    data_dir: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    resume: bool = True
    keep_checkpoint: bool = False
    progress: bool = True
    sync_bn: bool = False

    def overrides(self, lr: float | None = None) -> dict:
        """The recipe fields these settings change (``lr`` given here wins over the settings' own)."""
        out = {k: getattr(self, k) for k in ("steps", "lr", "batch_size") if getattr(self, k) is not None}
        if lr is not None:
            out["lr"] = lr
        return out

    def runs(self, norm, task: str, model: str, variant: str, placement: str | None, seeds: Iterable[int],
             split: str = "test", lr: float | None = None, lr_search: dict | None = None) -> list:
        """The runs of one cell for ``seeds`` (``lr``: a learning rate chosen or tried by the search)."""
        from normbench.train.loop import Run

        return [Run(task=task, model=model, norm=norm, seed=s, placement=placement, variant=variant,
                    quick=self.quick, device=self.device, data_dir=self.data_dir, base_norm=self.base_norm,
                    qk_norm=self.qk_norm, backend=self.backend, recipe_overrides=self.overrides(lr),
                    threads=self.threads, checkpoint_dir=self.checkpoint_dir,
                    checkpoint_every=self.checkpoint_every, resume=self.resume,
                    keep_checkpoint=self.keep_checkpoint, progress=self.progress, split=split, lr_search=lr_search,
                    sync_bn=self.sync_bn)
                for s in seeds]


@dataclass(frozen=True)
class ExecSettings:
    """Where the runs of one call go and what becomes of their records (plain values)."""

    #: Results directory: each record is written there as soon as it exists.
    out: str = "results"
    #: Train norms that have not passed ``normbench check`` too (their records are flagged ``forced``).
    force: bool = False
    #: "worker" (default: ``$NORMBENCH_EXECUTOR`` or a reusable worker process), "inprocess" or "ray".
    executor: str | None = None
    #: Ray only: the cluster's address, and how often a task whose worker or node died runs again.
    address: str | None = None
    retries: int | None = None
    #: Seconds without a training step before a run is stopped (None: ``$NORMBENCH_STALL_LIMIT`` or 1800; 0: none).
    stall_limit: float | None = None
    #: Wall-clock limit of a norm's ``check`` (None: ``$NORMBENCH_TIME_LIMIT`` or 120; 0: none).
    time_limit: float | None = None
    #: Called with each record this call writes (``normbench train --json`` prints it).
    on_record: Callable[[dict], None] | None = None


def _train_task(run, command: str):
    """One training run where an executor runs it (a worker process by default)."""
    from normbench.train.loop import train

    return train(run, command=command)


def _node_train_task(run, command: str, skip: frozenset):
    """One training run on whichever node a remote executor (Ray) chose; its record id is computed there, with that
    node's hardware, and a run whose id is in ``skip`` is not trained again."""
    from normbench.train.loop import record_id_for, train

    rid = record_id_for(run)
    if rid in skip:
        return {"skipped": rid}
    return {"record": train(run, command=command)}


def _run_resources(run) -> dict:
    """What a training run holds on a Ray cluster: a GPU (and a core to feed it), or its CPU threads."""
    if str(run.device).startswith("cuda"):
        return {"num_gpus": 1, "num_cpus": 1}
    return {"num_cpus": max(1, int(run.threads or 1))}


def label(run, i: int, n: int) -> str:
    """How a run is named on stderr: ``[i/n] norm recipe [placement] seed s``."""
    return (f"[{i}/{n}] {run.spec().name} {run.recipe().name}" + (f" {run.placement}" if run.placement else "")
            + f" seed {run.seed}")


def execute(runs: list, how: ExecSettings, skip: set | dict | None = None,
            include_skipped: bool = False) -> tuple[list, list]:
    """Train ``runs`` in order, writing each record to ``how.out`` as soon as it exists; returns (records, failures)
    with failures as (label, error) pairs.

    ``skip``: record ids already in ``how.out``, not trained again; given as a dict id -> record,
    ``include_skipped`` returns those records too (and new records are added to it).
    Raises ``normbench.tasks.DatasetUnavailable`` when a run's dataset cannot be found (the others would fail alike).
    """
    from normbench.check import ensure_checked, refusal
    from normbench.executor import Task, stall_limit, time_limit
    from normbench.executor_choice import make_executor
    from normbench.train.loop import command_line, distributed_env, record_id_for

    records, failures = [], []
    distributed = distributed_env()
    rank0 = not distributed or int(os.environ.get("RANK", "0")) == 0
    # torchrun: each rank is already the process that runs the work, and the ranks must stay in step.
    executor_name = "inprocess" if distributed else how.executor
    limit = stall_limit(how.stall_limit)
    check_limit = time_limit(how.time_limit, check=True)
    command = command_line()
    broken: dict[str, str] = {}
    preload = ("normbench.train.loop", "normbench.check")
    with make_executor(executor_name, address=how.address, retries=how.retries, preload=preload) as ex:
        # The backend each run trains with, checked on the device it trains on; a failing one refuses its runs.
        verdicts = ensure_checked([(r.spec().name, r.backend, r.device) for r in runs], ex, check_limit)
        refused: dict[tuple, str] = {}
        for r in runs:
            v = verdicts[r.spec().name]
            if v.refused(r.backend, r.device) and not how.force:
                refused[(r.spec().name, r.backend, r.device)] = refusal(v.verdict(r.backend, r.device), "train")
        for msg in dict.fromkeys(refused.values()):
            print(f"normbench: {msg}", file=sys.stderr)
        remote = getattr(ex, "remote", False)
        done = _Done(how, verdicts, rank0, broken, records, failures, skip, include_skipped)
        submitted = []
        for i, run in enumerate(runs, 1):
            name = run.spec().name
            where = label(run, i, len(runs))
            if (name, run.backend, run.device) in refused or name in broken:
                failures.append((where, refused.get((name, run.backend, run.device)) or broken[name]))
                continue
            if skip is not None and not remote:
                rid = record_id_for(run)
                if rid in skip:
                    done.skipped(where, rid)
                    continue
            # The worker finds the norm by name in its own registry (a NormSpec may hold a lambda).
            if remote:  # every run at once; each node computes its ids with its own hardware
                # No progress bars from the nodes: Ray would interleave them all on this terminal.
                task = Task(_node_train_task, (replace(run, norm=name, progress=False), command,
                                               frozenset(skip or ())),
                            label=where, stall_timeout=limit, resources=_run_resources(run))
            else:
                task = Task(_train_task, (replace(run, norm=name), command), label=where, stall_timeout=limit)
            submitted.append((run, name, where, ex.submit(task)))
            if not remote:
                done(*submitted.pop())
        if remote:
            import concurrent.futures as cf

            by_future = {fut: (run, name, where) for run, name, where, fut in submitted}
            for fut in cf.as_completed(by_future):
                done(*by_future[fut], fut)
    return records, failures


@dataclass
class _Done:
    """What happens to each finished run of one :func:`execute` call (this process is the only writer of ``out``)."""

    how: ExecSettings
    verdicts: dict
    rank0: bool
    broken: dict
    records: list
    failures: list
    skip: set | dict | None
    include_skipped: bool

    def skipped(self, where: str, rid: str) -> None:
        print(f"{where}: already in {self.how.out} ({rid}), skipped", file=sys.stderr)
        if self.include_skipped and isinstance(self.skip, dict):
            self.records.append(self.skip[rid])

    def __call__(self, run, name: str, where: str, fut) -> None:
        """Report one run's outcome and write its record."""
        from normbench.check import stamp
        from normbench.records import write_records
        from normbench.tasks import DatasetUnavailable

        outcome = fut.result()
        if outcome.ok and isinstance(outcome.value, dict) and "skipped" in outcome.value:
            self.skipped(where, outcome.value["skipped"])
            return
        if outcome.ok and isinstance(outcome.value, dict) and "record" in outcome.value:
            outcome.value = outcome.value["record"]
        if not outcome.ok:
            if outcome.exc_type == "DatasetUnavailable":
                raise DatasetUnavailable(outcome.message or outcome.error)
            if outcome.status == "error" and outcome.exc_type not in _RUN_ERRORS:
                print(outcome.traceback, file=sys.stderr)
            if outcome.broke:
                # The same norm would hang or crash again in its next seeds: say so once, move on.
                self.broken[name] = f"{name} {outcome.broke} in {where}"
            self.failures.append((where, outcome.error))
            print(f"{where}: FAILED: {outcome.error}", file=sys.stderr)
            return
        rec = outcome.value
        if rec is None:
            return
        stamp(rec, self.verdicts[name], run.backend, forced=self.how.force)
        if self.rank0:
            paths = write_records([rec], self.how.out)
            m = rec["metrics"]
            state = (f"diverged at step {m['diverged_step']}" if m["diverged"]
                     else f"{m['metric']} {m['final']:.4g}")
            if run.split == "val":
                state = f"(tuning, lr {run.recipe().lr:g}, validation) {state}"
            print(f"{where}: {state} in {m['wall_time_s']:.1f}s -> {paths[0]}", file=sys.stderr)
        self.records.append(rec)
        if isinstance(self.skip, dict):
            self.skip[rec["id"]] = rec
        if self.how.on_record is not None:
            self.how.on_record(rec)
