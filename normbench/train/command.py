"""The ``normbench tasks``, ``normbench train`` and ``normbench sweep`` commands."""

from __future__ import annotations

import json
import sys

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
                   help="quick run: offline default task when no --task; on real tasks the recipe's quick budget "
                        "(fewer steps, a smaller model, batch and context: minutes on a laptop CPU)")
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
    from normbench.executor_choice import add_arguments

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


# -- train and sweep: options -> plain values -> normbench.train.api ------------------------------------------------

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


def _print_record(rec: dict) -> None:
    """``--json``: each new record, one JSON document per line, on the document stream."""
    from normbench._stdout import document_stream

    print(json.dumps(rec), file=document_stream())


def _options(args) -> dict:
    """The options ``train`` and ``sweep`` share, as keyword arguments of ``normbench.train.api``."""
    return dict(seeds=args.seeds, quick=args.quick, steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                device=args.device, threads=args.threads, data_dir=args.data_dir, out=args.out,
                checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                resume=not args.no_resume, progress=not args.no_progress, sync_bn=args.sync_bn, force=args.force,
                executor=args.executor, address=args.address, retries=args.retries, stall_limit=args.stall_limit,
                time_limit=args.time_limit, on_record=_print_record if args.json else None)


def _report_plugin_problems() -> None:
    """Plugin load errors and slow plugin imports, on stderr before any training (the one import of it here)."""
    from normbench.discovery import report_plugin_problems

    report_plugin_problems()


def cmd_train(args) -> int:
    from normbench.tasks import DatasetUnavailable
    from normbench.train import api

    try:
        result = api.run(args.norm, args.task, args.model, placement=args.placement, variant=args.variant,
                         seed_start=args.seed_start, base_norm=args.base_norm, qk_norm=args.qk_norm,
                         backend=args.backend, keep_checkpoint=args.keep_checkpoint,
                         before_training=_report_plugin_problems, **_options(args))
    except DatasetUnavailable as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2
    if result.records and not args.json:
        _print_summary(result.summary())
    return 0 if result.ok else 1


def cmd_sweep(args) -> int:
    from normbench.tasks import DatasetUnavailable
    from normbench.train import api
    from normbench.train.matrix import EmptySweep

    matrix = dict(norms=args.norms, tasks=args.tasks, models=args.models, variants=args.variants,
                  placements=args.placements, tune=args.tune)
    try:
        if args.dry_run:
            lines = api.sweep_plan(**matrix, seeds=args.seeds, quick=args.quick, steps=args.steps, lr=args.lr,
                                   batch_size=args.batch_size)
            return _print_plan(lines, args.json)
        result = api.sweep(**matrix, before_training=_report_plugin_problems, **_options(args))
    except EmptySweep as exc:
        print(exc, file=sys.stderr)
        return 2
    except DatasetUnavailable as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 2
    if result.records and not args.json:
        _print_summary(result.summary())
    for where, err in result.failures:
        print(f"failed: {where}: {err}", file=sys.stderr)
    return 0 if result.ok else 1


def _print_plan(lines, as_json: bool) -> int:
    """``--dry-run``: one line per planned item (JSON, or key=value pairs) on the document stream."""
    from normbench._stdout import document_stream

    for line in lines:
        print(json.dumps(line) if as_json else " ".join(f"{k}={v}" for k, v in line.items()), file=document_stream())
    return 0

