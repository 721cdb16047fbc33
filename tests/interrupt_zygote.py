"""A process that imports normbench once and forks each command the interruption tests run (tests/test_interrupt.py),
so that fifty interruptions do not pay fifty imports of torch. Each command is a fork in a session of its own (its
own process group, as a shell gives it), with the request's environment, working directory and output files, and
runs ``normbench.cli.main`` as the console script does (or, for the pseudo-command ``@lanes``, the suites'
training lanes as ASV runs them). Protocol: one JSON request a line on stdin
(``{"args", "env", "cwd", "stdout", "stderr"}``), answered ``{"started": pid}``; ``{"exited": pid, "rc": code}``
when a command ends (a signal's death: minus its number)."""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys

PRELOAD = ("normbench.cli", "normbench.site.build", "normbench.site.pages", "normbench.site.aggregate",
           "normbench.results.counted", "normbench.results.staleness", "normbench.claims.evaluation",
           "normbench.best.command", "normbench.gendocs", "normbench.measure.sweep", "normbench.measure.command",
           "normbench.train.api", "normbench.train.command", "normbench.accuracy_suite", "normbench.executor",
           "normbench.executor_choice", "pandas", "jinja2")


def _child(req: dict) -> int:
    os.setsid()
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # what a fresh interpreter has
    if req["args"][0] == "@lanes":
        return _lanes(*req["args"][1:])
    sys.argv = ["normbench", *req["args"]]
    from normbench.cli import main

    try:
        rc = main()   # as the console script calls it (sys.argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return int(rc or 0)


def _lanes(out: str, norms: str, cells: str) -> int:
    """The suites' training lanes (``suites.train_cells``, two lanes) as ASV's set-up calls them: a library call in
    a process with the interpreter's own signal handlers. Exit 130 when interrupted, as a command's."""
    from normbench import accuracy_suite as suites

    try:
        res = suites.train_cells([norms.split(","), cells.split(",")], out, env_prefix="NORMBENCH_TEST_LANES", jobs=2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(json.dumps(res["skipped"]), file=sys.stderr)
    return 0 if res["results"] and not res["skipped"] else 1


def serve() -> None:
    for mod in PRELOAD:
        importlib.import_module(mod)
    from normbench.cli import build_parser
    from normbench.discovery import REGISTRY

    build_parser()
    REGISTRY.specs
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.02)
        if ready:
            line = sys.stdin.readline()
            if not line:
                return
            req = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(req)
                except BaseException:  # noqa: BLE001 - what escaped main is the test's to see
                    import traceback

                    traceback.print_exc()
                finally:
                    try:
                        import atexit

                        atexit._run_exitfuncs()   # as the interpreter's exit would (multiprocessing's among them)
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            out.write(json.dumps({"started": pid}) + "\n")
            out.flush()
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            out.write(json.dumps({"exited": pid, "rc": os.waitstatus_to_exitcode(status)}) + "\n")
            out.flush()


if __name__ == "__main__":
    serve()
