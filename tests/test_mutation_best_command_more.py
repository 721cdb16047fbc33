"""#52: more of ``normbench best``'s command (normbench/best/command.py) held by tests, from its second mutation
run's survivors: the machine-readable documents are printed as written (one-space-indented JSON, on the real stdout
even while ``--json`` diverts everything else), the text answer has one heading per hardware, dtype and pass, and the
closing counts count."""

from __future__ import annotations

import json
from collections import Counter

from test_mutation_best_command import _answer, _out, results  # noqa: F401  (the fixture)

from normbench import best, catalog
from normbench.cli import main


def test_the_schema_is_one_space_indented_json_on_the_real_stdout(tmp_path, capsys):
    for extra in ([], ["--json"]):   # --json diverts stdout to stderr while a command runs: documents still reach it
        assert main(["best", "--schema", "--results", str(tmp_path / "none"), *extra]) == 0
        out, err = _out(capsys)
        assert out == json.dumps(best.SCHEMA, indent=1) + "\n" and '"$schema"' not in err


def test_the_json_policy_is_one_space_indented(results, capsys):  # noqa: F811
    assert main(["best", "--shape", "8x1x4096", "--results", str(results), "--json"]) == 0
    out, _ = _out(capsys)
    assert out == json.dumps(json.loads(out), indent=1) + "\n"


def test_the_text_answer_has_one_heading_per_group_and_counts_its_rows(results, capsys):  # noqa: F811
    """Two dtypes x two passes of llama's rmsnorm sites at decode-8: four headings, each followed by its sites; the
    closing line counts the rows by status."""
    argv = ["best", "--model", "llama-3.1-8b", "--regime", "decode-8", "--norm", "rmsnorm", "--results",
            str(results)]
    assert main(argv) == 0
    out, err = _out(capsys)
    rows = [r for r in _answer(results, best.model_targets(catalog.get("llama-3.1-8b"), ["decode-8"]),
                               model_arg="--model llama-3.1-8b") if r["norm"] == "rmsnorm"]
    groups = {(r["hardware_id"], r["dtype"], r["pass"]) for r in rows}
    headings = [line for line in out.splitlines() if line.startswith("llama-3.1-8b on ")]
    assert len(groups) >= 2 and len(rows) > len(groups)   # more rows than headings: the test can tell
    assert sorted(headings) == sorted(f"llama-3.1-8b on {h}, {d}, {p}:" for h, d, p in groups)
    counts = Counter(r["status"] for r in rows)
    assert max(counts.values()) >= 2   # a status seen more than once: its count is a real sum
    assert err.rstrip().splitlines()[-1] == ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
