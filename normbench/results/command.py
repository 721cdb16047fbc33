"""CLI subcommands of the results area: ``migrate`` (records to the current schema and compact files) and ``compare``."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
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


def _cmd_migrate(args) -> int:
    from normbench.results.store import migrate_files

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
