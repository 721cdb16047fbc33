"""The ``normbench tasks``, ``normbench train`` and ``normbench sweep`` commands."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

PLACEMENT_HELP = ("GPT norm placement: pre_ln (default), post_ln, peri_ln, mix_ln, deepnorm, hybridnorm, "
                  "layernorm_scaling")


def register(subparsers) -> None:
    p = subparsers.add_parser("tasks", help="list the accuracy tasks and which run offline")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tasks)

    p = subparsers.add_parser("train", help="train a model with one norm on one task (several seeds)")
    p.add_argument("--norm", required=True, help="registry name of the norm under test (see `normbench list`)")
    p.add_argument("--task", help="task (default: the offline task for the norm's layout; see `normbench tasks`)")
    p.add_argument("--model", help="gpt, vit, resnet, fixup_resnet, skipinit_resnet, nf_resnet (default: the task's)")
    p.add_argument("--placement", help=PLACEMENT_HELP)
    p.add_argument("--variant", default="default", help="recipe variant, e.g. bs2 or deep (see `normbench tasks`)")
    _common(p)
    p.add_argument("--seed-start", type=int, default=0, help="first seed (seeds are consecutive)")
    p.add_argument("--base-norm", help="activation norm used with a weight or attention norm under test")
    p.add_argument("--qk-norm", action="store_true", help="add QK-Norm to the GPT's attention")
    p.add_argument("--backend", default="eager",
                   help="implementation of the norm under test: eager (default), compile, triton (needs a GPU), ...")
    p.add_argument("--keep-checkpoint", action="store_true", help="keep the checkpoint after the run completes")
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser("sweep", help="train a matrix of norms x tasks x seeds (x placements), skipping "
                                            "cells already in the results")
    p.add_argument("--norms", nargs="+", default=["activation"],
                   help="norm names, or 'activation' (every activation-kind norm, plugins included) or 'all'")
    p.add_argument("--tasks", nargs="+", help="tasks (default: the offline tasks)")
    p.add_argument("--models", nargs="+", help="models (default: each task's default model)")
    p.add_argument("--variants", nargs="+", default=["default"], help="recipe variants (default: default)")
    p.add_argument("--placements", nargs="+", help="GPT placements (default: pre_ln); 'all' for every one")
    p.add_argument("--dry-run", action="store_true", help="list the runs without training")
    p.add_argument("--tune", action="store_true",
                   help="tune the learning rate per norm and cell: the recipe's lr grid x its tune seeds on the "
                        "validation split (records flagged tuning), then the recipe's final seeds (or --seeds) at "
                        "the chosen rate on the test split")
    _common(p)
    p.set_defaults(func=cmd_sweep)


def _common(p) -> None:
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: 1 with --quick, else 3)")
    p.add_argument("--quick", action="store_true",
                   help="quick run: offline default task when no --task, short budget on real tasks")
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.add_argument("--data-dir", help="folder with datasets (save_to_disk folders or hub-layout parquet files)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads (default 1: results are bit-reproducible for a fixed thread count)")
    p.add_argument("--checkpoint-dir", help="where checkpoints go (default: ~/.cache/normbench/checkpoints)")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default: a tenth of the run)")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint of the same run")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the records (train) or the plan (sweep) as JSON")
    p.add_argument("--steps", type=int, help="override the recipe's number of steps (recorded; another cell)")
    p.add_argument("--lr", type=float, help="override the recipe's learning rate (recorded; another cell)")
    p.add_argument("--batch-size", type=int, help="override the recipe's batch size (recorded; another cell)")
    p.add_argument("--force", action="store_true",
                   help="train norms that have not passed `normbench check` too (records flagged 'forced', never "
                        "ranked); without it such norms are refused")
    p.add_argument("--sync-bn", action="store_true",
                   help="under torchrun: BatchNorm statistics over the global batch of every rank (recorded; "
                        "another cell). Without it each rank normalises its own share (docs/scale-out.md)")
    from normbench.executors import add_arguments

    add_arguments(p, stall=True)


# -- tasks ----------------------------------------------------------------------------------------------------------

def cmd_tasks(args) -> int:
    from normbench.tasks import all_tasks
    from normbench.train.recipes import variants

    rows = []
    for t in all_tasks():
        d = t.to_dict()
        d["recipes"] = {m: variants(t.name, m) for m in t.models if variants(t.name, m)}
        rows.append(d)
    if args.json:
        from normbench._stdout import document_stream

        print(json.dumps({"tasks": rows}, indent=2), file=document_stream())
        return 0
    table = [("task", "offline", "metric", "models (variants)", "source")]
    for d in rows:
        models = ", ".join(m + (f" ({'/'.join(v for v in vs if v != 'default')})" if len(vs) > 1 else "")
                           for m, vs in d["recipes"].items())
        table.append((d["name"], "yes" if d["offline"] else "no", d["metric"], models, d["source"]))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print("\noffline tasks are generated from a fixed seed and need no download; the others need the dataset in the "
          "datasets cache or --data-dir (see docs/accuracy.md)")
    return 0


# -- train ----------------------------------------------------------------------------------------------------------

def _fmt(v, digits=4):
    return "—" if v is None else f"{v:.{digits}g}"


def _print_summary(cells, file=None) -> None:
    """One line per cell (``normbench.stats.aggregate``): centre and 95% CI, and the runs that failed."""
    file = file or sys.stdout
    for c in cells:
        f = c["final"]
        ci = f"95% CI [{_fmt(f['ci_low'])}, {_fmt(f['ci_high'])}]" if f["ci_low"] is not None else "CI needs 2+ seeds"
        where = (c["recipe"] or "?") + (f" {c['placement']}" if c["placement"] else "")
        centre = "geometric mean" if f["scale"] == "log" else "mean"
        spread = f", sd of log {_fmt(f['std'])}" if f["scale"] == "log" else f" ± {_fmt(f['std'])}"
        div = f", {c['diverged']} of {c['n']} diverged" if c["diverged"] else ""
        print(f"{c['norm']:>20} {where}: {c['metric']} {centre} {_fmt(f['mean'])}{spread} (n={f['n']}{div}), {ci}",
              file=file)


def _runs_for(args, norm, task, model, variant, placement, seeds, split="test", lr=None, lr_search=None):
    from normbench.train.loop import Run

    overrides = {}
    for key in ("steps", "lr", "batch_size"):
        v = getattr(args, key, None)
        if v is not None:
            overrides[key] = v
    if lr is not None:
        overrides["lr"] = lr
    return [Run(task=task, model=model, norm=norm, seed=s, placement=placement, variant=variant, quick=args.quick,
                device=args.device, data_dir=args.data_dir, base_norm=getattr(args, "base_norm", None),
                qk_norm=getattr(args, "qk_norm", False), backend=getattr(args, "backend", "eager"),
                recipe_overrides=overrides, threads=args.threads,
                checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                resume=not args.no_resume, keep_checkpoint=getattr(args, "keep_checkpoint", False),
                progress=not args.no_progress, split=split, lr_search=lr_search,
                sync_bn=getattr(args, "sync_bn", False))
            for s in seeds]


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


# Errors a run can raise that mean "this run failed" (reported, the rest go on); anything else is a bug and is raised.
_RUN_ERRORS = ("KeyError", "ValueError", "ImportError", "ModuleNotFoundError", "RuntimeError", "BackendUnavailable",
               "AssertionError", "TypeError", "FloatingPointError", "NotImplementedError")


def _execute(runs, out: str, skip: set | dict | None = None, as_json: bool = False, args=None,
             include_skipped: bool = False) -> tuple[list, list]:
    """Train ``runs`` in order, writing each record as soon as it exists; returns (records, failures).

    ``skip``: ids already in ``out``; given as a dict id -> record, ``include_skipped`` returns those records too
    (and new records are added to it).

    Each run goes through the executor chosen by ``args`` (a reusable worker process by default) with a
    no-progress watchdog; the norms under test must have passed ``normbench check`` (``--force`` overrides,
    flagging the records). A run that hangs, crashes or fails is reported and the next one starts.
    """
    from dataclasses import replace

    from normbench.check import ensure_checked, refusal
    from normbench.executor import Task, stall_limit, time_limit
    from normbench.executors import from_args, make_executor
    from normbench.train.loop import command_line, distributed_env, record_id_for

    records, failures = [], []
    distributed = distributed_env()
    rank0 = not distributed or int(__import__("os").environ.get("RANK", "0")) == 0
    force = bool(getattr(args, "force", False))
    # torchrun: each rank is already the process that runs the work, and the ranks must stay in step.
    executor_name = "inprocess" if distributed else getattr(args, "executor", None)
    limit = stall_limit(getattr(args, "stall_limit", None))
    check_limit = time_limit(getattr(args, "time_limit", None), check=True)
    command = command_line()
    broken: dict[str, str] = {}
    from normbench.discovery import report_plugin_problems

    report_plugin_problems()
    preload = ("normbench.train.loop", "normbench.check")
    with from_args(args, executor_name, preload=preload) if args is not None else \
            make_executor(executor_name, preload=preload) as ex:
        verdicts = ensure_checked([r.spec().name for r in runs], ex, check_limit)
        for name, v in verdicts.items():
            if not v.passed and not force:
                msg = refusal(v, "train")
                broken[name] = msg
                print(f"normbench: {msg}", file=sys.stderr)
        remote = getattr(ex, "remote", False)
        submitted = []
        for i, run in enumerate(runs, 1):
            name = run.spec().name
            label = f"[{i}/{len(runs)}] {name} {run.recipe().name}" + \
                    (f" {run.placement}" if run.placement else "") + f" seed {run.seed}"
            if name in broken:
                failures.append((label, broken[name]))
                continue
            if skip is not None and not remote:
                rid = record_id_for(run)
                if rid in skip:
                    print(f"{label}: already in {out} ({rid}), skipped", file=sys.stderr)
                    if include_skipped and isinstance(skip, dict):
                        records.append(skip[rid])
                    continue
            # The worker finds the norm by name in its own registry (a NormSpec may hold a lambda).
            if remote:  # every run at once; each node computes its ids with its own hardware
                # No progress bars from the nodes: Ray would interleave them all on this terminal.
                task = Task(_node_train_task, (replace(run, norm=name, progress=False), command,
                                               frozenset(skip or ())),
                            label=label, stall_timeout=limit, resources=_run_resources(run))
            else:
                task = Task(_train_task, (replace(run, norm=name), command), label=label, stall_timeout=limit)
            submitted.append((run, name, label, ex.submit(task)))
            if not remote:
                _finish(*submitted.pop(), out, verdicts, force, rank0, as_json, broken, records, failures,
                        skip, include_skipped)
        if remote:
            import concurrent.futures as cf

            by_future = {fut: (run, name, label) for run, name, label, fut in submitted}
            for fut in cf.as_completed(by_future):
                run, name, label = by_future[fut]
                _finish(run, name, label, fut, out, verdicts, force, rank0, as_json, broken, records, failures,
                        skip, include_skipped)
    return records, failures


def _finish(run, name, label, fut, out, verdicts, force, rank0, as_json, broken, records, failures, skip=None,
            include_skipped=False) -> None:
    """Report one run's outcome and write its record (this process is the only writer of ``out``)."""
    from normbench._stdout import document_stream
    from normbench.check import stamp
    from normbench.records import write_records
    from normbench.tasks import DatasetUnavailable

    outcome = fut.result()
    if outcome.ok and isinstance(outcome.value, dict) and "skipped" in outcome.value:
        rid = outcome.value["skipped"]
        print(f"{label}: already in {out} ({rid}), skipped", file=sys.stderr)
        if include_skipped and isinstance(skip, dict):
            records.append(skip[rid])
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
            broken[name] = f"{name} {outcome.broke} in {label}"
        failures.append((label, outcome.error))
        print(f"{label}: FAILED: {outcome.error}", file=sys.stderr)
        return
    rec = outcome.value
    if rec is None:
        return
    stamp(rec, verdicts[name], run.backend, forced=force)
    if rank0:
        paths = write_records([rec], out)
        m = rec["metrics"]
        state = (f"diverged at step {m['diverged_step']}" if m["diverged"]
                 else f"{m['metric']} {m['final']:.4g}")
        if run.split == "val":
            state = f"(tuning, lr {run.recipe().lr:g}, validation) {state}"
        print(f"{label}: {state} in {m['wall_time_s']:.1f}s -> {paths[0]}", file=sys.stderr)
    records.append(rec)
    if isinstance(skip, dict):
        skip[rec["id"]] = rec
    if as_json:
        print(json.dumps(rec), file=document_stream())


