"""Running a sweep: every group of cases through an executor, each group's records written as soon as they exist.

One loop (:func:`run_sweep`) serves every executor; how the groups reach it is a small strategy:

* :class:`InTurn` (the in-process and worker executors): one group after another. This process measures the copy
  ceiling and the provenance once, computes the record ids with its own hardware and leaves out what ``out`` has.
* :class:`AllAtOnce` (a remote executor: Ray): every group is submitted before any is awaited, with the resources
  its timing needs; the node that runs a group measures its own ceiling and provenance and computes the ids with
  its own hardware (:func:`_node_group_task`).

Either way this process is the only writer of ``out``; a group that hangs or kills its process fails, and the rest of
its norm's groups are not attempted (already submitted ones are cancelled); Ctrl-C stops after the records already
written.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from normbench.executor import Executor, InProcessExecutor, Outcome, Task
from normbench.measure.group import Context, Unsupported, make_context, measure_group, refresh_context
from normbench.measure.planning import Case, case_id, runs_here
from normbench.measure.timers import TimerSettings


@dataclass
class SweepSummary:
    written: int = 0
    already_done: int = 0
    skipped: list = field(default_factory=list)   # (case description, reason)
    failed: list = field(default_factory=list)    # (case description, error)
    files: set = field(default_factory=set)
    interrupted: bool = False
    out_of_time: bool = False


def _skip_log(out, hardware_id: str, entries: list[dict], measured: list[str] = ()) -> None:
    """Merge skip reasons into ``<out>/kernel/<hardware_id>/_skipped.json`` (not a record file).

    Cases measured since (``measured``) leave the log.
    """
    import json
    from pathlib import Path

    from normbench.records.store import atomic_write_text

    path = Path(out) / "kernel" / hardware_id / "_skipped.json"
    if not entries and not (measured and path.exists()):
        return
    try:
        current = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(current, dict):
            current = {}
    except (OSError, ValueError):
        current = {}
    for e in entries:
        current[e["case"]] = e
    for case in measured:
        current.pop(case, None)
    atomic_write_text(path, json.dumps(dict(sorted(current.items())), indent=1) + "\n")


def _group_task(cases: list[Case], ctx: Context) -> dict:
    """One group measured where an executor runs it: its records and the cases it refused, with reasons."""
    refused: list = []
    try:
        records = measure_group(cases, ctx, refused)
    except Unsupported as exc:
        return {"records": [], "refused": [(c, str(exc)) for c in cases]}
    return {"records": records, "refused": refused}


_NODE_CONTEXTS: dict = {}  # a worker process's context per (device, settings, command): measured once there


def _set_task(cases: list[Case], ctx: Context) -> dict:
    """One set (the backends of one norm at one shape and dtype) measured head to head, interleaved and paired
    (``normbench.measure.headtohead``): its records and the cases it refused, with reasons."""
    from normbench.measure.headtohead import measure_set

    if len({c.backend for c in cases}) == 1:  # nothing to pair with: timed as a group, with a group's settings
        return _group_task(cases, ctx)
    refused: list = []
    try:
        records = measure_set(cases, ctx, refused)
    except Unsupported as exc:
        return {"records": [], "refused": [(c, str(exc)) for c in cases]}
    return {"records": records, "refused": refused}


def _node_group_task(cases: list[Case], settings: TimerSettings, command, done: frozenset,
                     interleave: bool = False) -> dict:
    """One group measured on whichever node a remote executor chose, with that node's ceiling and provenance.

    The ids are computed here, with this node's hardware, so a case measured on any node of the same hardware gets
    the same id; cases whose id is in ``done`` are not measured again.
    """
    import platform

    from normbench.records.provenance import hardware, hardware_id

    device = cases[0].device
    # The ceiling is measured with the cases' thread count, as `normbench bench --threads` does in one process
    # (a Ray worker starts with as many threads as CPUs it holds).
    torch.set_num_threads(cases[0].threads)
    key = (device, cases[0].threads, repr(settings), repr(command))
    ctx = _NODE_CONTEXTS.get(key)
    busy = None
    if ctx is None:
        from normbench.measure import noise

        busy = noise.busy_warning(device, cases[0].threads)  # once per worker process, as once per sweep
        ctx = _NODE_CONTEXTS[key] = make_context(device, settings, command)
    else:
        ctx = _NODE_CONTEXTS[key] = refresh_context(ctx, device)
    hw_id = hardware_id(hardware(device))
    def is_done(c: Case) -> bool:
        return case_id(c, hw_id, ctx.impl_hashes) in done

    if interleave:  # a set is measured whole, so every record of it is paired with the others, or not at all
        todo = [] if set_done(cases, is_done) else list(cases)
    else:
        todo = [c for c in cases if not is_done(c)]
    out = {"records": [], "refused": [], "already": len(cases) - len(todo), "hardware_id": hw_id,
           "node": platform.node(), "ceiling": f"{ctx.ceiling_gbps:.1f} GB/s ({ctx.ceiling_method})", "busy": busy}
    if todo:
        out.update((_set_task if interleave else _group_task)(todo, ctx))
    return out


def _store_group(records: list, refused: list, group: list, out, summary: SweepSummary, on_record) -> list[str]:
    """Write one finished group's records (after ``on_record`` amends each) and count them in ``summary``; returns
    the descriptions of the group's cases that were measured (not refused)."""
    from normbench.records.store import write_records

    if not records:
        return []
    for rec in records:
        if on_record is not None:
            on_record(rec)
    summary.files.update(str(p) for p in write_records(records, out))
    summary.written += len(records)
    refused_ids = {c.describe() for c, _ in refused}
    return [c.describe() for c in group if c.describe() not in refused_ids]


