"""``normbench prune``: take accuracy records made by code that has since changed out of a results directory.

An accuracy record names the code it came from: ``config.model_hash`` (the model's source, ``models.model_hash``)
and ``impl_hash`` (the norm's implementation, ``NormSpec.impl_hash``). After a fix to a model or a norm, the old
records are another cell, not the current one: left in ``results/`` they would sit beside the re-run and a reader
could not tell which code produced a number. ``prune`` lists them (``--dry-run``) or removes them; git keeps them.

Only hashes that can be recomputed from the current code are compared, at the torch, Triton and timm versions the record
names (a GPU machine's records are not stale because this machine has another torch); a record of a norm or model this
installation does not have (an uninstalled plugin) is kept and reported, never removed. Recipe changes are not detected
here (the record stores the recipe it ran, not which values were overridden on the command line), with one exception: a
record whose recipe lacks a constructor option the norm now derives from the recipe
(``train.recipes.NORM_KWARGS_FROM_RECIPE``, e.g. PowerNorm's warm-up) ran the norm differently, and is stale. Kernel
records are not touched: ``normbench bench`` re-measures changed code by itself (the id has the hash), and the readers
that rank (the site, ``normbench claims``, the generated docs: ``normbench.results.records_that_count``) flag a record
of changed code ``stale`` when they read it (``results.staleness``): shown, never ranked. A kernel record may be the
only measurement of its machine.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from normbench.results.staleness import stale_reason


@dataclass
class PruneReport:
    stale: list[tuple[str, str]] = field(default_factory=list)  # (record id, why)
    kept_unknown: list[tuple[str, str]] = field(default_factory=list)  # (record id, why it could not be judged)
    files: list[Path] = field(default_factory=list)  # files rewritten (empty on a dry run)


def prune(root: str | Path = "results", dry_run: bool = False) -> PruneReport:
    from normbench.records.store import _locked, atomic_write_bytes, dump_compact, read_record_file, record_files

    rep, cache = PruneReport(), {}
    for path in record_files(root):
        records, problem = read_record_file(path)
        if problem is not None:
            continue  # `normbench validate` reports unreadable files; never touch them here
        keep = []
        for rec in records:
            accuracy = isinstance(rec, dict) and rec.get("kind") == "accuracy"
            why, unknown = stale_reason(rec, cache) if accuracy else (None, None)
            if unknown:
                rep.kept_unknown.append((rec.get("id", "?"), unknown))
            if why:
                rep.stale.append((rec.get("id", "?"), f"{path}: {why}"))
            else:
                keep.append(rec)
        if len(keep) == len(records) or dry_run:
            continue
        with _locked(path.parent):
            if keep:
                atomic_write_bytes(path, dump_compact(keep))
            else:
                path.unlink()
        rep.files.append(path)
    return rep


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "prune", help="remove accuracy records whose model or norm code has changed since they were made",
        description=__doc__.split("\n\n", 1)[1])
    p.add_argument("paths", nargs="*", default=["results"], metavar="PATH",
                   help="results directories (default: results)")
    p.add_argument("--dry-run", action="store_true", help="list the stale records; change nothing")
    p.set_defaults(func=_cmd_prune)


def _cmd_prune(args) -> int:
    rc = 0
    for root in args.paths:
        if not Path(root).exists():
            print(f"{root}: no such results directory", file=sys.stderr)
            rc = 1
            continue
        rep = prune(root, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        by_reason: dict[str, int] = {}
        for _rid, why in rep.stale:
            by_reason[why] = by_reason.get(why, 0) + 1
        for why, n in sorted(by_reason.items()):
            print(f"  {n:5d}  {why}")
        print(f"{root}: {verb} {len(rep.stale)} stale accuracy records"
              + ("" if args.dry_run else f" from {len(rep.files)} files"))
        for rid, why in rep.kept_unknown[:20]:
            print(f"  kept {rid}: {why}", file=sys.stderr)
    return rc
