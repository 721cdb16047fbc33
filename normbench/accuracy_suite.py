"""The accuracy benchmarks of the ASV and pytest-benchmark suites, and ``normbench ingest-asv`` (kernels and accuracy).

The suites (``suites/asv/accuracy.py``, ``suites/pytest_benchmark/test_accuracy.py``) are thin declarations over
this module, which trains through the same code as ``normbench train`` (:func:`normbench.train.run`, the task's
quick budget, seed 0, one CPU thread: deterministic, so a tracked value moves only when code or recipe does) and
times the loop's own training step (:class:`normbench.train.step.StepBench`).

Grid (environment variables, read when a suite is imported; prefix ``NORMBENCH_ASV`` or ``NORMBENCH_PYTEST``):

* ``<prefix>_TASKS``: comma-separated cells ``task[/model[/placement]]`` (default ``synth-lm,synth-shapes``: the
  offline tasks with their default models, the GPT in Pre-LN), e.g. ``cifar10,cifar10/vit,synth-lm/gpt/post_ln``;
* ``<prefix>_NORMS``: comma-separated norms (default LayerNorm, RMSNorm, DyT, BatchNorm, GroupNorm, none and every
  installed plugin norm) — the same variable chooses the kernel suite's norms;
* ``<prefix>_DATA_DIR``: where real tasks' files are (``normbench train --data-dir``); without it the Hugging Face
  cache is used (``HF_HUB_OFFLINE=1`` there for a machine without network);
* ``<prefix>_JOBS``: training runs at once (default 2 on a CPU with two or more cores, 1 on a GPU).

A (norm, cell) the model cannot train (GroupNorm in the GPT), a norm that has not passed ``normbench check``
(``NORMBENCH_FORCE=1`` trains it anyway, flagged ``forced``: the kernel suite's gate) and a dataset that cannot be
read are skipped with the reason.

This module sits above ``measure`` and ``train`` (it uses the kernel suite's gate and side-file helpers and the
training API) and below ``cli``; see docs/architecture.md.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from normbench.measure import kernel_suite

ACCURACY_NORMS = ("layernorm", "rmsnorm", "dyt", "batchnorm", "groupnorm", "none")
DEFAULT_TASKS = ("synth-lm", "synth-shapes")
PARAM_NAMES = ["norm", "task"]
#: ASV benchmark names ``normbench ingest-asv`` reads (module ``accuracy`` of ``suites/asv``).
CLASSES = {"perplexity": "accuracy.TextTasks", "top1": "accuracy.ImageTasks"}


@dataclass(frozen=True)
class Cell:
    """One accuracy cell of a suite: a task, its model (default: the task's) and the GPT's placement."""

    task: str
    model: str
    placement: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Cell":
        from normbench.tasks import get_task

        parts = [p.strip() for p in text.strip().split("/")]
        if not parts[0] or len(parts) > 3 or not all(parts):
            raise ValueError(f"a suite task is task[/model[/placement]], got {text!r}")
        t = get_task(parts[0])
        model = parts[1] if len(parts) > 1 else t.default_model
        if model not in t.models:
            raise ValueError(f"task {t.name} trains {', '.join(t.models)}, not {model!r} (in {text!r})")
        placement = parts[2] if len(parts) > 2 else None
        if placement is not None and model != "gpt":
            raise ValueError(f"a placement is a GPT option; {text!r} trains {model}")
        return cls(t.name, model, placement)

    @property
    def metric(self) -> str:
        from normbench.tasks import get_task

        return get_task(self.task).metric


def _env(prefix: str, name: str) -> str | None:
    value = os.environ.get(f"{prefix}_{name}")
    return value.strip() if value and value.strip() else None


def accuracy_grid(env_prefix: str = "NORMBENCH_ASV", norms: str | None = None,
                  tasks: str | None = None) -> list[list[str]]:
    """``[norms, cells]`` of the accuracy benchmarks (see the module docstring); cells as given, validated."""
    from normbench.discovery import REGISTRY

    norms = norms if norms is not None else _env(env_prefix, "NORMS")
    tasks = tasks if tasks is not None else _env(env_prefix, "TASKS")
    if norms:
        names = [REGISTRY.get(n.strip()).name for n in norms.split(",") if n.strip()]
    else:
        names = [n for n in ACCURACY_NORMS if n in REGISTRY.specs] + kernel_suite._plugin_norms()
    cells = [c.strip() for c in (tasks.split(",") if tasks else DEFAULT_TASKS) if c.strip()]
    for c in cells:
        Cell.parse(c)
    return [list(dict.fromkeys(names)), list(dict.fromkeys(cells))]


def split_by_metric(params: list[list[str]]) -> dict[str, list[list[str]]]:
    """``{"perplexity": [norms, text cells], "top1": [norms, image cells]}`` (a metric without cells left out), each
    metric's norms only those some of its cells' models can hold (GroupNorm has no place in the GPT): ASV gives each
    benchmark one unit, so each metric is a benchmark class of its own, and ASV starts a process for every parameter
    combination, even one it then skips."""
    from normbench.models import supports

    cells: dict[str, list[str]] = {}
    for cell in params[1]:
        cells.setdefault(Cell.parse(cell).metric, []).append(cell)
    out = {}
    for metric, group in cells.items():
        models = {Cell.parse(c).model for c in group}
        norms = [n for n in params[0] if any(supports(m, n) is None for m in models)]
        if norms:
            out[metric] = [norms, group]
    return out


def cell_key(norm: str, cell: str) -> str:
    return f"{norm}|{cell}"


def data_dir(env_prefix: str = "NORMBENCH_ASV") -> str | None:
    return _env(env_prefix, "DATA_DIR")


def cell_run(norm: str, cell: str, data_dir: str | None = None, device: str | None = None):
    """The :class:`~normbench.train.loop.Run` ``normbench.train.run`` trains for this (norm, cell): quick budget,
    seed 0, one CPU thread."""
    from normbench.train.runner import RunSettings

    c = Cell.parse(cell)
    settings = RunSettings(quick=True, device=device or kernel_suite.default_device(), threads=1, data_dir=data_dir,
                           progress=False)
    return settings.runs(norm, c.task, c.model, "default", c.placement, [0])[0]


def why_not(norm: str, cell: str) -> str | None:
    """Why this (norm, cell) is not benchmarked (the model cannot hold the norm, or the check gate refuses it), or
    ``None``."""
    from normbench.discovery import REGISTRY
    from normbench.models import supports

    try:
        spec = REGISTRY.get(norm)
    except KeyError as exc:
        return str(exc)
    reason = supports(Cell.parse(cell).model, spec)
    if reason:
        return reason
    try:
        kernel_suite.gate(spec.name, "eager", kernel_suite.default_device())  # cell_run trains the eager module there
    except kernel_suite.Unsupported as exc:
        return str(exc)
    return None


def tracked_value(metrics: dict) -> float:
    """The value the suites track for a record's final metric, oriented so that larger is worse (ASV's reading):
    perplexity as it is, top-1 accuracy as top-1 error in percent; ``nan`` when the run diverged."""
    final = metrics.get("final")
    if final is None or not math.isfinite(final):
        return math.nan
    # Rounded far below any real change, so that 100 * (1 - 0.56) reads 44.0.
    return round(100.0 * (1.0 - final), 9) if metrics.get("higher_is_better") else float(final)


UNITS = {"perplexity": "perplexity", "top1": "% top-1 error"}


def summary(rec: dict) -> dict:
    """What the benchmarks report of one accuracy record."""
    m, c = rec["metrics"], rec["config"]
    steps = m.get("steps") or 0
    return {
        "record_id": rec["id"], "norm": rec["norm"]["name"], "task": c["task"], "model": c["model"],
        "placement": c.get("placement"), "metric": m["metric"], "final": m["final"],
        "tracked": tracked_value(m), "tracked_unit": UNITS.get(m["metric"], m["metric"]),
        "diverged": 1.0 if m["diverged"] else 0.0, "diverged_step": m["diverged_step"], "steps": steps,
        "wall_time_s": m["wall_time_s"], "step_time_s": m["wall_time_s"] / steps if steps else None,
        "time_to_target_s": m.get("time_to_target_s"), "recipe_hash": c["recipe_hash"], "quick": c["quick"],
        "data": c["data"], "flags": list(rec.get("flags", ())),
    }


def _train_one(norm: str, cell: str, data_dir: str | None, out: str, device: str, force: bool):
    """Train one (norm, cell) through ``normbench.train.run``: (record, None) or (None, why it failed)."""
    import normbench.train as nt
    from normbench.tasks import DatasetUnavailable

    c = Cell.parse(cell)
    try:
        res = nt.run(norm, task=c.task, model=c.model, placement=c.placement, seeds=1, quick=True, device=device,
                     threads=1, data_dir=data_dir, out=out, force=force, executor="inprocess", progress=False)
    except DatasetUnavailable as exc:
        return None, f"dataset unavailable: {exc}"
    except Exception as exc:  # one broken cell must not sink the others
        return None, f"failed: {type(exc).__name__}: {exc}"
    if res.failures or not res.records:
        return None, "; ".join(err for _, err in res.failures) or "no record"
    return res.records[0], None


def _train_lane(lane: list[tuple], stop=None, running: list | None = None) -> list[tuple]:
    """:func:`_train_one` over ``lane`` in one worker process of its own (``normbench.executor``), until ``stop``
    is set; the executor is in ``running`` meanwhile (to be interrupted from the main thread)."""
    from normbench.executor import Task
    from normbench.executor_choice import make_executor
    from normbench.processes import phase

    out = []
    with make_executor("worker", preload=("normbench.train.loop",)) as ex:
        if running is not None:
            running.append(ex)
        for args in lane:
            phase("lane", until=stop)   # the test-only hook: a lane between its runs (a thread of the parent)
            if stop is not None and stop.is_set():
                break
            o = ex.submit(Task(_train_one, args, label=f"{args[0]} {args[1]}")).result()
            out.append(o.value if o.ok else (None, f"failed: {o.error}"))
    return out


def _jobs(env_prefix: str, device: str, n: int) -> int:
    given = _env(env_prefix, "JOBS")
    if given:
        return max(1, int(given))
    if device != "cpu":
        return 1
    return max(1, min(2, os.cpu_count() or 1, n))


def train_cells(params: list[list[str]], out, env_prefix: str = "NORMBENCH_ASV", data_dir: str | None = None,
                jobs: int | None = None) -> dict:
    """Train every (norm, cell) of ``params`` (quick budget, seed 0) through ``normbench.train.run``, writing the
    records under ``out``. Returns ``{"results": {key: summary}, "skipped": {key: reason}}``."""
    device = kernel_suite.default_device()
    results, skipped, todo = {}, {}, []
    for norm, cell in itertools.product(*params):
        key = cell_key(norm, cell)
        reason = why_not(norm, cell)
        if reason:
            skipped[key] = reason
        else:
            todo.append((norm, cell))
    force = kernel_suite.forced()
    args = [(norm, cell, data_dir, str(out), device, force) for norm, cell in todo]
    jobs = jobs or _jobs(env_prefix, device, len(todo))
    # Runs go to worker processes (this process's threads and determinism settings stay as they are), each worker
    # training its lane of cells in turn (a task's data generated once per worker). Each run uses one thread; with
    # several cores, lanes go side by side (a run's values do not depend on it).
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from normbench.processes import interruptible

    jobs = max(1, min(jobs, len(args)))
    lanes = [args[i::jobs] for i in range(jobs)]
    stop, running = threading.Event(), []
    pool = ThreadPoolExecutor(jobs)
    # SIGTERM too takes the Ctrl-C path below (ASV's set-up calls this with the interpreter's own handlers, where a
    # SIGTERM ended this process at once and left each lane's worker training as an orphan), the clean-up bounded
    # by the stop deadline and not cut short by a repeated signal; inside a command, the command's handlers stay.
    with interruptible():
        try:
            done = list(pool.map(lambda lane: _train_lane(lane, stop, running), lanes)) if args else []
        except BaseException:
            # Ctrl-C lands in this thread only: the lanes stop after their current run, whose worker is interrupted
            # now (it saves its checkpoint), instead of training their whole lane first.
            stop.set()
            for ex in list(running):
                ex.interrupt()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    pool.shutdown()
    outcomes: list = [None] * len(args)
    for i, lane in enumerate(done):
        outcomes[i::jobs] = lane
    for (norm, cell), (rec, err) in zip(todo, outcomes):
        key = cell_key(norm, cell)
        if rec is None:
            skipped[key] = err
        else:
            results[key] = summary(rec)
    return {"results": results, "skipped": skipped}


# --- ASV -------------------------------------------------------------------------------------------------------------

def asv_run_dir(label: str | None = None) -> Path:
    """Where the ASV run ``<commit>-<env>`` keeps the accuracy records it trained (``.asv/normbench/accuracy/``)."""
    return kernel_suite.sidecar_root() / "accuracy" / (label or kernel_suite.run_label())


def asv_setup(params: list[list[str]]) -> dict:
    """``setup_cache`` of the ASV accuracy benchmarks (one for all of them): train the grid, keep the records and an
    index of them in :func:`asv_run_dir`, and load each task's data for the step benchmarks. Returns
    ``{"results": {key: summary}, "skipped": {key: reason}, "data": {task: TaskData}, "data_skipped": {task:
    reason}}``."""
    from normbench.records.provenance import GIT_COMMIT_ENV
    from normbench.records.store import atomic_write_text

    if os.environ.get("ASV_COMMIT"):
        # ASV installs a wheel (no .git beside the code): the records name the commit ASV benchmarks.
        os.environ[GIT_COMMIT_ENV] = os.environ["ASV_COMMIT"]
    label = kernel_suite.run_label()
    run_dir = asv_run_dir(label)
    dd = data_dir("NORMBENCH_ASV")
    out = train_cells(params, run_dir, env_prefix="NORMBENCH_ASV", data_dir=dd)
    index = {"run": label, "cells": out["results"], "skipped": out["skipped"]}
    atomic_write_text(run_dir / "index.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    out.update(load_step_data(params, dd))
    return out


def load_step_data(params: list[list[str]], data_dir: str | None = None) -> dict:
    """Each task's data loaded once (quick subset), for the step benchmarks: ``{"data": {task: TaskData},
    "data_skipped": {task: reason}}``."""
    from normbench.tasks import DatasetUnavailable, load_task

    data, skipped = {}, {}
    for cell in params[1]:
        task = Cell.parse(cell).task
        if task in data or task in skipped:
            continue
        try:
            data[task] = load_task(task, data_dir=data_dir, quick=True)
        except DatasetUnavailable as exc:
            skipped[task] = f"dataset unavailable: {exc}"
    return {"data": data, "data_skipped": skipped}


def step_bench(cache: dict, norm: str, cell: str, data_dir: str | None = None, warmup: int = 2):
    """A warmed-up :class:`~normbench.train.step.StepBench` for (norm, cell); raises ``NotImplementedError`` (ASV's
    "skipped") with the reason when the cell is not benchmarked."""
    from normbench.train.step import StepBench

    task = Cell.parse(cell).task
    if task in cache.get("data_skipped", {}):
        raise NotImplementedError(cache["data_skipped"][task])
    reason = why_not(norm, cell)
    if reason:
        raise NotImplementedError(reason)
    bench = StepBench(cell_run(norm, cell, data_dir), data=cache["data"].get(task))
    for _ in range(warmup):
        bench.step()
    return bench


# --- ingesting ASV's accuracy results --------------------------------------------------------------------------------

def ingest_accuracy(asv_results=".asv/results", sidecar=None, out="results") -> tuple[int, list[str]]:
    """Write the accuracy records of the ASV runs found (the records ``asv run`` trained, with ASV's numbers in
    ``metrics.asv``); returns (records written, problems)."""
    from normbench.measure.asv_ingest import read_asv_result, result_files, write_ingested
    from normbench.records.store import iter_records

    asv_results = Path(asv_results)
    sidecar = Path(sidecar) if sidecar else asv_results.parent / "normbench"
    problems: list[str] = []
    records: dict[str, dict] = {}
    for path in result_files(asv_results) if asv_results.is_dir() else []:
        try:
            res = read_asv_result(path)
        except (OSError, ValueError):
            continue  # the kernel ingest says so
        tracked, steps, peaks = {}, {}, {}
        for cls in CLASSES.values():
            for name, entries in res["benchmarks"].items():
                if not name.startswith(cls + "."):
                    continue
                bench = name.rsplit(".", 1)[1]
                for e in entries:
                    if bench.startswith("track_"):
                        tracked.setdefault(e["params"], {})[bench] = e["value"]
                    elif bench == "time_step":
                        steps[e["params"]] = e
                    elif bench == "peakmem_train":
                        peaks[e["params"]] = e["value"]
        if not tracked:
            continue
        run_dir = sidecar / "accuracy" / f"{res['commit']}-{res['env']}"
        try:
            index = json.loads((run_dir / "index.json").read_text())
        except (OSError, ValueError):
            problems.append(f"{path}: no accuracy records of this run in {run_dir} (ASV ran on another machine, "
                            "or a normbench without the accuracy suite)")
            continue
        stored = {rec["id"]: rec for _, rec in iter_records(run_dir, kind="accuracy")}
        for params, values in tracked.items():
            if len(params) != 2:
                continue
            key = cell_key(*params)
            cell = index["cells"].get(key)
            if cell is None:  # skipped by the suite (ASV shows why); nothing was trained
                continue
            if cell["record_id"] not in stored:
                problems.append(f"{path}: {key}: ASV has a result but {run_dir} holds no record of it")
                continue
            rec = copy.deepcopy(stored[cell["record_id"]])
            step = steps.get(params) or {}
            iqr = (step["q75"] - step["q25"]) if step.get("q25") is not None and step.get("q75") is not None \
                else None
            rec["metrics"]["asv"] = {
                "tracked": values, "step_time_s": step.get("value"), "step_time_iqr_s": iqr,
                "repeat": step.get("repeat"), "peakmem_rss_bytes": peaks.get(params), "commit": res["commit"],
                "machine": res["machine"], "env": res["env"], "result_file": str(path)}
            rec["provenance"]["command"] = "asv run (accuracy suite; ingested by normbench ingest-asv)"
            records[rec["id"]] = rec
    return write_ingested(records, out, problems)


def ingest(asv_results=".asv/results", sidecar=None, out="results") -> tuple[int, int, list[str]]:
    """Kernel and accuracy records from ASV's results: (kernel records, accuracy records, problems)."""
    from normbench.measure.asv_ingest import ingest as ingest_kernels

    nk, problems = ingest_kernels(asv_results, sidecar=sidecar, out=out)
    na, more = ingest_accuracy(asv_results, sidecar=sidecar, out=out)
    return nk, na, problems + more


# --- the command -----------------------------------------------------------------------------------------------------

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ingest-asv", help="turn ASV results (+ the suite's side records) into normbench kernel and accuracy records",
        description="Reads ASV result files (default .asv/results) and the full records the ASV suite wrote next "
                    "to them (.asv/normbench), and writes normbench kernel records (harness 'asv') and the accuracy "
                    "records `asv run` trained (quick budgets, ASV's numbers in metrics.asv) to OUT.")
    p.add_argument("asv_results", nargs="?", default=".asv/results", help="ASV results_dir (default .asv/results)")
    p.add_argument("--sidecar", default=None, help="the suite's side records (default: <asv_results>/../normbench)")
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.set_defaults(func=_cmd_ingest)


def _cmd_ingest(args) -> int:
    nk, na, problems = ingest(args.asv_results, sidecar=args.sidecar, out=args.out)
    for p in problems:
        print(f"  {p}", file=sys.stderr)
    print(f"{nk + na} record(s) ingested into {args.out} ({nk} kernel, {na} accuracy)")
    return 0 if nk + na or not problems else 1
