"""``cli.COMMAND_MODULES`` says which commands each module registers: each line's comment names exactly the commands
that module adds to the ``normbench`` parser (``site build``: a command and its subcommand; ``bench --end-to-end``: an
option added to an earlier module's command), so the list reads true as areas gain or move commands."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re

from normbench import cli


def _comments() -> dict[str, list[str]]:
    """Each module of ``COMMAND_MODULES`` -> the items its comment names (the text before any parenthesis)."""
    src = inspect.getsource(cli)
    block = src[src.index("COMMAND_MODULES = ("):]
    block = block[:block.index("\n)\n")]
    return {m.group(1): [w.strip() for w in m.group(2).split("(")[0].split(",") if w.strip()]
            for m in re.finditer(r'^\s*"([\w.]+)",\s*#\s*(.+)$', block, re.M)}


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def _subcommands(p: argparse.ArgumentParser) -> set[str]:
    return {n for a in p._actions if isinstance(a, argparse._SubParsersAction) for n in a.choices}


def test_each_command_module_comment_names_the_commands_it_registers():
    comments = _comments()
    assert list(comments) == list(cli.COMMAND_MODULES)
    sub = argparse.ArgumentParser().add_subparsers()
    for mod_name, items in comments.items():
        before = {name: _options(p) for name, p in sub.choices.items()}
        importlib.import_module(mod_name).register(sub)
        new = set(sub.choices) - set(before)
        extended = {f"{name} {o}" for name in before for o in _options(sub.choices[name]) - before[name]
                    if o.startswith("--")}
        named_new = {i.split()[0] for i in items if "--" not in i}
        named_options = {i for i in items if "--" in i}
        assert items and named_new == new and named_options <= extended, (mod_name, items, sorted(new))
        for i in items:   # "site build": the subcommand exists
            words = i.split()
            if len(words) == 2 and not words[1].startswith("--"):
                assert words[1] in _subcommands(sub.choices[words[0]]), (mod_name, i)


def test_starting_the_command_imports_no_heavy_module_it_does_not_use():
    """Every ``normbench`` command builds the whole parser, so each command module is imported at every start: what
    they import at the top is paid by every command. scipy (~1.2 s, a third of ``normbench --help``) is imported by
    the first statistic computed (``normbench.stats``), not at start; transformers, timm, ray and triton likewise.
    Run in a fresh interpreter (this one has imported everything)."""
    import subprocess
    import sys

    heavy = ("scipy", "transformers", "timm", "ray", "triton", "datasets", "pandas", "matplotlib", "altair")
    r = subprocess.run([sys.executable, "-c", (
        "import sys, contextlib, io\n"
        "from normbench import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    cli.main(['validate', '--help'])\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n")],
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
