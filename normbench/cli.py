"""The ``normbench`` command: list, check, and the subcommands each area registers."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# Each area owns a module with ``register(subparsers)`` adding its subcommands; the handler is
# stored as ``func`` on the parser defaults and returns the exit code.
COMMAND_MODULES = (
    "normbench.measure.command",   # bench, validate
    "normbench.train.command",     # tasks, train, sweep
    "normbench.site.command",      # site build
    "normbench.results.command",   # migrate, compare
)


def _cmd_list(args) -> int:
    from normbench.registry import REGISTRY

    specs = [REGISTRY.get(n) for n in REGISTRY.names()]
    errors = REGISTRY.errors
    if args.json:
        out = {
            "norms": [s.to_dict() for s in specs],
            "errors": [{"name": e.name, "source": e.source, "error": e.error} for e in errors],
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    rows = [("name", "family", "kind", "layouts", "backends", "paper")]
    for s in specs:
        paper = f"{s.paper.authors.split(',')[0]} {s.paper.year}: {s.paper.title}"
        if len(paper) > 60:
            paper = paper[:57] + "..."
        rows.append((s.name, s.family, s.kind, ",".join(s.layouts), ",".join(s.backends), paper))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print(f"\n{len(specs)} norms", end="")
    plugins = sorted({s.package for s in specs if s.package != "normbench"})
    print(f" ({len(plugins)} plugin package(s): {', '.join(plugins)})" if plugins else "")
    for e in errors:
        print(f"plugin {e.name!r} from {e.source} failed to load and was skipped: {e.error}", file=sys.stderr)
    return 0


def _cmd_check(args) -> int:
    from normbench.check import run_checks

    return run_checks(args.names, all_norms=args.all or not args.names, as_json=args.json)


def build_parser() -> argparse.ArgumentParser:
    from normbench import __version__

    parser = argparse.ArgumentParser(
        prog="normbench", description="Benchmarks and a leaderboard for normalization layers."
    )
    parser.add_argument("--version", action="version", version=f"normbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("list", help="list every registered norm (built-in and plugins)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("check", help="run the contract checks on norms (exit 1 if any fails)")
    p.add_argument("names", nargs="*", metavar="NAME", help="norms to check (default: all)")
    p.add_argument("--all", action="store_true", help="check every registered norm")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_check)
    for mod_name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name and mod_name.startswith(exc.name):
                continue  # that area is not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; results already written are kept", file=sys.stderr)
        return 130
    except (KeyError, ValueError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"normbench: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
