"""Tests written against the mutants of normbench/best/command.py, ``normbench best`` (issue #52 item 2;
docs/mutation-report.md): its help (a committed golden copy: what a user reads), its arguments reaching the answer,
and its output, on a copy of committed records (results/kernel/cpu-amd-epyc-2c/rmsnorm.json.gz) read through the
records that count. The answers themselves are ``normbench.best``'s, tested in tests/test_headtohead.py; here the
command must pass the right question and print the answer whole."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from normbench import best, catalog
from normbench.cli import main
from normbench.results import records_that_count

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "results" / "kernel" / "cpu-amd-epyc-2c" / "rmsnorm.json.gz"
GOLDEN = Path(__file__).parent / "fixtures" / "best_help.txt"
HW = "cpu-amd-epyc-2c"
QWEN = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "head_dim": 128,
        "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 28, "rms_norm_eps": 1e-06,
        "_name_or_path": "Qwen/Qwen3-0.6B"}


def _help(monkeypatch, capsys, argv) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_help_is_the_committed_one(monkeypatch, capsys):
    """``normbench best --help`` as committed (tests/fixtures/best_help.txt; regenerate it with ``COLUMNS=100
    normbench best --help`` when the help is meant to change), and the one-line help in ``normbench --help``."""
    assert _help(monkeypatch, capsys, ["best", "--help"]) == GOLDEN.read_text()
    top = " ".join(_help(monkeypatch, capsys, ["--help"]).split())
    assert "best which implementation to use: per model site and regime (or shape), a winner, a tie, or why not" in top


@pytest.fixture
def results(tmp_path) -> Path:
    out = tmp_path / "results" / "kernel" / HW
    out.mkdir(parents=True)
    shutil.copy(SOURCE, out / SOURCE.name)
    return tmp_path / "results"


def _out(capsys) -> tuple[str, str]:
    got = capsys.readouterr()
    return got.out, got.err


def test_the_schema_is_printed_without_reading_records(tmp_path, capsys):
    assert main(["best", "--schema", "--results", str(tmp_path / "none")]) == 0
    out, _ = _out(capsys)
    assert json.loads(out) == best.SCHEMA


def test_a_question_is_needed(results, capsys):
    assert main(["best", "--results", str(results)]) == 2
    assert "normbench: error: name a --model, a --model-config or a --shape" in _out(capsys)[1]


def test_the_default_results_folder_is_results_here(results, capsys, monkeypatch):
    monkeypatch.chdir(results.parent)
    assert main(["best", "--shape", "8x1x4096", "--json"]) == 0
    assert json.loads(_out(capsys)[0])["answers"]


def _answer(results, targets, **kw) -> list[dict]:
    return best.answer(records_that_count(results, kind="kernel").records, targets, **kw)


def test_a_shape_is_answered_per_dtype_and_pass_in_text(results, capsys):
    assert main(["best", "--shape", "8x1x4096", "--results", str(results)]) == 0
    out, err = _out(capsys)
    recs = records_that_count(results, kind="kernel").records
    rows = _answer(results, best.shape_targets(recs, "8x1x4096"))
    at = [r for r in recs if r["config"]["shape"] == [8, 1, 4096]]
    dtypes, passes = sorted({r["config"]["dtype"] for r in at}), sorted({r["config"]["pass"] for r in at})
    held = [(d, p) for d in dtypes for p in passes]
    assert len(held) >= 2 and len(rows) == len(held)
    lines = out.split("\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("8x1x4096 on ")]
    assert [lines[i] for i in heads] == [f"8x1x4096 on {HW}, {d}, {p}:" for d, p in held]
    assert all(lines[i - 1] == "" for i in heads)
    for i, (d, p) in zip(heads, held):
        [row] = [r for r in rows if (r["dtype"], r["pass"]) == (d, p)]
        assert lines[i + 1] == f"  {'rmsnorm':<44} {'rmsnorm':<12} {'8x1x4096':<16} {best.headline(row)}"
        assert lines[i + 2: i + 2 + len(row["backends"])] == [f"      {best.backend_text(b)}" for b in row["backends"]]
    statuses = sorted({r["status"] for r in rows})
    assert err.rstrip("\n").split("\n")[-1] == ", ".join(
        f"{sum(r['status'] == s for r in rows)} {s}" for s in statuses)


def test_the_json_policy_is_the_answer_whole(results, capsys):
    argv = ["best", "--shape", "8x1x4096", "--results", str(results), "--json"]
    assert main(argv) == 0
    out, err = _out(capsys)
    doc = json.loads(out)
    jsonschema.validate(doc, best.SCHEMA)
    recs = records_that_count(results, kind="kernel").records
    want = best.to_policy(_answer(results, best.shape_targets(recs, "8x1x4096")), {"model": None, "shape": "8x1x4096"})
    assert doc == json.loads(json.dumps(want))
    assert not re.search(r"^\d+ (winner|only|tie|undecided|flagged|missing)", err, re.M)   # no counts after it


def test_only_the_norms_named_with_a_shape(results, capsys):
    assert main(["best", "--shape", "8x1x4096", "--norm", "layernorm", "--results", str(results), "--json"]) == 0
    doc = json.loads(_out(capsys)[0])
    assert {r["norm"] for r in doc["answers"]} == {"layernorm"} and {r["status"] for r in doc["answers"]} == {"missing"}
    assert all(r["command"].startswith("normbench bench --shape tokens:8x1x4096 --norm layernorm") for r in
               doc["answers"])


def test_a_model_is_answered_per_site_and_regime_with_its_filters(results, capsys):
    model = catalog.get("llama-3.1-8b")
    argv = ["best", "--model", "llama-3.1-8b", "--results", str(results), "--json"]
    assert main(argv + ["--quick", "--norm", "rmsnorm"]) == 0
    doc = json.loads(_out(capsys)[0])
    assert doc["model"] == "llama-3.1-8b" and doc["shape"] is None
    quick = [t for t in best.model_targets(model, quick=True) if t["norm"] == "rmsnorm"]
    every = [t for t in best.model_targets(model) if t["norm"] == "rmsnorm"]
    assert {t["regime"] for t in quick} < {t["regime"] for t in every}   # --quick is a real choice here
    assert doc == json.loads(json.dumps(best.to_policy(_answer(results, quick, model_arg="--model llama-3.1-8b"),
                                                       {"model": "llama-3.1-8b", "shape": None})))
    assert all(r["command"].startswith("normbench bench --model llama-3.1-8b --norm rmsnorm")
               for r in doc["answers"] if "command" in r)
    # every norm of the model without --norm; one regime, dtype, pass and hardware when named
    assert main(argv + ["--regime", "decode-8", "--dtype", "bfloat16", "--pass", "fwd+bwd", "--device", HW]) == 0
    doc = json.loads(_out(capsys)[0])
    assert {r["regime"] for r in doc["answers"]} == {"decode-8"}
    assert {r["norm"] for r in doc["answers"]} == {t["norm"] for t in best.model_targets(model, ["decode-8"])}
    assert len({r["norm"] for r in doc["answers"]}) > 1
    assert {(r["dtype"], r["pass"], r["hardware_id"]) for r in doc["answers"]} == {("bfloat16", "fwd+bwd", HW)}
    assert main(argv + ["--regime", "decode-8", "--device", "gpu-elsewhere"]) == 0
    assert {r["hardware_id"] for r in json.loads(_out(capsys)[0])["answers"]} == {"gpu-elsewhere"}


def test_a_model_in_text_names_each_site_and_regime(results, capsys):
    assert main(["best", "--model", "llama-3.1-8b", "--regime", "decode-8", "--norm", "rmsnorm", "--dtype", "float32",
                 "--pass", "fwd", "--results", str(results)]) == 0
    out, _ = _out(capsys)
    assert f"\nllama-3.1-8b on {HW}, float32, fwd:\n" in out
    rows = _answer(results, best.model_targets(catalog.get("llama-3.1-8b"), ["decode-8"]), dtypes=["float32"],
                   passes=["fwd"], model_arg="--model llama-3.1-8b")
    rows = [r for r in rows if r["norm"] == "rmsnorm"]
    for r in rows:
        assert f"  {r['site'] + ' / decode-8':<44} {'rmsnorm':<12} {'8x1x4096':<16} {best.headline(r)}\n" in out


def test_a_model_config_file_is_answered_with_its_path_in_the_commands(results, capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN))
    assert main(["best", "--model-config", str(cfg), "--regime", "decode-8", "--results", str(results), "--json"]) == 0
    doc = json.loads(_out(capsys)[0])
    assert doc["model"] == "qwen3-0.6b" and {r["regime"] for r in doc["answers"]} == {"decode-8"}
    commands = [r["command"] for r in doc["answers"] if "command" in r]
    assert commands and all(c.startswith(f"normbench bench --model-config {cfg} --norm ") for c in commands)
