"""``normbench bench --model NAME --end-to-end``: does ``best``'s policy make the model faster? Measured, not assumed.

This module sits above the measuring code and the readers (docs/architecture.md): it reads the records that count,
asks ``normbench.best`` for the model's policy on this machine (or takes ``--policy FILE``), builds the model
(``normbench.measure.endtoend.build``), applies the policy to a copy with ``normbench.apply_policy`` and times the
two whole steps head to head (``endtoend.measure``), then writes one ``endtoend`` record per regime and pass.
"""

from __future__ import annotations

import json
import sys


def register(subparsers) -> None:
    """Add ``--end-to-end`` and its options to ``bench`` (registered by ``normbench.measure.command``)."""
    bench = subparsers.choices.get("bench")
    if bench is None:
        return
    g = bench.add_argument_group("end to end (with --model)")
    g.add_argument("--end-to-end", action="store_true",
                   help="time the model's whole forward (and forward+backward) at a prefill and a decode shape with "
                        "its own norm modules and with `best`'s policy applied (normbench.apply_policy), "
                        "interleaved and paired, with the norm share of each step from torch.profiler; writes "
                        "endtoend records (docs/measurement.md, 'End to end')")
    g.add_argument("--policy", metavar="POLICY_JSON",
                   help="the policy to apply (`normbench best --model NAME --json`); default: best's answer from "
                        "the records in --out for this machine")
    g.add_argument("--e2e-layers", type=int, default=2, metavar="N", help="layers of the built model (default 2)")
    g.add_argument("--e2e-prefill", default="1x128", metavar="BxT",
                   help="the prefill step: sequences x tokens (default 1x128)")
    g.add_argument("--e2e-decode", default="8x128", metavar="BxCONTEXT",
                   help="the decode step: sequences x cached positions, one new token each (default 8x128)")
    plain = bench.get_default("func")

    def dispatch(args):
        return _cmd_end_to_end(args) if args.end_to_end else plain(args)

    bench.set_defaults(func=dispatch)


def _pair(text: str, what: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"{what} must be BxN (two positive integers, e.g. 1x128), got {text!r}") from None
    if a < 1 or b < 1:
        raise ValueError(f"{what} must be BxN with both at least 1, got {text!r}")
    return a, b


def policy_for(model, results: str, hardware_id: str) -> dict:
    """``normbench best --model KEY --device HW --json`` on the records that count in ``results``."""
    from normbench import best
    from normbench.results import records_that_count

    records = records_that_count(results, kind="kernel").records
    rows = best.answer(records, best.model_targets(model), hardware=hardware_id, model_arg=f"--model {model.key}")
    return best.to_policy(rows, {"model": model.key, "shape": None})


def _policy_meta(doc: dict, source: str, hardware_id: str) -> dict:
    """What an endtoend record says of its policy: where it came from and what it chose (the evidence's ids)."""
    chosen = [p for p in doc.get("policy") or () if p.get("backend")]
    return {"source": source, "hardware_id": hardware_id,
            "choices": sorted({(p["norm"], p["backend"]) for p in chosen}),
            "evidence": sorted({i for p in chosen for i in p.get("evidence") or ()}),
            "answered": len(chosen), "entries": len(doc.get("policy") or ())}


def _cmd_end_to_end(args) -> int:
    import torch

    from normbench import catalog
    from normbench.measure import endtoend
    from normbench.policy import apply_policy as apply
    from normbench.policy import restore
    from normbench.records.provenance import hardware, hardware_id, provenance
    from normbench.records.store import write_records

    if not args.model:
        raise ValueError("--end-to-end needs --model NAME (a catalog model: `normbench models`)")
    if getattr(args, "device", None) not in (None, "cpu"):
        raise ValueError("--end-to-end runs on the CPU in this version (--device cpu)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    model = catalog.get(args.model)
    hw = hardware_id(hardware("cpu"))
    if args.policy:
        with open(args.policy, encoding="utf-8") as f:
            doc = json.load(f)
        source = args.policy
    else:
        doc = policy_for(model, args.out, hw)
        source = f"normbench best --model {model.key} --device {hw} --json (records in {args.out})"
    meta = _policy_meta(doc, source, hw)
    if not meta["answered"]:
        print(f"normbench: the policy for {model.key} on {hw} names no backend anywhere (every answer undecided, "
              f"flagged or missing): nothing to apply. Measure it first: normbench bench --model {model.key} "
              "--quick", file=sys.stderr)
        return 1
    pb, pt = _pair(args.e2e_prefill, "--e2e-prefill")
    db, dc = _pair(args.e2e_decode, "--e2e-decode")
    steps = [endtoend.Step(f"prefill-{pb}x{pt}", pb, pt, 0), endtoend.Step(f"decode-{db}", db, 1, dc)]
    passes = args.passes or ["fwd", "fwd+bwd"]
    built = endtoend.build(model.key, layers=args.e2e_layers)
    print(f"{model.key}: {built.architecture}, {args.e2e_layers} layers at the catalog's norm widths; policy: "
          f"{', '.join(f'{n} -> {b}' for n, b in meta['choices'])}", file=sys.stderr)
    results = endtoend.measure(built, doc, steps, passes, apply=apply, restore=restore,
                               log=lambda m: print(m, file=sys.stderr))
    prov = provenance(device="cpu")
    recs = [endtoend.record(m, built, meta, prov) for m in results]
    paths = write_records(recs, args.out)
    for r in recs:
        flags = f" [{', '.join(r['flags'])}]" if r["flags"] else ""
        p = r["metrics"]["paired"]
        print(f"{r['config']['regime']} {r['config']['pass']}: whole step x{r['metrics']['speedup']:.3f} with the "
              f"policy (policy/original {p['ratio']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}], {p['verdict']}, "
              f"n={p['n']}){flags}")
    print(f"{len(recs)} endtoend records written to {', '.join(sorted(map(str, paths)))}", file=sys.stderr)
    return 0
