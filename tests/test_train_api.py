"""The Python training API: ``normbench.train.run`` / ``sweep`` / ``sweep_plan`` with plain values (no argparse),
on the small offline LM task for a few steps, in this process."""

from __future__ import annotations

import pytest

import normbench.train as nt
from normbench.results import existing_ids, iter_records, validate_record
from normbench.train.matrix import EmptySweep

pytestmark = pytest.mark.usefixtures("one_thread")


def _common(tmp_path):
    return dict(steps=3, out=str(tmp_path / "results"), checkpoint_dir=str(tmp_path / "ck"), progress=False,
                executor="inprocess")


def test_run_trains_one_cell_writes_and_returns_its_records(tmp_path, capsys):
    seen = []
    calls = []
    result = nt.run("rmsnorm", "synth-lm", seeds=2, seed_start=1, on_record=seen.append,
                    before_training=lambda: calls.append(1), **_common(tmp_path))
    assert result.ok and result.failures == [] and calls == [1]
    assert [r["config"]["seed"] for r in result.records] == [1, 2]
    assert [r["id"] for r in seen] == [r["id"] for r in result.records]
    assert all(validate_record(r) == [] for r in result.records)
    cfg = result.records[0]["config"]
    assert cfg["task"] == "synth-lm" and cfg["model"] == "gpt" and cfg["recipe"]["steps"] == 3
    assert not cfg["quick"]
    stored = {rec["id"] for _, rec in iter_records(tmp_path / "results", kind="accuracy")}
    assert stored == {r["id"] for r in result.records}
    [cell] = result.summary()
    assert cell["norm"] == "rmsnorm" and cell["n"] == 2
    assert capsys.readouterr().out == ""  # the API prints no document; progress lines go to stderr


def test_run_defaults_the_task_from_the_norm_and_refuses_what_cannot_train(tmp_path):
    result = nt.run("groupnorm", seeds=1, model="resnet", **{**_common(tmp_path), "steps": 2})
    assert result.ok and result.records[0]["config"]["task"] == "synth-shapes"
    with pytest.raises(ValueError, match="layouts"):
        nt.run("groupnorm", "synth-lm", **_common(tmp_path))
    with pytest.raises(ValueError, match="trains gpt, not 'resnet'"):
        nt.run("layernorm", "synth-lm", "resnet", **_common(tmp_path))
    with pytest.raises(ValueError, match="at least 1"):
        nt.run("layernorm", seeds=0, **_common(tmp_path))
    with pytest.raises(KeyError):
        nt.run("no_such_norm", **_common(tmp_path))


def test_sweep_skips_what_is_there_and_plans_without_training(tmp_path, capsys):
    kw = dict(tasks=["synth-lm"], seeds=1, **_common(tmp_path))
    first = nt.sweep(["rmsnorm", "dyt"], **kw)
    assert first.ok and sorted(r["norm"]["name"] for r in first.records) == ["dyt", "rmsnorm"]
    again = nt.sweep(["rmsnorm", "dyt"], **kw)
    assert again.ok and again.records == []
    assert capsys.readouterr().err.count(", skipped") == 2
    assert len(existing_ids(kw["out"])) == 2
    plan = nt.sweep_plan(["rmsnorm", "dyt"], ["synth-lm"], seeds=2)
    assert [(p["norm"], p["seed"]) for p in plan] == [("rmsnorm", 0), ("rmsnorm", 1), ("dyt", 0), ("dyt", 1)]
    assert all(p["placement"] == "pre_ln" and p["model"] == "gpt" for p in plan)
    tuned = nt.sweep_plan(["rmsnorm"], ["synth-lm"], tune=True)
    assert tuned == [{"norm": "rmsnorm", "task": "synth-lm", "model": "gpt", "variant": "default",
                      "placement": "pre_ln", "lr_grid": [0.001, 0.003, 0.009], "tune_seeds": 2, "final_seeds": 5}]
    with pytest.raises(EmptySweep):
        nt.sweep_plan(["groupnorm"], ["synth-lm"])
    with pytest.raises(EmptySweep):
        nt.sweep(["groupnorm"], ["synth-lm"], **_common(tmp_path))
    with pytest.raises(ValueError, match="drop --lr"):
        nt.sweep(["rmsnorm"], ["synth-lm"], tune=True, lr=0.1)


def test_sweep_tune_returns_the_final_records_at_the_chosen_rate(tmp_path):
    from normbench.train.tune import choose_lr

    result = nt.sweep(["rmsnorm"], ["synth-lm"], tune=True, seeds=1, **{**_common(tmp_path), "steps": 2})
    assert result.ok and len(result.records) == 1
    [final] = result.records
    search = final["config"]["lr_search"]
    tuning = [r for _, r in iter_records(tmp_path / "results", kind="accuracy") if "tuning" in r["flags"]]
    assert len(tuning) == 2 * len(search["grid"])
    assert choose_lr(search["grid"], tuning)[0] == search["chosen"] == final["config"]["recipe"]["lr"]