def cmd_train(args) -> int:
    import normbench
    from normbench.models import supports
    from normbench.stats import aggregate
    from normbench.tasks import DatasetUnavailable, default_task, get_task

    spec = normbench.get_norm(args.norm)
    task = get_task(args.task or default_task(spec.layouts))
    model = args.model or task.default_model
    if model not in task.models:
        raise ValueError(f"task {task.name} trains {', '.join(task.models)}, not {model!r}")
    reason = supports(model, spec)
    if reason:
        raise ValueError(reason + (f" (task {task.name}; try --task with another modality)" if not args.task else ""))
    n = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if n < 1:
        raise ValueError("--seeds must be at least 1")
    runs = _runs_for(args, spec, task.name, model, args.variant, args.placement,
                     range(args.seed_start, args.seed_start + n))
    try:
        records, failures = _execute(runs, args.out, as_json=args.json, args=args)
    except DatasetUnavailable as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2
    if records and not args.json:
        _print_summary(aggregate(records))
    return 1 if failures else 0


# -- sweep ----------------------------------------------------------------------------------------------------------

def _norm_names(selectors) -> list[str]:
    import normbench

    names = []
    for sel in selectors:
        if sel in ("activation", "all"):
            for name in normbench.list_norms():
                kind = normbench.get_norm(name).kind
                if (sel == "all" and kind != "softmax") or kind == "activation":  # softmax is no layer norm
                    names.append(name)
        else:
            normbench.get_norm(sel)  # unknown names fail here, before any training
            names.append(sel)
    return list(dict.fromkeys(names))


