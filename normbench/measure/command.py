"""CLI subcommands of the measurement area: ``bench`` (``ingest-asv`` is in ``normbench.suites``, above measure and
train, since it ingests accuracy results too)."""

from __future__ import annotations

import argparse
import sys
import time


class _ExtendSplit(argparse.Action):
    """Accept ``--pass fwd bwd``, ``--pass fwd,bwd`` and repeated flags alike."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or [])
        for v in values if isinstance(values, list) else [values]:
            items.extend(x.strip() for x in v.split(",") if x.strip())
        setattr(namespace, self.dest, items)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="time norms (eager, compile, triton, ...) and write kernel records to results/",
        description="Sweep norms x backends x shapes x dtypes x passes with the measurement core and write one "
                    "record per measurement to OUT/kernel/<hardware_id>/<norm>.json. Measurements already in OUT "
                    "are skipped (use --redo to redo them); Ctrl-C keeps everything written so far. Each norm must "
                    "have passed `normbench check` in its current implementation (run automatically and cached; "
                    "--force overrides). Each group of cases runs in a worker process with a time limit, so a "
                    "norm that hangs or crashes is reported by name and the sweep goes on.")
    p.add_argument("--norm", nargs="+", action=_ExtendSplit, metavar="NAME", help="norms (default: all registered)")
    p.add_argument("--backend", nargs="+", action=_ExtendSplit, metavar="B",
                   help="backends: eager, compile, triton, liger, apex, ... (default: every one the norm has)")
    p.add_argument("--dtype", nargs="+", action=_ExtendSplit, metavar="D",
                   help="float32, bfloat16, float16 (default: float32 bfloat16 [+ float16 on CUDA])")
    p.add_argument("--pass", dest="passes", nargs="+", action=_ExtendSplit, metavar="P",
                   help="fwd, bwd, fwd+bwd (default: all three; --quick: fwd fwd+bwd)")
    p.add_argument("--layout", nargs="+", action=_ExtendSplit, metavar="L", help="tokens and/or images")
    p.add_argument("--shape-class", choices=("quick", "llm", "vision", "softmax", "all"), default=None,
                   help="shape grid (default: llm + vision; --quick: quick; softmax: the softmax norms' own set)")
    p.add_argument("--shape", nargs="+", action=_ExtendSplit, metavar="LABEL",
                   help="only these shape labels (see docs/measurement.md)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, float32+bfloat16, fwd and fwd+bwd, few repetitions (minutes on a laptop)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available, else cpu")
    p.add_argument("--timing", nargs="+", action=_ExtendSplit, metavar="T",
                   help="cold (L2 flushed, CUDA only; the default there) and/or hot (the CPU's only timing)")
    p.add_argument("--graphs", action="store_true", help="replay fwd and fwd+bwd as CUDA graphs (launch overhead)")
    p.add_argument("--flush", choices=("zero", "rw"), default="zero",
                   help="cold timing's L2 flush: zero_() of a buffer > L2 (default, as Triton's do_bench) or rw "
                        "(write then read it back, leaving clean lines); recorded as config.l2_flush")
    p.add_argument("--keep-ahead", action="store_true",
                   help="CUDA: queue a spin kernel before each batch of repetitions so small kernels are not timed "
                        "at the host's launch rate; recorded as config.keep_ahead")
    p.add_argument("--mode", nargs="+", action=_ExtendSplit, metavar="M",
                   help="train and/or eval for norms with running statistics (default: both; others: train)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's current setting)")
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.add_argument("--redo", action="store_true", help="re-measure cases already in --out (replaces them)")
    p.add_argument("--force", action="store_true",
                   help="measure norms that have not passed `normbench check` too (their records are flagged "
                        "'forced' and never ranked); without it such norms are refused")
    from normbench.executors import add_arguments

    add_arguments(p)
    p.add_argument("--list", action="store_true", help="print the planned cases and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_bench)


def _cmd_bench(args) -> int:
    import torch

    from normbench.measure.planning import plan
    from normbench.measure.sweep import run_sweep
    from normbench.measure.timers import TimerSettings

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    shapes = None
    if args.shape:
        from normbench.measure.shapes import by_label

        shapes = [by_label(s) for s in args.shape]
    import os

    from normbench.executor import EXECUTOR_ENV

    # On a Ray cluster the cases run on its nodes: this machine need not have their GPU.
    on_ray = (args.executor or os.environ.get(EXECUTOR_ENV) or "").strip().lower() == "ray"
    cases = plan(norms=args.norm, backends=args.backend, dtypes=args.dtype, passes=args.passes,
                 layouts=args.layout, shapes=shapes, quick=args.quick, shape_class=args.shape_class,
                 device=args.device, timings=args.timing, threads=args.threads, graphs=args.graphs,
                 modes=args.mode, flush=args.flush, keep_ahead=args.keep_ahead, here=not on_ray)
    if args.list:
        for c in cases:
            print(c.describe())
        print(f"{len(cases)} cases", file=sys.stderr)
        return 0
    if not cases:
        print("nothing to measure: no norm supports the selected layouts/shapes", file=sys.stderr)
        return 0
    settings = TimerSettings.quick() if args.quick else TimerSettings()
    # Dynamo's warnings stay on: a recompile-limit or graph-break warning is what a fallback looks like
    # (the records say so too: metrics.compile and the fell_back flag).
    from normbench.check import ensure_checked, refusal, stamp
    from normbench.discovery import report_plugin_problems
    from normbench.executor import time_limit
    from normbench.executors import from_args

    report_plugin_problems()
    limit = time_limit(args.time_limit)
    check_limit = time_limit(args.time_limit, check=True)
    t0 = time.perf_counter()
    with from_args(args, preload=("normbench.measure.sweep", "normbench.check")) as ex:
        verdicts = ensure_checked([c.norm for c in cases], ex, check_limit)
        refused = [n for n, v in verdicts.items() if not v.passed and not args.force]
        for name in refused:
            print(f"normbench: {refusal(verdicts[name], 'benchmark')}", file=sys.stderr)
        cases = [c for c in cases if c.norm not in refused]

        def on_record(rec):
            stamp(rec, verdicts[rec["norm"]["name"]], rec["config"]["backend"], forced=args.force)

        s = run_sweep(cases, args.out, force=args.redo, settings=settings, progress=not args.no_progress,
                      executor=ex, time_limit=limit, on_record=on_record)
    wall = time.perf_counter() - t0
    print(f"{s.written} records written, {s.already_done} already in {args.out}, {len(s.skipped)} skipped, "
          f"{len(s.failed)} failed, {len(refused)} norm(s) refused (check not passed) in {wall:.0f}s")
    reasons: dict[str, int] = {}
    for _, reason in s.skipped:
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in sorted(reasons.items()):
        print(f"  skipped {n}: {reason}")
    seen = set()
    for case, err in s.failed:
        key = case.rsplit("/", 2)[0] + err
        if key not in seen:
            seen.add(key)
            print(f"  failed {case}: {err}", file=sys.stderr)
    if s.interrupted:
        print("interrupted; the records written so far are kept (re-run to resume)", file=sys.stderr)
        return 130
    return 1 if s.failed or refused else 0