def _where(case: Case, group: list[Case] | None = None) -> str:
    """A group's name in messages and task labels (a head-to-head set's names its backends: ``eager+native``)."""
    backend = "+".join(dict.fromkeys(c.backend for c in group)) if group else case.backend
    return f"{case.norm}/{backend}/{case.shape.label}/{case.dtype}"


def set_done(group: list[Case], is_done, runs=runs_here) -> bool:
    """Whether a head-to-head set needs no measuring: each case is done or cannot run here (``runs``, default
    ``planning.runs_here``). A case whose backend cannot run here must not keep its set open: it would be skipped
    again, and the set re-measured on every run."""
    return all(is_done(c) or not runs(c) for c in group)


def _sets_to_measure(cases, is_done, runs=runs_here) -> tuple[list[list[Case]], int]:
    """The sets (head to head) with a case to measure (:func:`set_done`), each whole (its records are paired), and
    how many cases are left out because they are done."""
    from normbench.measure.headtohead import sets

    out, already = [], 0
    for group in sets(cases):
        if set_done(group, is_done, runs):
            already += sum(1 for c in group if is_done(c))
        else:
            out.append(group)
    return out, already


def _groups(cases) -> list[list[Case]]:
    """``cases`` by group (one built module each), in the order they first appear."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)
    return list(groups.values())


class InTurn:
    """Groups one after another through a local executor (this process, or its worker process).

    The ceiling and provenance are measured here, once; cases whose id (with this machine's hardware) is in ``out``
    are left out before anything runs. ``deadline``: no group starts after it. ``group_log`` receives each group's
    wall time (run and written) and case count.
    """

    def __init__(self, executor: Executor, time_limit: float | None, deadline: float | None = None,
                 group_log: list | None = None, interleave: bool = False):
        self.executor, self.time_limit, self.deadline, self.group_log = executor, time_limit, deadline, group_log
        self.interleave = interleave
        self.ctx: Context | None = None
        self.hardware_id = ""
        self.log: Callable | None = None

    def start(self, cases: list[Case], out, force: bool, settings, command, log, summary) -> list[list[Case]]:
        from normbench.measure import noise
        from normbench.records.provenance import hardware, hardware_id
        from normbench.records.store import existing_ids

        device = cases[0].device
        self.hardware_id = hardware_id(hardware(device))
        done = set() if force else existing_ids(out, "kernel")
        hashes: dict = {}
        todo = []
        if self.interleave:
            groups, summary.already_done = _sets_to_measure(
                cases, lambda c: case_id(c, self.hardware_id, hashes) in done)
        else:
            for case in cases:
                if case_id(case, self.hardware_id, hashes) in done:
                    summary.already_done += 1
                else:
                    todo.append(case)
            groups = _groups(todo)
        if not groups:
            return groups
        busy = noise.busy_warning(device, cases[0].threads)
        if busy:
            log(busy)
        self.log = log
        self.ctx = make_context(device, settings, command)
        self.ctx.impl_hashes = hashes
        spread = f", spread {100 * self.ctx.ceiling_spread:.1f}%" if self.ctx.ceiling_spread is not None else ""
        log(f"ceiling: {self.ctx.ceiling_gbps:.1f} GB/s ({self.ctx.ceiling_method}{spread})")
        unsteady = noise.ceiling_warning(self.ctx.ceiling_spread)
        if unsteady:
            log(unsteady)
        return groups

    def outcomes(self, groups, broken: dict, summary, starting: Callable) -> Iterator[tuple[list, Outcome | None]]:
        for group in groups:
            first = group[0]
            if self.deadline is not None and time.monotonic() > self.deadline:
                summary.out_of_time = True
                return
            t_group = time.monotonic()
            starting(group)
            if first.norm in broken:
                yield group, None
                continue
            self._recheck(first.device)
            task = Task(_set_task if self.interleave else _group_task, (group, self.ctx),
                        label=_where(first, group if self.interleave else None), timeout=self.time_limit)
            yield group, self.executor.submit(task).result()
            # back here once the sweep has written the group: the wall time includes writing its records
            if self.group_log is not None:
                self.group_log.append({"group": _where(first), "backend": first.backend, "cases": len(group),
                                       "wall_s": round(time.monotonic() - t_group, 3)})

    def _recheck(self, device: str) -> None:
        """Measure the ceiling again between groups when it is old (``group.refresh_context``), and say so."""
        ctx = refresh_context(self.ctx, device)
        if ctx is not self.ctx:
            self.ctx = ctx
            if self.log is not None:
                self.log(f"ceiling re-measured: {ctx.ceiling_gbps:.1f} GB/s, spread {100 * ctx.ceiling_spread:.1f}%"
                         if ctx.ceiling_spread is not None else f"ceiling re-measured: {ctx.ceiling_gbps:.1f} GB/s")

    def accept(self, value: dict, say, summary) -> str:
        """The hardware id of a group's records (this machine's)."""
        return self.hardware_id

    def broke(self, norm: str) -> None:
        """Nothing to cancel: ``outcomes`` does not start a broken norm's groups."""


