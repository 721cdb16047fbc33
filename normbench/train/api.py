"""Training from Python: :func:`run` (one cell, several seeds) and :func:`sweep` (norms x tasks x seeds, optionally
with the learning-rate search), with plain values. ``normbench train`` and ``normbench sweep`` are these calls::

    import normbench.train as nt
    result = nt.run("rmsnorm", task="synth-lm", seeds=2, steps=20, out="results")
    result.records, result.failures, result.summary()
    nt.sweep(["layernorm", "rmsnorm"], tasks=["synth-lm"], seeds=1, quick=True, out="results")
    nt.sweep_plan(["activation"], tune=True)          # what a sweep would run (``--dry-run``)

Records are written to ``out`` as each run ends (cells already there are skipped by ``sweep``), and progress
lines go to stderr as on the command line. Invalid arguments raise ``ValueError`` (``KeyError`` for an unknown
norm), a missing dataset ``normbench.tasks.DatasetUnavailable``, a sweep with no cell
``normbench.train.matrix.EmptySweep``. A run that fails (or a norm that has not passed ``normbench check``,
without ``force``) is not raised: it is in ``failures``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from normbench.train.runner import ExecSettings, RunSettings, execute


@dataclass
class TrainResult:
    """What one :func:`run` or :func:`sweep` call trained: the records it returns, and the runs that failed as
    (label, error) pairs."""

    records: list[dict] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> list[dict]:
        """One entry per cell over its seeds (``normbench.stats.aggregate``): centre, spread, 95% CI, divergences."""
        from normbench.stats import aggregate

        return aggregate(self.records) if self.records else []


def _settings(quick, steps, lr, batch_size, device, threads, data_dir, checkpoint_dir, checkpoint_every, resume,
              progress, sync_bn, base_norm=None, qk_norm=False, backend="eager", keep_checkpoint=False) -> RunSettings:
    return RunSettings(quick=bool(quick), steps=steps, lr=lr, batch_size=batch_size, base_norm=base_norm,
                       qk_norm=bool(qk_norm), backend=backend, device=device, threads=threads, data_dir=data_dir,
                       checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every, resume=bool(resume),
                       keep_checkpoint=bool(keep_checkpoint), progress=bool(progress), sync_bn=bool(sync_bn))


def run(norm: str, task: str | None = None, model: str | None = None, *, placement: str | None = None,
        variant: str = "default", seeds: int | None = None, seed_start: int = 0, quick: bool = False,
        steps: int | None = None, lr: float | None = None, batch_size: int | None = None,
        base_norm: str | None = None, qk_norm: bool = False, backend: str = "eager", device: str = "cpu",
        threads: int | None = 1, data_dir: str | None = None, out: str = "results",
        checkpoint_dir: str | None = None, checkpoint_every: int | None = None, resume: bool = True,
        keep_checkpoint: bool = False, progress: bool = True, sync_bn: bool = False, force: bool = False,
        executor: str | None = None, address: str | None = None, retries: int | None = None,
        stall_limit: float | None = None, time_limit: float | None = None,
        on_record: Callable[[dict], None] | None = None,
        before_training: Callable[[], None] | None = None) -> TrainResult:
    """Train ``norm`` on one cell (``task``, ``model``, ``variant``, GPT ``placement``) for ``seeds`` consecutive
    seeds from ``seed_start`` (default 1 with ``quick``, else 3), writing one record per seed to ``out``.

    ``task`` defaults to the offline task for the norm's layout, ``model`` to the task's. ``quick`` runs the
    recipe's quick budget (a smoke run in minutes on a laptop CPU; its records are marked quick). ``steps``,
    ``lr`` and ``batch_size`` override the recipe (recorded: other cells). ``executor``: "worker" (default),
    "inprocess" or "ray" (``address``, ``retries``); ``stall_limit`` / ``time_limit``: seconds without a training
    step / for the norm's check (``normbench.executor``). ``on_record`` is called with each new record,
    ``before_training`` once the arguments are checked, before any norm is checked or trained (the CLI reports
    plugin problems there).
    """
    import normbench
    from normbench.models import supports
    from normbench.tasks import default_task, get_task

    spec = normbench.get_norm(norm)
    t = get_task(task or default_task(spec.layouts))
    model = model or t.default_model
    if model not in t.models:
        raise ValueError(f"task {t.name} trains {', '.join(t.models)}, not {model!r}")
    reason = supports(model, spec)
    if reason:
        raise ValueError(reason + (f" (task {t.name}; try --task with another modality)" if not task else ""))
    n = seeds if seeds is not None else (1 if quick else 3)
    if n < 1:
        raise ValueError("--seeds must be at least 1")
    settings = _settings(quick, steps, lr, batch_size, device, threads, data_dir, checkpoint_dir, checkpoint_every,
                         resume, progress, sync_bn, base_norm, qk_norm, backend, keep_checkpoint)
    how = ExecSettings(out=str(out), force=bool(force), executor=executor, address=address, retries=retries,
                       stall_limit=stall_limit, time_limit=time_limit, on_record=on_record)
    runs = settings.runs(spec, t.name, model, variant, placement, range(seed_start, seed_start + n))
    if before_training is not None:
        before_training()
    return TrainResult(*execute(runs, how))


def sweep_plan(norms: Sequence[str] = ("activation",), tasks: Sequence[str] | None = None,
               models: Sequence[str] | None = None, variants: Sequence[str] = ("default",),
               placements: Sequence[str] | None = None, *, seeds: int | None = None, quick: bool = False,
               tune: bool = False, steps: int | None = None, lr: float | None = None,
               batch_size: int | None = None) -> list[dict]:
    """What :func:`sweep` with these arguments would train, one dict per line of ``normbench sweep --dry-run``:
    per run (norm, task, model, variant, placement, seed), or with ``tune`` per (cell, norm) its learning-rate
    grid, tune seeds and final seeds. Raises ``EmptySweep`` when no norm supports any cell."""
    from normbench.train.matrix import EmptySweep, cells
    from normbench.train.tune import plan_line

    if tune and lr is not None:
        raise ValueError("--tune searches the learning rate; drop --lr")
    settings = RunSettings(quick=bool(quick), steps=steps, lr=lr, batch_size=batch_size)
    todo = cells(norms, tasks, models, variants, placements)
    if tune:
        if not todo:
            raise EmptySweep()
        return [plan_line(settings, norm, task, model, variant, placement, seeds)
                for task, model, variant, placement, names in todo for norm in names]
    runs = _plan(settings, todo, seeds)
    if not runs:
        raise EmptySweep()
    return [{"norm": r.spec().name, "task": r.task, "model": r.model, "variant": r.variant,
             "placement": r.placement, "seed": r.seed} for r in runs]


def _plan(settings: RunSettings, todo: list[tuple], seeds: int | None) -> list:
    """Every run of the sweep matrix without tuning, in order (cell by cell, norm by norm, seeds fastest)."""
    n = seeds if seeds is not None else (1 if settings.quick else 3)
    runs = []
    for task, model, variant, placement, names in todo:
        for norm in names:
            runs.extend(settings.runs(norm, task, model, variant, placement, range(n)))
    return runs


def sweep(norms: Sequence[str] = ("activation",), tasks: Sequence[str] | None = None,
          models: Sequence[str] | None = None, variants: Sequence[str] = ("default",),
          placements: Sequence[str] | None = None, *, seeds: int | None = None, tune: bool = False,
          quick: bool = False, steps: int | None = None, lr: float | None = None, batch_size: int | None = None,
          device: str = "cpu", threads: int | None = 1, data_dir: str | None = None, out: str = "results",
          checkpoint_dir: str | None = None, checkpoint_every: int | None = None, resume: bool = True,
          progress: bool = True, sync_bn: bool = False, force: bool = False, executor: str | None = None,
          address: str | None = None, retries: int | None = None, stall_limit: float | None = None,
          time_limit: float | None = None, on_record: Callable[[dict], None] | None = None,
          before_training: Callable[[], None] | None = None) -> TrainResult:
    """Train the matrix ``norms`` x ``tasks`` x ``models`` x ``variants`` (x GPT ``placements``) x seeds, skipping
    runs whose records are already in ``out``.

    ``norms``: names, "activation" (every activation-kind norm, plugins included) or "all"; ``tasks``: default the
    offline tasks; ``models``: default each task's default model; ``placements``: default pre_ln, ``["all"]`` for
    every one. ``seeds``: default 1 with ``quick``, else 3. With ``tune``, each (cell, norm) first searches the
    learning rate: the recipe's grid x its tune seeds on the validation split (records flagged tuning, reused from
    ``out`` when there), then ``seeds`` (default the recipe's final seeds) at the chosen rate on the test split;
    the result holds the final records only. The other options are :func:`run`'s.
    """
    from normbench.records import existing_ids, iter_records
    from normbench.train.matrix import EmptySweep, cells
    from normbench.train.tune import tune_cell

    if tune and lr is not None:
        raise ValueError("--tune searches the learning rate; drop --lr")
    settings = _settings(quick, steps, lr, batch_size, device, threads, data_dir, checkpoint_dir, checkpoint_every,
                         resume, progress, sync_bn)
    how = ExecSettings(out=str(out), force=bool(force), executor=executor, address=address, retries=retries,
                       stall_limit=stall_limit, time_limit=time_limit, on_record=on_record)
    todo = cells(norms, tasks, models, variants, placements)
    if not tune:
        runs = _plan(settings, todo, seeds)
        if not runs:
            raise EmptySweep()
        done = existing_ids(how.out, kind="accuracy")
        print(f"sweep: {len(runs)} runs planned; cells already in {how.out} are skipped", file=sys.stderr)
        if before_training is not None:
            before_training()
        return TrainResult(*execute(runs, how, skip=done))
    if not todo:
        raise EmptySweep()
    store = {}
    if Path(how.out).exists():
        store = {rec["id"]: rec for _, rec in iter_records(how.out, kind="accuracy")}
    n_pairs = sum(len(names) for *_, names in todo)
    print(f"sweep --tune: {len(todo)} cells, {n_pairs} (cell, norm) pairs; records already in {how.out} are reused",
          file=sys.stderr)
    if before_training is not None:
        before_training()
    result = TrainResult()
    for task, model, variant, placement, names in todo:
        for norm in names:
            recs, fails = tune_cell(settings, how, norm, task, model, variant, placement, store, seeds)
            result.records.extend(r for r in recs if "tuning" not in r.get("flags", ()))
            result.failures.extend(fails)
    return result
