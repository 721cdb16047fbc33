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


def test_every_entry_the_report_uses_is_pinned_to_its_mutants_diff():
    """killed.json / equivalent.json name mutants by mutmut's number within a function; pinned.json ties each entry
    the report uses to the diff of the mutant it was checked on (the committed run files' survivors)."""
    mr = _report_script()
    res = ROOT / "scripts" / "mutation"
    entries = {**json.loads((res / "equivalent.json").read_text()), **json.loads((res / "killed.json").read_text())}
    pinned = json.loads((res / "pinned.json").read_text())
    used = 0
    for f in sorted(res.glob("normbench_*.json")):
        data = json.loads(f.read_text())
        for k, status in data["mutants"].items():
            if k in entries and status in ("survived", "no tests"):
                used += 1
                assert pinned.get(k) == mr._diff_sha(data["survivors"][k]), k
    assert used == sum(r["equivalent"] + len(r["killed_by_new_tests"]) for r in _report()["modules"].values())


def test_an_entry_whose_mutant_changed_is_refused_and_the_mutant_counted_survived(tmp_path, monkeypatch):
    """After its function is edited a mutant's number can name another mutation: the report refuses the entry
    checked on the old one (the mutant counts as a survivor, the refusal says why) and keeps the old pin; an entry
    used for the first time is pinned to its mutant's diff."""
    import shutil

    mr = _report_script()
    res = ROOT / "scripts" / "mutation"
    for name in ("normbench_best_command.py.json", "killed.json", "equivalent.json", "pinned.json"):
        shutil.copy(res / name, tmp_path / name)
    monkeypatch.setattr(mr, "RESULTS", tmp_path)
    monkeypatch.setattr(mr, "REPORT_JSON", tmp_path / "report.json")
    monkeypatch.setattr(mr, "REPORT_MD", tmp_path / "report.md")
    before = mr.report()["modules"]["normbench/best/command.py"]
    assert before["refused_entries"] == {} and before["survived"] == 0
    run = json.loads((tmp_path / "normbench_best_command.py.json").read_text())
    name = sorted(before["equivalent_mutants"])[0]
    old_pin = json.loads((tmp_path / "pinned.json").read_text())[name]
    run["survivors"][name] = run["survivors"][name].replace("\n+", "\n+    # edited since\n+", 1)
    (tmp_path / "normbench_best_command.py.json").write_text(json.dumps(run))
    after = mr.report()["modules"]["normbench/best/command.py"]
    assert after["survivors"] == [name] and after["equivalent"] == before["equivalent"] - 1
    assert "its diff changed since the entry was checked" in after["refused_entries"][name]
    assert json.loads((tmp_path / "pinned.json").read_text())[name] == old_pin
    assert f"`{name}`: entry refused, its diff changed" in (tmp_path / "report.md").read_text()

    pins = json.loads((tmp_path / "pinned.json").read_text())
    del pins[name]
    (tmp_path / "pinned.json").write_text(json.dumps(pins))
    again = mr.report()["modules"]["normbench/best/command.py"]
    assert again["refused_entries"] == {} and name in again["equivalent_mutants"]
    assert json.loads((tmp_path / "pinned.json").read_text())[name] == mr._diff_sha(run["survivors"][name])