def cells(args) -> list[tuple]:
    """The sweep's cells in order: (task, model, variant, placement or None, [norms it supports])."""
    from normbench.models import supports
    from normbench.models.gpt import PLACEMENTS
    from normbench.tasks import all_tasks, get_task
    from normbench.train.recipes import variants

    tasks = [get_task(t) for t in args.tasks] if args.tasks else [t for t in all_tasks() if t.offline]
    norms = _norm_names(args.norms)
    out = []
    for task in tasks:
        for model in args.models or [task.default_model]:
            if model not in task.models:
                continue
            for variant in args.variants:
                if variant not in variants(task.name, model):
                    continue
                placements = [None]
                if model == "gpt":
                    placements = list(PLACEMENTS) if args.placements == ["all"] else (args.placements or ["pre_ln"])
                for placement in placements:
                    ok = [n for n in norms if supports(model, n) is None]
                    if placement == "ngpt" and args.placements == ["all"]:
                        # nGPT's Norm is the unit-sphere projection: with "all", the placement runs with its own
                        # norm only (name it with --placements ngpt --norms ... to try others).
                        ok = ["ngpt"]
                    if ok:
                        out.append((task.name, model, variant, placement if model == "gpt" else None, ok))
    return out


def plan(args) -> list:
    """Every run of the sweep matrix without tuning, in order (norms vary fastest within a cell, then seeds)."""
    n = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    runs = []
    for task, model, variant, placement, norms in cells(args):
        for norm in norms:
            runs.extend(_runs_for(args, norm, task, model, variant, placement, range(n)))
    return runs


