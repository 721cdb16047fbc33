"""#52: ``normbench.best``'s answer as a program reads it (``best --json``, ``apply_policy``): the rows ``answer``
makes from records (which hardware, dtype, pass, device and command), the targets of a ``--shape``, and the policy
document ``to_policy`` writes. Records are the committed ones (CPU, results/kernel/cpu-amd-epyc-2c) and the H200
fixture run (tests/fixtures/gpu-runs/2026-11-27-h200, every record flagged ``forced``) read by the real reader;
what is expected is written out from the rules in the docstrings, not computed by the code under test."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

import pytest

import normbench
from normbench import best, catalog
from normbench.records.store import iter_records
from normbench.results import records_that_count

ROOT = Path(__file__).resolve().parents[1]
CPU_SOURCE = ROOT / "results" / "kernel" / "cpu-amd-epyc-2c" / "rmsnorm.json.gz"
H200 = Path(__file__).parent / "fixtures" / "gpu-runs" / "2026-11-27-h200"


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("cpu") / "results" / "kernel" / "cpu-amd-epyc-2c"
    out.mkdir(parents=True)
    shutil.copy(CPU_SOURCE, out / CPU_SOURCE.name)
    return records_that_count(out.parents[1], kind="kernel").records


@pytest.fixture(scope="module")
def h200_records() -> list[dict]:
    # the run's record files only (its costs.json is the dry run's input, not records); a bad record fails here
    return [r for f in sorted(H200.glob("*.json.gz")) for _p, r in iter_records(f, errors="raise")]


# --- the re-run command ------------------------------------------------------------------------------------------

def test_the_command_names_every_choice_and_the_regime_and_redo_when_given():
    assert best._command("--model llama-3.1-8b", "decode", "rmsnorm", "bfloat16", "fwd+bwd", "cuda", True) == (
        "normbench bench --model llama-3.1-8b --norm rmsnorm --dtype bfloat16 --pass fwd+bwd --device cuda "
        "--regime decode --redo")
    assert best._command("--shape tokens:8x1x4096", None, "rmsnorm", "float32", "fwd", "cpu", False) == (
        "normbench bench --shape tokens:8x1x4096 --norm rmsnorm --dtype float32 --pass fwd --device cpu")
    assert best._command("--model-config 'my dir/config.json'", None, "x", "float32", "bwd", "cpu", False) == (
        "normbench bench --model-config 'my dir/config.json' --norm x --dtype float32 --pass bwd --device cpu")


# --- answer: which rows, and the commands in them ----------------------------------------------------------------

def test_with_no_records_one_row_per_target_on_no_hardware_in_float32_forward():
    targets = [{"site": "s", "regime": "decode", "norm": "rmsnorm", "layout": "tokens", "dims": (1, 1, 64)}]
    [row] = best.answer([], targets, model_arg="--model m")
    assert (row["hardware_id"], row["dtype"], row["pass"], row["status"]) == ("(none)", "float32", "fwd", "missing")
    assert row["command"] == ("normbench bench --model m --norm rmsnorm --dtype float32 --pass fwd --device cpu "
                              "--regime decode")   # nothing to redo: measured for the first time
    assert row["backends"] == []


def test_gpu_records_are_answered_on_cuda_with_commands_that_redo_them(h200_records):
    """Every H200 fixture record is flagged ``forced``: each row is ``flagged``, its command re-measures on the GPU
    (``--device cuda``, ``--redo``) at the target's own dtype, pass and regime, and so does each backend's."""
    rec = next(r for r in h200_records if r["norm"]["name"] == "rmsnorm")
    c = rec["config"]
    targets = [{"site": "model.norm", "regime": "prefill", "norm": "rmsnorm", "layout": c["layout"],
                "dims": tuple(c["shape"])}]
    rows = best.answer(h200_records, targets)   # no model_arg and no shape_arg: the command names neither
    at = [r for r in h200_records if r["norm"]["name"] == "rmsnorm" and r["config"]["shape"] == c["shape"]]
    held = sorted({(r["config"]["dtype"], r["config"]["pass"]) for r in at})
    dtypes, passes = sorted({d for d, _ in held}), sorted({p for _, p in held})
    assert [(r["dtype"], r["pass"]) for r in rows] == [(d, p) for d in dtypes for p in passes]
    assert len(rows) >= 2 and {r["hardware_id"] for r in rows} == {"gpu-nvidia-h200"}
    for row in rows:
        want = (f"normbench bench --norm rmsnorm --dtype {row['dtype']} --pass {row['pass']} --device cuda "
                "--regime prefill --redo")
        if (row["dtype"], row["pass"]) in held:
            assert row["status"] == "flagged"
            assert row["command"] == want
            assert row["backends"] and all(b["verdict"] == "not_ranked" and b["command"] == want
                                           for b in row["backends"])
        else:
            assert row["status"] == "missing"
            assert row["command"] == want.removesuffix(" --redo")


def test_a_missing_row_measures_and_a_flagged_row_redoes(h200_records):
    rec = next(r for r in h200_records if r["norm"]["name"] == "dyt")
    c = rec["config"]
    targets = [{"site": None, "regime": None, "norm": "dyt", "layout": c["layout"], "dims": tuple(c["shape"]),
                "shape_arg": "--shape S"}]
    [flagged] = best.answer(h200_records, targets, dtypes=[c["dtype"]], passes=[c["pass"]])
    [missing] = best.answer(h200_records, targets, dtypes=["float64"], passes=[c["pass"]])
    base = f"normbench bench --shape S --norm dyt --dtype {{}} --pass {c['pass']} --device cuda"
    assert flagged["status"] == "flagged" and flagged["command"] == base.format(c["dtype"]) + " --redo"
    assert missing["status"] == "missing" and missing["command"] == base.format("float64")


def test_a_cpu_only_hardware_is_answered_on_the_cpu(cpu_records, h200_records):
    rec = next(r for r in cpu_records if r["config"]["shape"] == [8, 1, 4096])
    targets = [{"site": None, "regime": None, "norm": "rmsnorm", "layout": "tokens", "dims": (8, 1, 4096)}]
    rows = best.answer(cpu_records + h200_records, targets, hardware="cpu-amd-epyc-2c", dtypes=[rec["config"]["dtype"]],
                       passes=[rec["config"]["pass"]], model_arg="--shape tokens:8x1x4096")
    [row] = rows
    assert row["hardware_id"] == "cpu-amd-epyc-2c"
    assert {b["verdict"] for b in row["backends"]} - {"not_ranked"}   # ranked backends too
    for b in row["backends"]:   # only a backend not ranked carries the command that re-measures it
        assert ("command" in b) is (b["verdict"] == "not_ranked")
        if b["verdict"] == "not_ranked":
            assert " --device cpu " in b["command"] + " " and b["command"].endswith("--redo")
    # a row carries a command only when it is flagged, missing or measured apart (then: redo, on the CPU)
    needs = row["status"] in ("flagged", "missing") or row.get("undecided_by") == "measured apart"
    assert ("command" in row) is needs
    if needs:
        assert row["command"] == best._command("--shape tokens:8x1x4096", None, "rmsnorm", rec["config"]["dtype"],
                                               rec["config"]["pass"], "cpu", row["status"] != "missing")


def test_every_hardware_with_records_answers_when_none_is_named(cpu_records, h200_records):
    targets = [{"site": None, "regime": None, "norm": "rmsnorm", "layout": "tokens", "dims": (8, 1, 4096)}]
    rows = best.answer(cpu_records + h200_records, targets, dtypes=["float32"], passes=["fwd"])
    assert [r["hardware_id"] for r in rows] == ["cpu-amd-epyc-2c", "gpu-nvidia-h200"]


# --- the targets of a --shape ------------------------------------------------------------------------------------

def test_a_shape_label_is_read_from_the_kernel_record_that_carries_it(h200_records):
    rec = next(r for r in h200_records if r["config"].get("shape_label"))
    label, layout, dims = rec["config"]["shape_label"], rec["config"]["layout"], tuple(rec["config"]["shape"])
    # another kind of record with the same label and other dims must not decide the shape
    other = {"kind": "accuracy", "norm": {"name": "zzz"}, "config": {"shape_label": label, "layout": "images",
                                                                     "shape": [2, 3, 4, 4]}}
    got = best.shape_targets([other, rec], label)
    assert got == [{"site": None, "regime": None, "norm": rec["norm"]["name"], "layout": layout, "dims": dims,
                    "shape_arg": f"--shape {layout}:{'x'.join(map(str, dims))}"}]
    # the norms found are the kernel records' at that layout and dims: no other kind, no other layout
    same_dims_other_layout = {**rec, "norm": {"name": "aaa"}, "config": {**rec["config"], "layout": "images",
                                                                       "shape_label": None}}
    other_kind = {**rec, "kind": "accuracy", "norm": {"name": "bbb"}, "config": {**rec["config"], "shape_label": None}}
    names = [t["norm"] for t in best.shape_targets([rec, same_dims_other_layout, other_kind], label)]
    assert names == [rec["norm"]["name"]]


def test_dims_are_parsed_when_no_record_carries_the_label(h200_records):
    rec = next(r for r in h200_records if r["norm"]["name"] == "layernorm")
    dims = tuple(rec["config"]["shape"])
    text = "x".join(map(str, dims))
    got = best.shape_targets(h200_records, text)
    assert {t["norm"] for t in got} == {r["norm"]["name"] for r in h200_records if tuple(r["config"]["shape"]) == dims}
    assert all(t["layout"] == "tokens" and t["dims"] == dims and t["shape_arg"] == f"--shape tokens:{text}"
               for t in got)
    assert [t["norm"] for t in best.shape_targets(h200_records, text, norms=["mine"])] == ["mine"]


def test_a_shape_without_records_says_how_to_get_its_command():
    with pytest.raises(ValueError) as err:
        best.shape_targets([], "3x5")
    assert str(err.value) == ("no records at shape 3x5 (tokens 1x3x5); name the norm with --norm to get the command "
                              "that measures it")


# --- the policy document -----------------------------------------------------------------------------------------

def test_made_with_names_the_versions_answering_now():
    assert best.made_with() == {"normbench": normbench.__version__, "torch": importlib.metadata.version("torch")}


def _row(status, **kw) -> dict:
    row = {"site": None, "regime": None, "norm": "rmsnorm", "layout": "tokens", "shape": [1, 1, 64],
           "dtype": "float32", "pass": "fwd", "hardware_id": "hw", "status": status}
    return {**row, **kw}


def test_the_policy_has_one_choice_per_shape_dtype_pass_and_hardware():
    """The first row of a key decides it (a model's sites share shapes); the choice is the winner (winner, only),
    the first of the tied (tie), else none; evidence is the row's, else empty."""
    rows = [
        _row("winner", site="a", winner="triton", evidence=["r1", "r2"]),
        _row("tie", site="b", winner=None, ties=["compile", "eager"]),          # same key as the first: skipped
        _row("tie", shape=[1, 2, 64], ties=["compile", "eager"], evidence=["r3"]),
        _row("only", dtype="bfloat16", winner="eager"),
        _row("undecided", pass_="x", winner="triton", ties=["triton"]),
        _row("flagged", hardware_id="hw2", winner="triton"),
        _row("missing", shape=[9, 9]),
        _row("tie", layout="images", shape=[1, 2, 3, 3], winner=None),
    ]
    rows[4]["pass"] = "bwd"
    doc = best.to_policy(rows, {"model": "m", "shape": None})
    assert doc["answers"] is rows
    want = [
        ("rmsnorm", "tokens", [1, 1, 64], "float32", "fwd", "hw", "triton", "winner", ["r1", "r2"]),
        ("rmsnorm", "tokens", [1, 2, 64], "float32", "fwd", "hw", "compile", "tie", ["r3"]),
        ("rmsnorm", "tokens", [1, 1, 64], "bfloat16", "fwd", "hw", "eager", "only", []),
        ("rmsnorm", "tokens", [1, 1, 64], "float32", "bwd", "hw", None, "undecided", []),
        ("rmsnorm", "tokens", [1, 1, 64], "float32", "fwd", "hw2", None, "flagged", []),
        ("rmsnorm", "tokens", [9, 9], "float32", "fwd", "hw", None, "missing", []),
        ("rmsnorm", "images", [1, 2, 3, 3], "float32", "fwd", "hw", None, "tie", []),
    ]
    keys = ("norm", "layout", "shape", "dtype", "pass", "hardware_id", "backend", "status", "evidence")
    assert doc["policy"] == [dict(zip(keys, w)) for w in want]


def test_the_document_says_what_made_it_and_the_rule_it_applied():
    doc = best.to_policy([], {"model": None, "shape": "8x1x4096"})
    assert doc == {
        "schema": "normbench.best", "version": 1, "model": None, "shape": "8x1x4096",
        "made_with": {"normbench": normbench.__version__, "torch": importlib.metadata.version("torch")},
        "rule": {"tie_factor": best.TIE_FACTOR, "confidence": 0.95, "err_tol": best.ERR_TOL,
                 "winner_needs": "a paired interval", "paired_ok_flags": list(best.PAIRED_OK_FLAGS),
                 "never_ranked_flags": "every other flag, host_bound included"},
        "answers": [], "policy": []}


def test_a_model_answered_without_a_model_argument_has_bare_commands(h200_records):
    """Model targets carry no ``shape_arg``: without ``model_arg`` the command names only the norm's choices."""
    model = catalog.get("llama-3.1-8b")
    targets = [t for t in best.model_targets(model, quick=True) if t["regime"].startswith("decode")]
    rows = best.answer([], targets[:1], dtypes=["float32"], passes=["fwd"])
    assert rows[0]["command"] == (f"normbench bench --norm {targets[0]['norm']} --dtype float32 --pass fwd --device "
                                  f"cpu --regime {targets[0]['regime']}")


def test_a_model_config_path_with_a_space_stays_one_argument_of_the_command(tmp_path, capsys):
    """``best --model-config "my dir/config.json"``: each command, split as a shell splits it, gives the path back
    whole (it was split at the space and each half quoted: a command that could not run)."""
    import json
    import shlex

    from normbench.cli import main

    cfg = tmp_path / "my dir" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
                               "head_dim": 128, "num_attention_heads": 16, "num_key_value_heads": 8,
                               "num_hidden_layers": 28, "rms_norm_eps": 1e-06}))
    out = tmp_path / "results" / "kernel" / "cpu-amd-epyc-2c"
    out.mkdir(parents=True)
    shutil.copy(CPU_SOURCE, out / CPU_SOURCE.name)
    assert main(["best", "--model-config", str(cfg), "--quick", "--results", str(out.parents[1]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    commands = [row["command"] for row in doc["answers"] if "command" in row]
    commands += [b["command"] for row in doc["answers"] for b in row["backends"] if "command" in b]
    assert commands
    for command in commands:
        assert shlex.split(command)[:4] == ["normbench", "bench", "--model-config", str(cfg)]
