"""The ``normbench site build`` command."""

from __future__ import annotations

import sys


def _cmd_build(args) -> int:
    from normbench.site.build import build_site

    cache = False if args.no_cache else (args.cache or True)
    report = build_site(args.results, args.out, docs=args.docs, charts=not args.no_charts, jobs=args.jobs,
                        cache=cache)
    print(report.summary())
    if report.rejected:
        print(f"{len(report.rejected)} rejected record(s)/file(s) (listed on {report.out / 'rejected.html'}):",
              file=sys.stderr)
        for r in report.rejected:
            where = f"{r.path} [{r.index}]" if r.index is not None else r.path
            print(f"  {where} {r.label}: " + "; ".join(r.problems[:3])
                  + (f" (and {len(r.problems) - 3} more)" if len(r.problems) > 3 else ""), file=sys.stderr)
    print(f"open {report.index} (or {report.index.resolve().as_uri()})")
    return 1 if args.strict and report.rejected else 0


def register(subparsers) -> None:
    p = subparsers.add_parser("site", help="the static leaderboard site")
    sub = p.add_subparsers(dest="site_command", metavar="SUBCOMMAND")
    b = sub.add_parser("build", help="build the static leaderboard from the result records")
    b.add_argument("--results", default="results", help="the results directory or one record file (default: results)")
    b.add_argument("--out", default="site", help="output directory, replaced on each build (default: site)")
    b.add_argument("--docs", default=None,
                   help="directory with measurement.md and accuracy.md for the methodology page "
                        "(default: docs/ next to the results directory)")
    b.add_argument("--strict", action="store_true", help="exit 1 when any record is rejected")
    b.add_argument("--no-charts", action="store_true",
                   help="leave the figures out (a quicker build; drawing them is most of a build's time)")
    b.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="render pages in N processes (default: one per CPU; the same bytes as one)")
    b.add_argument("--cache", default=None, metavar="DIR",
                   help="the build cache that makes rebuilds incremental (default: .<out>.cache beside --out; safe "
                        "to delete)")
    b.add_argument("--no-cache", action="store_true", help="build everything, reading and writing no cache")
    b.set_defaults(func=_cmd_build)

    def _usage(args, parser=p) -> int:
        parser.print_help()
        return 2

    p.set_defaults(func=_usage)
