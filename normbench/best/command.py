"""``normbench best``: per site and regime of a model (or one shape), the implementation to use here."""

from __future__ import annotations

import json
import shlex
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "best", help="which implementation to use: per model site and regime (or shape), a winner, a tie, or why not",
        description="Reads the records that count (never measures) and answers, per norm site and regime of a "
                    "catalog model (or for one --shape), dtype, pass and hardware: the winner with its margin over "
                    "the runner-up and that margin's interval (paired, from the head-to-head timing), or 'tie' "
                    "(interval inside [1/1.1, 1.1]) and what ties, or 'undecided'. Flagged records and backends "
                    "whose error against float64 exceeds the dtype's tolerance never win; missing and flagged "
                    "cells come with the command that (re-)measures them. See docs/measurement.md, 'Which "
                    "implementation'.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", metavar="NAME", help="a catalog model (`normbench models`)")
    g.add_argument("--model-config", metavar="CONFIG_JSON", help="a Hugging Face config.json not in the catalog")
    g.add_argument("--shape", metavar="SHAPE", help="one shape: a record's shape label, 140x4096, images:NxCxHxW")
    p.add_argument("--norm", nargs="+", metavar="NAME", help="only these norms (with --shape: the norms to answer)")
    p.add_argument("--regime", nargs="+", metavar="R", help="only these regimes")
    p.add_argument("--quick", action="store_true", help="only the regimes `bench --model --quick` measures")
    p.add_argument("--device", metavar="HW", help="hardware id (e.g. cpu-intel-xeon-2c; default: each one found)")
    p.add_argument("--dtype", nargs="+", metavar="D", help="dtypes (default: those the records hold)")
    p.add_argument("--pass", dest="passes", nargs="+", metavar="P", help="passes (default: those the records hold)")
    p.add_argument("--results", default="results", help="results directory (default: results)")
    p.add_argument("--json", action="store_true", help="the selection policy as JSON (schema: --schema)")
    p.add_argument("--schema", action="store_true", help="print the JSON Schema of --json and exit")
    p.set_defaults(func=_cmd_best)


def _cmd_best(args) -> int:
    from normbench import best, catalog
    from normbench._stdout import document_stream

    if args.schema:
        print(json.dumps(best.SCHEMA, indent=1), file=document_stream())
        return 0
    if not (args.model or args.model_config or args.shape):
        raise ValueError("name a --model, a --model-config or a --shape")
    from normbench.results import records_that_count

    records = records_that_count(args.results, kind="kernel").records
    if args.shape:
        targets = best.shape_targets(records, args.shape, args.norm)
        about = {"model": None, "shape": args.shape}
        model_arg = ""
    else:
        model = catalog.from_config_file(args.model_config) if args.model_config else catalog.get(args.model)
        targets = [t for t in best.model_targets(model, args.regime, quick=args.quick)
                   if not args.norm or t["norm"] in args.norm]
        about = {"model": model.key, "shape": None}
        # shell words (``best._command`` splits them as a shell would): a path with a space stays one argument
        model_arg = (f"--model-config {shlex.quote(args.model_config)}" if args.model_config
                     else f"--model {shlex.quote(model.key)}")
    rows = best.answer(records, targets, hardware=args.device, dtypes=args.dtype, passes=args.passes,
                       model_arg=model_arg)
    if args.json:
        print(json.dumps(best.to_policy(rows, about), indent=1), file=document_stream())
        return 0
    cur = None
    for r in sorted(rows, key=lambda r: (r["hardware_id"], r["dtype"], r["pass"])):  # stable: sites stay in order
        head = (r["hardware_id"], r["dtype"], r["pass"])
        if head != cur:
            cur = head
            print(f"\n{about['model'] or about['shape']} on {r['hardware_id']}, {r['dtype']}, {r['pass']}:")
        where = f"{r['site']} / {r['regime']}" if r["site"] else r["norm"]
        shape = "x".join(map(str, r["shape"]))
        print(f"  {where:<44} {r['norm']:<12} {shape:<16} {best.headline(r)}")
        for b in r.get("backends") or ():
            print(f"      {best.backend_text(b)}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("\n" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)
    return 0