def choose_lr(grid: list[float], records: list[dict]) -> tuple[float, dict]:
    """The learning rate of ``grid`` whose tuning runs did best on the validation split, and every rate's score.

    Rule (fixed before any run): fewest diverged seeds first; then the best mean validation metric over seeds
    (mean log perplexity for perplexity, mean accuracy otherwise); a tie keeps the earlier rate of the grid.
    """
    by_lr: dict[float, list] = {lr: [] for lr in grid}
    for r in records:
        lr = float(f"{r['config']['recipe']['lr']:.4g}")
        if lr in by_lr:
            by_lr[lr].append(r)
    scores, best, best_key = {}, None, None
    for lr in grid:
        rs = by_lr[lr]
        if not rs:
            raise ValueError(f"no tuning record for lr {lr:g}")
        higher = rs[0]["metrics"]["higher_is_better"]
        log = rs[0]["metrics"]["metric"] == "perplexity"
        n_div = sum(1 for r in rs if r["metrics"]["diverged"] or r["metrics"]["final"] is None)
        vals = [r["metrics"]["final"] for r in rs if not r["metrics"]["diverged"] and r["metrics"]["final"] is not None]
        score = None
        if vals:
            score = sum(math.log(v) if log else v for v in vals) / len(vals)
        scores[f"{lr:g}"] = {"seeds": len(rs), "diverged": n_div,
                             "score": score, "score_is": "mean log perplexity" if log else "mean " + rs[0]["metrics"][
                                 "metric"]}
        key = (n_div, math.inf if score is None else (-score if higher else score))
        if best_key is None or key < best_key:
            best, best_key = lr, key
    return best, scores


