"""The ``normbench`` command: list, check, and the subcommands each area registers."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from normbench.discovery import report_plugin_problems

# Each area owns a module with ``register(subparsers)`` adding its subcommands; the handler is
# stored as ``func`` on the parser defaults and returns the exit code.
COMMAND_MODULES = (
    "normbench.measure.command",   # bench, models
    "normbench.policy_bench",      # bench --end-to-end (after bench: it adds to bench's options)
    "normbench.train.command",     # tasks, train, sweep
    "normbench.site.command",      # site build
    "normbench.claims.command",    # claims
    "normbench.best.command",      # best (which implementation, per model site or shape)
    "normbench.gendocs",           # docs
    "normbench.results.command",   # validate, migrate, compare, prune
    "normbench.campaign",          # campaign (GPU machines)
    "normbench.accuracy_suite",    # ingest-asv (the ASV suite's kernel and accuracy results)
)


def _cmd_list(args) -> int:
    from normbench._stdout import document_stream
    from normbench.discovery import REGISTRY

    specs = [REGISTRY.get(n) for n in REGISTRY.names()]
    errors = REGISTRY.errors
    info = REGISTRY.info
    if args.json:
        norms = []
        for s in specs:
            d = s.to_dict()
            i = info.get(s.name)
            d["source"] = i.source if i else None
            d["builtin"] = bool(i and i.builtin)
            d["import_s"] = round(i.load_s, 3) if i else None
            norms.append(d)
        out = {
            "norms": norms,
            "plugins": REGISTRY.loaded_plugins(),
            "errors": [{"name": e.name, "package": e.package, "source": e.source, "error": e.error} for e in errors],
        }
        print(json.dumps(out, indent=2, ensure_ascii=False), file=document_stream())
        report_plugin_problems()
        return 0
    report_plugin_problems()
    rows = [("name", "family", "kind", "layouts", "backends", "package", "source", "paper")]
    for s in specs:
        paper = f"{s.paper.authors.split(',')[0]} {s.paper.year}: {s.paper.title}"
        if len(paper) > 50:
            paper = paper[:47] + "..."
        i = info.get(s.name)
        source = "built-in" if i is None or i.builtin else i.source
        rows.append((s.name, s.family, s.kind, ",".join(s.layouts), ",".join(s.backends),
                     f"{s.package} {s.package_version}".strip(), source, paper))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    print(f"\n{len(specs)} norms", end="")
    plugins = REGISTRY.loaded_plugins()
    print(f" ({len(plugins)} plugin package(s): {', '.join(f'{k} {v}' for k, v in plugins.items())})"
          if plugins else "")
    return 0


def _cmd_check(args) -> int:
    from normbench.check import run_checks
    from normbench.executor import time_limit
    from normbench.executor_choice import from_args
    from normbench.measure.baselines import GATE

    report_plugin_problems(errors=False)  # check reports load errors itself, first, as failures
    with from_args(args, preload=("normbench.check",)) as ex:
        return run_checks(args.names, all_norms=args.all or not args.names, as_json=args.json, executor=ex,
                          time_limit=time_limit(args.time_limit, check=True), device=args.device, provider=GATE)


def build_parser() -> argparse.ArgumentParser:
    from normbench import __version__
    from normbench.executor_choice import add_arguments as add_executor_arguments

    parser = argparse.ArgumentParser(
        prog="normbench", description="Benchmarks and a leaderboard for normalization layers."
    )
    parser.add_argument("--version", action="version", version=f"normbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("list", help="list every registered norm (built-in and plugins)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("check", help="run the contract checks on norms and check each backend against eager on the "
                                     "devices it runs on (exit 1 if any fails)")
    p.add_argument("names", nargs="*", metavar="NAME", help="norms to check (default: all)")
    p.add_argument("--all", action="store_true", help="check every registered norm")
    p.add_argument("--json", action="store_true", help="machine-readable output (stdout holds only the JSON)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="check each backend against eager on this kind of device (auto: every kind it declares; "
                        "one this machine lacks is 'not available here', not a failure; an explicit kind this "
                        "machine lacks is an error). The norm's own contract always runs, on the CPU")
    add_executor_arguments(p)
    p.set_defaults(func=_cmd_check)
    for mod_name in COMMAND_MODULES:
        # every area is built: a command module that fails to import is an error to see, never a command that
        # silently vanishes (an "unrecognized arguments" error would hide the real cause)
        importlib.import_module(mod_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from normbench.processes import exit_stopped, interruptible

    # SIGTERM (``kill``, a CI runner's timeout) takes the Ctrl-C path: what is written is kept, and worker processes
    # are stopped instead of left timing as orphans; a repeated signal does not cut that short
    # (processes/interruption.py).
    # argv None: run as the program (the console script, ``python -m normbench.cli``), which ends with this call.
    with interruptible(program=argv is None):
        rc = _parse_and_run(argv)
    if argv is None:
        exit_stopped(rc)   # interrupted: out now, without the interpreter's seconds of tearing torch down
    return rc


def _parse_and_run(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return _run(args)


#: commands whose records carry provenance's git commit: read when the command starts (it is cached per process), so a
#: commit made while they run is not what their records name
RECORDING = frozenset({"bench", "train", "sweep", "campaign", "ingest-asv"})


def _run(args) -> int:
    from normbench.processes import WorkerDied

    if getattr(args, "command", None) in RECORDING:
        from normbench.records.provenance import git_commit

        git_commit()
    try:
        if getattr(args, "json", False):
            from normbench._stdout import machine_readable

            with machine_readable():
                return int(args.func(args) or 0)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; results already written are kept", file=sys.stderr)
        return 130
    except WorkerDied as exc:
        print(f"normbench: error: {exc}", file=sys.stderr)
        return 1
    except (KeyError, ValueError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"normbench: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
