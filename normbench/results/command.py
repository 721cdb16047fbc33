"""CLI subcommands of the results area: ``validate``, ``migrate`` (records to the current schema and compact files),
``compare`` and ``prune``."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="check result records (files or directories); exit 1 on any invalid record")
    p.add_argument("paths", nargs="+", metavar="PATH", help="record files or directories (e.g. results)")
    p.add_argument("--quiet", action="store_true", help="print problems only")
    p.set_defaults(func=_cmd_validate)
    p = subparsers.add_parser(
        "migrate", help="rewrite record files in the current schema (v2) and the compact .json.gz format",
        description="Upgrade every record under PATH to the current schema (same ids; impl_hash \"\" = unknown, "
                    "pre-v2; flags derived from each record's data) and store it in the compact format "
                    "(<norm>.json.gz, provenance once per run). Invalid records are kept whole; nothing is dropped.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="results directories or record files")
    p.set_defaults(func=_cmd_migrate)

    from normbench.results import compare, prune

    compare.register(subparsers)
    prune.register(subparsers)


def _cmd_validate(args) -> int:
    from pathlib import Path

    from normbench.records.store import scan
    from normbench.results.staleness import stale_reason

    bad = 0
    total = 0
    files = set()
    stale: dict[str, int] = {}
    cache: dict = {}
    for root in args.paths:
        if not Path(root).exists():
            print(f"{root}: no such file or directory", file=sys.stderr)
            bad += 1
            continue
        for s in scan(root):
            files.add(str(s.path))
            for p in s.problems:
                bad += 1
                print(f"INVALID {s.path}: {s.label + ': ' if s.label else ''}{p}")
            if not s.problems:
                total += 1
                if stale_reason(s.record, cache)[0]:
                    stale[s.record["kind"]] = stale.get(s.record["kind"], 0) + 1
    if not args.quiet or bad:
        print(f"{total} valid record(s) in {len(files)} file(s); {bad} problem(s)")
    if stale and not args.quiet:
        # Valid, but made by code that has since changed: worth knowing, not a validation failure.
        print("made by code that has since changed (valid; not ranked): "
              + ", ".join(f"{n} {kind}" for kind, n in sorted(stale.items()))
              + (" (`normbench prune` removes the accuracy ones)" if "accuracy" in stale else "")
              + (" (`normbench bench` on their machine re-measures the kernel ones)" if "kernel" in stale else ""))
    return 1 if bad else 0


def _cmd_migrate(args) -> int:
    from normbench.records.store import migrate_files

    rc = 0
    for root in args.paths:
        try:
            rep = migrate_files(root)
        except FileNotFoundError as exc:
            print(exc, file=sys.stderr)
            rc = 1
            continue
        print(f"{root}: {rep.records} records in {len(rep.files)} compact files, {rep.upgraded} upgraded to the "
              "current schema")
        for item in rep.kept_invalid:
            print(f"  kept as is: {item}", file=sys.stderr)
            rc = 1
    return rc
