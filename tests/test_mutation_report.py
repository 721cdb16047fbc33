"""The committed mutation-testing report (docs/mutation-report.json, made by scripts/mutation.sh) is not older than
the modules it covers: each module's sha256 now is the one it had when it was mutated (issue #52 item 2). Fast: it
runs no mutation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

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


def _report_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutation_report", ROOT / "scripts" / "mutation_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_resumed_run_keeps_the_earlier_statuses_of_what_it_did_not_check(tmp_path, monkeypatch):
    """``MUTATION_RESUME=1``: the new run checks only the mutants the last one left unchecked; the merged result keeps
    every other mutant's status (and survivor's diff) from the last run, and refuses a run of other source."""
    mr = _report_script()
    old = json.loads((ROOT / "scripts" / "mutation" / "normbench_best_command.py.json").read_text())
    names = sorted(old["mutants"])
    picked = names[:3]
    new = {**old, "mutants": {n: ("killed" if n in picked else "not checked") for n in names}, "survivors": {}}
    merged = mr.merge(new, old)
    assert {n: merged["mutants"][n] for n in picked} == {n: "killed" for n in picked}
    assert {n: s for n, s in merged["mutants"].items() if n not in picked} == \
        {n: s for n, s in old["mutants"].items() if n not in picked}
    assert set(merged["survivors"]) == set(old["survivors"]) - set(picked)
    with pytest.raises(SystemExit, match="other source"):
        mr.merge({**new, "sha256": "0" * 64}, old)

    # unchecked(): the names left unchecked by the module's last run, refused when the module changed since
    monkeypatch.setattr(mr, "RESULTS", tmp_path)
    run = {**old, "mutants": {n: ("not checked" if n in picked else "killed") for n in names}}
    (tmp_path / "normbench_best_command.py.json").write_text(json.dumps(run))
    assert mr.unchecked("normbench/best/command.py") == picked
    (tmp_path / "normbench_best_command.py.json").write_text(json.dumps({**run, "sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="changed since its last run"):
        mr.unchecked("normbench/best/command.py")
    with pytest.raises(SystemExit, match="no earlier run"):
        mr.unchecked("normbench/campaign.py")