def _tune_and_run(args, norm, task, model, variant, placement, store: dict) -> tuple[list, list]:
    """One norm in one cell: the learning-rate search on the validation split, then the final seeds.

    The search runs the recipe's grid; when the best rate sits on an edge of it (and, at the top edge, did not
    diverge), it adds the next rate beyond that edge, at most ``recipe.lr_extend`` times per side.
    """
    probe = _runs_for(args, norm, task, model, variant, placement, [0])[0]
    recipe = probe.recipe()
    grid = recipe.lr_candidates()
    step = grid[1] / grid[0] if len(grid) > 1 else 3.0
    t_recs, extended = [], {"up": 0, "down": 0}
    while True:
        tuning = []
        for lr in grid:
            tuning.extend(_runs_for(args, norm, task, model, variant, placement, range(recipe.tune_seeds),
                                    split="val", lr=lr))
        t_recs, failures = _execute(tuning, args.out, skip=store, as_json=args.json, args=args,
                                    include_skipped=True)
        if failures:
            return t_recs, failures
        chosen, scores = choose_lr(grid, t_recs)
        # The best rate on an edge of the grid: look one grid step beyond it (the same rule for every norm).
        if chosen == grid[-1] and extended["up"] < recipe.lr_extend and not scores[f"{chosen:g}"]["diverged"]:
            grid.append(float(f"{grid[-1] * step:.4g}"))
            extended["up"] += 1
        elif chosen == grid[0] and len(grid) > 1 and extended["down"] < recipe.lr_extend:
            grid.insert(0, float(f"{grid[0] / step:.4g}"))
            extended["down"] += 1
        else:
            break
    where = f"{norm} {recipe.name}" + (f" {placement}" if placement else "")
    parts = []
    for k, v in scores.items():
        score = "all diverged" if v["score"] is None else f"{v['score']:.4g}"
        parts.append(f"{k}: {score}" + (f" ({v['diverged']} diverged)" if v["diverged"] else ""))
    print(f"tuned {where}: lr {chosen:g} chosen ({'; '.join(parts)})", file=sys.stderr)
    search = {"grid": grid, "chosen": chosen, "seeds_per_rate": recipe.tune_seeds, "split": "val",
              "rule": "fewest diverged, then best mean validation metric (log perplexity); a best rate on an edge "
                      "of the grid extends it one step that way (at most lr_extend times)"}
    n = args.seeds if args.seeds is not None else recipe.final_seeds
    finals = _runs_for(args, norm, task, model, variant, placement, range(n), lr=chosen, lr_search=search)
    f_recs, f_fail = _execute(finals, args.out, skip=store, as_json=args.json, args=args, include_skipped=True)
    return f_recs, f_fail


