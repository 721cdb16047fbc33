"""CLI subcommands of the measurement area: ``bench`` and ``models`` (``ingest-asv`` is in ``normbench.accuracy_suite``,
above measure and train, since it ingests accuracy results too)."""

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
    p.add_argument("--shape", nargs="+", action=_ExtendSplit, metavar="SHAPE",
                   help="grid labels (llm-4096x4096) or free-form shapes: 140x4096 or 1x140x4096 (tokens: leading "
                        "dims x C), images:32x256x56x56 (see docs/measurement.md)")
    p.add_argument("--model", metavar="NAME",
                   help="measure every norm site of a catalog model (`normbench models`) in its prefill and decode "
                        "regimes, backends head to head (interleaved, paired); default pass: fwd")
    p.add_argument("--model-config", metavar="CONFIG_JSON",
                   help="as --model, for a model not in the catalog: its sites derived from a Hugging Face "
                        "config.json")
    p.add_argument("--regime", nargs="+", action=_ExtendSplit, metavar="R",
                   help="with --model: only these regimes (prefill-1x2048, decode-8, ...)")
    p.add_argument("--interleave", dest="interleave", action="store_true", default=True,
                   help="(the default) time the backends of each norm, shape and dtype head to head whenever two "
                        "or more are measured there: interleaved rounds in a random order, on the same inputs, "
                        "paired verdicts in metrics.paired; `normbench best` names a winner only from these")
    p.add_argument("--no-interleave", dest="interleave", action="store_false",
                   help="time each backend apart (its own rounds); `best` then answers 'undecided: measured apart' "
                        "wherever two backends compete")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, float32+bfloat16, fwd and fwd+bwd, few repetitions (minutes on a laptop)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda if available, else cpu")
    p.add_argument("--timing", nargs="+", action=_ExtendSplit, metavar="T",
                   help="cold (L2 flushed, CUDA only; the default there) and/or hot (the CPU's only timing)")
    p.add_argument("--graphs", action="store_true", help="replay fwd and fwd+bwd as CUDA graphs (launch overhead)")
    p.add_argument("--flush", choices=("zero", "rw"), default="zero",
                   help="cold timing's L2 flush: zero_() of a buffer > L2 (default, as Triton's do_bench) or rw "
                        "(write then read it back, leaving clean lines); recorded as config.l2_flush")
    p.add_argument("--keep-ahead", action=argparse.BooleanOptionalAction, default=True,
                   help="CUDA (default on): queue a calibrated spin before each batch of repetitions and check that "
                        "the host enqueued the batch while it ran, so the events time the GPU and not the host's "
                        "launches (a timing that could not be kept ahead is flagged host_bound); recorded as "
                        "config.keep_ahead. --no-keep-ahead times as before (the host's time may be in the events)")
    p.add_argument("--mode", nargs="+", action=_ExtendSplit, metavar="M",
                   help="train and/or eval for norms with running statistics (default: both; others: train)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's current setting)")
    p.add_argument("--out", default="results", help="results directory (default: results)")
    p.add_argument("--redo", action="store_true", help="re-measure cases already in --out (replaces them)")
    p.add_argument("--force", action="store_true",
                   help="measure norms that have not passed `normbench check` too (their records are flagged "
                        "'forced' and never ranked); without it such norms are refused")
    from normbench.executor_choice import add_arguments

    add_arguments(p)
    p.add_argument("--list", action="store_true", help="print the planned cases and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_bench)


    p = subparsers.add_parser(
        "models", help="the model catalog: real models' norm sites (width, norm, eps, count, source)",
        description="Every catalog model's norm sites (normbench/catalog/models.json): the zoo norm that computes "
                    "each, its width, eps, affine or not, how often it runs per token, and the config.json keys "
                    "each value comes from (config_url).")
    p.add_argument("names", nargs="*", metavar="NAME", help="models (default: all)")
    p.add_argument("--model-config", metavar="CONFIG_JSON", help="derive the sites of a Hugging Face config.json")
    p.add_argument("--json", action="store_true", help="machine-readable output (sites and each regime's shapes)")
    p.set_defaults(func=_cmd_models)


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
        from normbench.measure.shapes import parse_shape

        shapes = list(dict.fromkeys(parse_shape(s) for s in args.shape))
    if args.model or args.model_config:
        if args.shape:
            raise ValueError("--model and --shape exclude each other")
        cases = _model_cases(args)
    import os

    from normbench.executor import EXECUTOR_ENV

    # On a Ray cluster the cases run on its nodes: this machine need not have their GPU.
    on_ray = (args.executor or os.environ.get(EXECUTOR_ENV) or "").strip().lower() == "ray"
    if not (args.model or args.model_config):
        if shapes and args.norm:
            _check_layouts(args.norm, shapes)
        cases = plan(norms=args.norm, backends=args.backend, dtypes=args.dtype, passes=args.passes,
                     layouts=args.layout, shapes=shapes, quick=args.quick, shape_class=args.shape_class,
                     device=args.device, timings=args.timing, threads=args.threads, graphs=args.graphs,
                     modes=args.mode, flush=args.flush, keep_ahead=args.keep_ahead, here=not on_ray)
    if (shapes or args.model or args.model_config) and cases and not on_ray:
        _check_memory(cases, together=args.interleave)
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
    from normbench.check import device_kind, ensure_checked, refusal, stamp
    from normbench.discovery import report_plugin_problems
    from normbench.executor import time_limit
    from normbench.executor_choice import from_args
    from normbench.measure.baselines import GATE

    report_plugin_problems()
    limit = time_limit(args.time_limit)
    check_limit = time_limit(args.time_limit, check=True)
    t0 = time.perf_counter()
    with from_args(args, preload=("normbench.measure.sweep", "normbench.check")) as ex:
        # Each backend is checked on the device kind it runs on; one that failed refuses only its own cases.
        verdicts = ensure_checked([(c.norm, c.backend, c.device) for c in cases], ex, check_limit, provider=GATE)
        refused = {} if args.force else {
            (c.norm, c.backend, device_kind(c.device)): verdicts[c.norm].verdict(c.backend, c.device)
            for c in cases if verdicts[c.norm].refused(c.backend, c.device)}
        for msg in dict.fromkeys(refusal(v, "benchmark") for v in refused.values()):  # a contract: once a norm
            print(f"normbench: {msg}", file=sys.stderr)
        # "Not available here" (a backend that does not run on this device kind, or cannot run here) is skipped
        # with its reason, like the core's own skips: no failure.
        absent = [(c, v.detail) for c in cases if (v := verdicts[c.norm].verdict(c.backend, c.device)).status
                  == "unavailable"]
        cases = [c for c in cases if (c.norm, c.backend, device_kind(c.device)) not in refused
                 and verdicts[c.norm].verdict(c.backend, c.device).status != "unavailable"]

        def on_record(rec):
            stamp(rec, verdicts[rec["norm"]["name"]], rec["config"]["backend"], forced=args.force)

        s = run_sweep(cases, args.out, force=args.redo, settings=settings, progress=not args.no_progress,
                      executor=ex, time_limit=limit, on_record=on_record,
                      interleave=args.interleave)
    wall = time.perf_counter() - t0
    s.skipped += [(c.describe(), why) for c, why in absent]
    print(f"{s.written} records written, {s.already_done} already in {args.out}, {len(s.skipped)} skipped, "
          f"{len(s.failed)} failed, {len(refused)} backend(s) refused (check not passed) in {wall:.0f}s")
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


def _check_layouts(norms, shapes) -> None:
    """A named norm that supports none of the asked shapes' layouts is an error (not a silent empty plan)."""
    from normbench.discovery import REGISTRY

    layouts = {s.layout for s in shapes}
    for n in norms:
        spec = REGISTRY.get(n)
        if not layouts & set(spec.layouts):
            raise ValueError(f"{spec.name} does not support the {' or '.join(sorted(layouts))} layout "
                             f"(it has {', '.join(spec.layouts)}); nothing was measured")


def _check_memory(cases, together: bool = False) -> None:
    """Print the largest case's memory estimate; refuse (before anything is allocated) a case that would not fit."""
    from normbench.measure.memory import free_bytes
    from normbench.measure.planning import memory_estimates, too_big

    free = free_bytes(cases[0].device)
    est = memory_estimates(cases, together)
    what, b = est[0]
    room = f" of {free / 2**30:.2f} GiB free" if free is not None else " (free memory unknown)"
    print(f"memory: the largest case, {what}, needs about {b / 2**30:.3f} GiB (float64 reference included){room}",
          file=sys.stderr)
    problems = too_big(cases, free, together)
    if problems:
        raise ValueError("too big for this device's free memory, nothing was measured:\n  " + "\n  ".join(problems))


def _load_model(args):
    from normbench import catalog

    if args.model and args.model_config:
        raise ValueError("--model and --model-config exclude each other")
    return catalog.from_config_file(args.model_config) if args.model_config else catalog.get(args.model)


def model_plan(model, *, quick=False, norms=None, backends=None, dtypes=None, passes=None, regimes=None,
               device=None, threads=None, timings=None):
    """The cases measuring every site of ``model`` (a ``normbench.catalog.Model``) in its regimes: one per distinct
    (norm, shape), so sites sharing a shape are measured once. ``norms`` keeps only the sites those norms compute.
    Default pass: fwd (prefill and decode are inference)."""
    from normbench import catalog
    from normbench.discovery import REGISTRY
    from normbench.measure.planning import plan
    from normbench.measure.shapes import shape_from_dims

    if norms:
        norms = [REGISTRY.get(n).name for n in norms]
    shapes = catalog.site_shapes(model, quick=quick, regime_names=regimes)
    if regimes:
        known = {r for r, *_ in catalog.REGIMES[model.family]}
        unknown = [r for r in regimes if r not in known]
        if unknown:
            raise ValueError(f"unknown regime(s) {', '.join(unknown)} for {model.key}; it has {', '.join(known)}")
    wanted: dict[tuple, object] = {}
    for ss in shapes:
        if norms and ss.norm not in norms:
            continue
        shape = shape_from_dims(ss.layout, ss.dims, f"{model.key} {ss.site.name}, {ss.regime}")
        wanted.setdefault((ss.norm, shape.label), shape)
    cases, seen = [], set()
    for (norm, _), shape in wanted.items():
        for c in plan(norms=[norm], backends=backends, dtypes=dtypes, passes=passes or ("fwd",), shapes=[shape],
                      quick=quick, device=device, threads=threads, timings=timings):
            key = (c.norm, c.backend, c.shape.label, c.dtype, c.pass_, c.mode)
            if key not in seen:
                seen.add(key)
                cases.append(c)
    return cases


def _model_cases(args):
    model = _load_model(args)
    if args.norm:
        used = {s.norm for s in model.sites}
        unused = [n for n in args.norm if n not in used]
        if len(unused) == len(args.norm):
            raise ValueError(f"{model.key} has no site computed by {', '.join(args.norm)}; its sites use "
                             f"{', '.join(sorted(used))}")
    return model_plan(model, quick=args.quick, norms=args.norm, backends=args.backend, dtypes=args.dtype,
                      passes=args.passes, regimes=args.regime, device=args.device, threads=args.threads,
                      timings=args.timing)


def _cmd_models(args) -> int:
    import json

    from normbench import catalog
    from normbench._stdout import document_stream

    ms = [catalog.from_config_file(args.model_config)] if args.model_config else (
        [catalog.get(n) for n in args.names] if args.names else catalog.models())
    if args.json:
        out = []
        for m in ms:
            d = m.to_dict()
            d["regimes"] = [{"regime": ss.regime, "site": ss.site.name, "norm": ss.norm, "layout": ss.layout,
                             "shape": list(ss.dims)} for ss in catalog.site_shapes(m)]
            out.append(d)
        print(json.dumps({"models": out, "regimes": {f: [{"regime": n, "batch": b, "sequence": q, "quick": k}
                                                          for n, b, q, k in v]
                                                      for f, v in catalog.REGIMES.items()}}, indent=1),
              file=document_stream())
        return 0
    for m in ms:
        print(f"{m.key}  {m.name} ({m.family}, {m.architecture})  {m.config_url}")
        if m.note:
            print(f"  {m.note}")
        print("  config: " + ", ".join(f"{k}={v}" for k, v in m.config.items()))
        for s in m.sites:
            extra = f" x{s.rows_per_token} rows/token" if s.rows_per_token != 1 else ""
            extra += f", {s.tokens} tokens" if s.tokens else ""
            extra += f", {s.spatial[0]}x{s.spatial[1]}" if s.spatial else ""
            eps = "eps ?" if s.eps is None else f"eps {s.eps:g}"
            src = ", ".join(f"{k}: {v}" for k, v in s.source.items())
            print(f"  {s.name:<30} {s.norm:<14} width {s.width:<6} x{s.count:<4} {eps:<11} "
                  f"{'affine' if s.affine else 'no affine'}{extra}   [{src}]")
        regs = ", ".join(n for n, *_ in catalog.regimes(m.family))
        print(f"  regimes: {regs}\n")
    print(f"{len(ms)} model(s); `normbench bench --model NAME` measures one, `normbench best --model NAME` answers")
    return 0


