"""The modules renamed so their names say what they hold keep their old names as the very same module where code
outside normbench imports them: ASV's suite (``suites/asv/``) imports ``normbench.suites`` and
``normbench.measure.suite``, and ASV runs today's suite against older commits, which have only those names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: old name -> new name
RENAMED = {"normbench.suites": "normbench.accuracy_suite", "normbench.measure.suite": "normbench.measure.kernel_suite"}


@pytest.mark.parametrize("old, new", sorted(RENAMED.items()))
def test_an_old_name_is_the_renamed_module_itself(old, new):
    mod = importlib.import_module(new)
    assert importlib.import_module(old) is mod
    parent, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is mod   # ``from normbench.measure import suite``


def test_every_name_the_asv_suite_reads_from_normbench_exists():
    """What ``suites/asv/*.py`` import from normbench (module by module, name by name) is there."""
    seen = 0
    for path in sorted((REPO / "suites" / "asv").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("normbench"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(mod, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                        path.name, node.module, alias.name)
                    seen += 1
    assert seen >= 3