def cmd_sweep(args) -> int:
    from normbench.records import existing_ids
    from normbench.tasks import DatasetUnavailable

    if args.tune:
        if args.lr is not None:
            raise ValueError("--tune searches the learning rate; drop --lr")
        return _cmd_sweep_tuned(args)
    runs = plan(args)
    if not runs:
        print(_EMPTY_SWEEP, file=sys.stderr)
        return 2
    if args.dry_run:
        return _print_plan(({"norm": r.spec().name, "task": r.task, "model": r.model, "variant": r.variant,
                             "placement": r.placement, "seed": r.seed} for r in runs), args.json)
    done = existing_ids(args.out, kind="accuracy")
    print(f"sweep: {len(runs)} runs planned; cells already in {args.out} are skipped", file=sys.stderr)
    try:
        records, failures = _execute(runs, args.out, skip=done, as_json=args.json, args=args)
    except DatasetUnavailable as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2
    return _report(records, failures, args.json)


def _cmd_sweep_tuned(args) -> int:
    from normbench.records import iter_records
    from normbench.tasks import DatasetUnavailable

    todo = cells(args)
    if not todo:
        print(_EMPTY_SWEEP, file=sys.stderr)
        return 2
    if args.dry_run:
        def lines():
            for task, model, variant, placement, norms in todo:
                for norm in norms:
                    r = _runs_for(args, norm, task, model, variant, placement, [0])[0].recipe()
                    yield {"norm": norm, "task": task, "model": model, "variant": variant, "placement": placement,
                           "lr_grid": r.lr_candidates(), "tune_seeds": r.tune_seeds,
                           "final_seeds": args.seeds if args.seeds is not None else r.final_seeds}
        return _print_plan(lines(), args.json)
    store = {}
    if Path(args.out).exists():
        store = {rec["id"]: rec for _, rec in iter_records(args.out, kind="accuracy")}
    n_runs = sum(len(n) for *_, n in todo)
    print(f"sweep --tune: {len(todo)} cells, {n_runs} (cell, norm) pairs; records already in {args.out} are reused",
          file=sys.stderr)
    all_records, failures = [], []
    try:
        for task, model, variant, placement, norms in todo:
            for norm in norms:
                recs, fails = _tune_and_run(args, norm, task, model, variant, placement, store)
                all_records.extend(r for r in recs if "tuning" not in r.get("flags", ()))
                failures.extend(fails)
    except DatasetUnavailable as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2
    return _report(all_records, failures, args.json)


_EMPTY_SWEEP = "normbench: the sweep matrix is empty (no norm supports the chosen models/variants)"


def _print_plan(lines, as_json: bool) -> int:
    """``--dry-run``: one line per planned item (JSON, or key=value pairs) on the document stream."""
    from normbench._stdout import document_stream

    for line in lines:
        print(json.dumps(line) if as_json else " ".join(f"{k}={v}" for k, v in line.items()), file=document_stream())
    return 0


def _report(records: list[dict], failures: list, as_json: bool) -> int:
    """A finished sweep: the per-cell summary (unless JSON), the failures, and the exit status."""
    from normbench.stats import aggregate

    if records and not as_json:
        _print_summary(aggregate(records))
    for label, err in failures:
        print(f"failed: {label}: {err}", file=sys.stderr)
    return 1 if failures else 0
