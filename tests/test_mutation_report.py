"""The committed mutation-testing report (docs/mutation-report.json, made by scripts/mutation.sh) is not older than
the modules it covers: each module's sha256 now is the one it had when it was mutated (issue #52 item 2). Fast: it
runs no mutation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "mutation-report.json"


def _report() -> dict:
    return json.loads(REPORT.read_text())


def test_every_module_in_the_report_is_unchanged_since_it_was_mutated():
    modules = _report()["modules"]
    assert modules, "the mutation report covers no module"
    stale = [m for m, r in modules.items()
             if hashlib.sha256((ROOT / m).read_bytes()).hexdigest() != r["sha256"]]
    assert not stale, (f"changed since their mutation run: {', '.join(stale)}; re-run `bash scripts/mutation.sh "
                       f"{' '.join(stale)}` and commit docs/mutation-report.*")


def test_the_report_adds_up():
    doc = _report()
    for m, r in doc["modules"].items():
        assert r["killed"] + r["timeout"] + r["survived"] + r["equivalent"] + r["not_checked"] == r["mutants"], m
        assert len(r["survivors"]) == r["survived"] and len(r["equivalent_mutants"]) == r["equivalent"], m
        assert len(r["timeouts"]) == r["timeout"], m
        assert all(isinstance(why, str) and why.strip() for why in r["equivalent_mutants"].values()), m
    assert not set(doc["modules"]) & set(doc["not_run"])