class AllAtOnce:
    """Every group submitted at once to a remote executor (Ray), each measured with its node's ceiling and ids.

    A group asks for a whole GPU, or for every core of a CPU node. What ``out`` already has is passed to the task by
    norm, and the node leaves out the cases whose id (with its own hardware) is among them.
    """

    def __init__(self, executor: Executor, time_limit: float | None, interleave: bool = False):
        self.executor, self.time_limit, self.interleave = executor, time_limit, interleave
        self.futures: dict = {}
        self._ceilings: set = set()

    def start(self, cases: list[Case], out, force: bool, settings, command, log, summary) -> list[list[Case]]:
        from normbench.records.store import iter_records

        if command is None:  # the driver's command line, not the Ray worker's
            command = [os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
        self.command, self.settings = command, settings or TimerSettings()
        self.done: dict[str, set] = defaultdict(set)
        if not force and os.path.exists(out):
            for _, rec in iter_records(out, "kernel", errors="ignore"):
                self.done[rec["norm"]["name"]].add(rec["id"])
        self.resources = {"num_gpus": 1} if cases[0].device.startswith("cuda") else {"node_cpus": True}
        if self.interleave:
            from normbench.measure.headtohead import sets

            return sets(cases)
        return _groups(cases)

    def outcomes(self, groups, broken: dict, summary, starting: Callable) -> Iterator[tuple[list, Outcome | None]]:
        import concurrent.futures as cf

        for group in groups:
            first = group[0]
            task = Task(_node_group_task,
                        (group, self.settings, self.command, frozenset(self.done.get(first.norm, ())),
                         self.interleave),
                        label=_where(first), timeout=self.time_limit, resources=self.resources)
            self.futures[self.executor.submit(task)] = group
        for fut in cf.as_completed(self.futures):
            yield self.futures[fut], None if fut.cancelled() else fut.result()

    def accept(self, value: dict, say, summary) -> str:
        """Say what the node measured (once per node), count what it had already; the hardware id it measured on."""
        if value.get("busy"):
            say(f"{value['node']}: {value['busy']}")
        if value["node"] + value["ceiling"] not in self._ceilings:
            self._ceilings.add(value["node"] + value["ceiling"])
            say(f"ceiling on {value['node']}: {value['ceiling']}")
        summary.already_done += value["already"]
        return value["hardware_id"]

    def broke(self, norm: str) -> None:
        """Cancel ``norm``'s groups that have not finished."""
        for fut, group in self.futures.items():
            if group[0].norm == norm and not fut.done():
                fut.cancel()


def run_sweep(cases: list[Case], out="results", *, force: bool = False, settings: TimerSettings | None = None,
              progress: bool = True, command=None, log=None, executor: Executor | None = None,
              time_limit: float | None = None, on_record=None, deadline: float | None = None,
              group_log: list | None = None, interleave: bool = False) -> SweepSummary:
    """Measure ``cases`` group by group, writing each group's records to ``out`` as soon as they exist.

    Cases whose record id is already in ``out`` are skipped unless ``force``. Unsupported cases are recorded
    (with the reason) in ``_skipped.json`` next to the records. Ctrl-C stops after the records already written.
    Each group runs through ``executor`` (default: in this process) with the wall-clock ``time_limit``; a group
    that hangs or kills its process fails, and the rest of that norm's groups are not attempted.
    ``on_record(record)`` may amend each record before it is written (the check verdict, say).
    ``deadline`` (a ``time.monotonic()`` value): no group starts after it; the sweep stops with ``out_of_time``
    set, everything measured so far written. ``group_log`` (a list) receives each group's wall time and case count
    (the campaign's cost model is calibrated from it). ``deadline`` and ``group_log`` are for local executors: a
    remote executor (Ray) runs the groups at once on its nodes instead (:class:`AllAtOnce`).
    ``interleave``: the unit is a set (a norm's backends at one shape and dtype, ``measure.headtohead``), timed
    head to head and paired; a set with any case not in ``out`` is measured whole.
    """
    from normbench.records.provenance import utc_now

    log = log or (lambda msg: print(msg, file=sys.stderr))
    summary = SweepSummary()
    if not cases:
        return summary
    if getattr(executor, "remote", False):
        way: InTurn | AllAtOnce = AllAtOnce(executor, time_limit, interleave)
    else:
        way = InTurn(executor or InProcessExecutor(), time_limit, deadline, group_log, interleave)
    groups = way.start(cases, out, force, settings, command, log, summary)
    if not groups:
        return summary
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(g) for g in groups), unit="case", dynamic_ncols=True, file=sys.stderr)
    say = bar.write if bar is not None else log

    def starting(group) -> None:
        if bar is not None:
            first = group[0]
            bar.set_description(f"{first.norm}/{first.backend}/{first.shape.layout}/{first.dtype}")

    broken: dict[str, str] = {}  # norm -> why its remaining groups are not attempted
    skips: dict[str, list] = defaultdict(list)     # hardware id -> _skipped.json entries
    measured: dict[str, list] = defaultdict(list)  # hardware id -> cases measured (they leave _skipped.json)
    try:
        for group, outcome in way.outcomes(groups, broken, summary, starting):
            first = group[0]
            where = _where(first, group if getattr(way, "interleave", False) else None)
            if outcome is None:  # not attempted, or cancelled: an earlier group of its norm hung or crashed
                for c in group:
                    summary.failed.append((c.describe(), f"not attempted: {broken.get(first.norm, 'cancelled')}"))
            elif outcome.ok:
                value = outcome.value
                hw_id = way.accept(value, say, summary)
                refused = value["refused"]
                measured[hw_id] += _store_group(value["records"], refused, group, out, summary, on_record)
                for c, reason in refused:
                    summary.skipped.append((c.describe(), reason))
                    skips[hw_id].append(
                        {"case": c.describe(), "norm": c.norm, "backend": c.backend, "shape": c.shape.label,
                         "dtype": c.dtype, "pass": c.pass_, "reason": reason, "timestamp": utc_now()})
            else:
                msg = outcome.error
                if outcome.broke:  # a hang or a dead process: this norm's other groups would do it too
                    msg = f"{first.norm} {outcome.broke} in {where}: {outcome.error}"
                    if first.norm not in broken:
                        broken[first.norm] = msg
                        way.broke(first.norm)
                for c in group:
                    summary.failed.append((c.describe(), msg))
                say(f"failed {where}: {msg}")
            if bar is not None:
                bar.update(len(group))
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if bar is not None:
            bar.close()
        for hw_id in set(skips) | set(measured):
            _skip_log(out, hw_id, skips[hw_id], measured[hw_id])
    return summary
