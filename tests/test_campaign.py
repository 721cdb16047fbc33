"""The GPU campaign's CPU-side parts: the dry-run plan and its cost model, packing within the output limits,
resuming from packed files, and the commit passed in for a tree without .git. (Measuring needs a GPU.)"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from normbench import campaign
from normbench.measure.shapes import by_label


def test_dry_run_plans_tier1_to_fit_one_call(capsys):
    summary = campaign.dry_run("cuda")
    t1 = summary[1]
    # 4 norms x 6 LLM shapes x bf16 x 3 passes x eager/compile/triton, liger on top where it imports
    assert t1["cases"] == 4 * 6 * 3 * 3 and t1["optional_cases"] == {"liger": 4 * 6 * 3}
    assert t1["estimated_s"] + t1["estimated_optional_s"]["liger"] < campaign.DEFAULT_BUDGET_S
    assert summary[2]["cases"] > t1["cases"] and summary[3]["commands"]
    out = capsys.readouterr().out
    assert "tier 1" in out and "min" in out


def test_tier1_covers_llm_widths_and_a_large_shape():
    t1 = campaign.plan_tiers("cuda")[0]
    widths = {c.shape.num_features for c in t1.cases}
    assert widths == {1024, 2048, 4096, 8192, 16384}
    assert any(by_label(s).numel >= 8192 * 4096 for s in campaign.TIER1_SHAPES)
    assert {c.norm for c in t1.cases} == set(campaign.TIER1_NORMS)
    assert {c.dtype for c in t1.cases} == {"bfloat16"} and {c.timing for c in t1.cases} == {"cold"}
    assert {c.pass_ for c in t1.cases} == {"fwd", "bwd", "fwd+bwd"}


def test_forward_only_and_dtype_limited_baselines_are_planned_as_they_run():
    t2 = campaign.plan_tiers("cuda")[1]
    fi = t2.optional.get("flashinfer", [])
    assert fi and {c.pass_ for c in fi} == {"fwd"} and {c.dtype for c in fi} == {"bfloat16"}


def test_cost_model_grows_with_work():
    t1 = campaign.plan_tiers("cuda")[0]
    one = [c for c in t1.cases if c.backend == "eager"][:3]
    assert 0 < campaign.estimate(one) < campaign.estimate(t1.cases)
    assert campaign.estimate([]) == 0


def _records(n, pad=0):
    import random

    rng = random.Random(0)  # random text: it does not compress away
    return [{"id": f"r{i}", "pad": "".join(rng.choice("0123456789abcdef") for _ in range(pad))} for i in range(n)]


def test_pack_splits_within_the_limits_and_round_trips(tmp_path):
    recs = _records(40, pad=400)
    # incompressible padding would be needed to hit 16 MiB; a small limit exercises the splitting instead
    paths = campaign.pack(recs, tmp_path, max_files=6, max_bytes=4000)
    assert 1 < len(paths) <= 6 and all(p.stat().st_size <= 4000 for p in paths)
    back = [r for p in paths for r in json.loads(gzip.decompress(p.read_bytes()))]
    assert back == recs
    with pytest.raises(ValueError, match="at most 2 may come back"):
        campaign.pack(recs, tmp_path, max_files=2, max_bytes=1000)


def test_unpack_merges_real_records_into_results(tmp_path, one_thread):
    from normbench import results
    from normbench.measure import group, planning
    from normbench.measure.timers import TimerSettings

    ctx = group.Context(50.0, "test", results.provenance(command="pytest", device="cpu"),
                        TimerSettings(warmup=0, min_reps=3, max_reps=3, min_time=0.0), None)
    shape = by_label("quick-8x128x512")
    recs = group.measure_group([planning.Case("rmsnorm", "eager", shape, "float32", "fwd", "cpu", "hot", 1)], ctx)
    paths = campaign.pack(recs, tmp_path / "out")
    assert campaign.main(["--unpack", str(tmp_path / "out"), "--into", str(tmp_path / "res")]) == 0
    loaded = results.load(tmp_path / "res", kind="kernel")
    assert len(paths) == 1 and list(loaded["id"]) == [recs[0]["id"]]


def test_unpack_validates_records(tmp_path):
    (tmp_path / "bad.json.gz").write_bytes(gzip.compress(b'[{"id": "x"}]'))
    with pytest.raises(ValueError, match="invalid"):
        campaign.unpack([tmp_path])


def test_parse_tiers():
    assert campaign.parse_tiers("all") == (1, 4, 2, 3) and campaign.parse_tiers("1,3") == (1, 3)
    assert campaign.parse_tiers("models") == (4,) and campaign.parse_tiers("1,models") == (1, 4)
    with pytest.raises(ValueError):
        campaign.parse_tiers("5")
    with pytest.raises(ValueError):
        campaign.parse_tiers("modelz")


def test_models_tier_plans_the_catalog_llms_prefill_and_decode_shapes():
    t4 = campaign.plan_tiers("cuda")[3]
    assert t4.number == campaign.MODELS_TIER
    everything = t4.cases + [c for v in t4.optional.values() for c in v]
    labels = {c.shape.label for c in everything}
    assert {"tokens-1x2048x4096", "tokens-8x4096x4096", "tokens-256x1x4096", "tokens-8x32x128"} <= labels
    assert {c.dtype for c in everything} == {"bfloat16"} and {c.pass_ for c in everything} == {"fwd", "fwd+bwd"}
    assert {"eager", "compile", "triton"} <= {c.backend for c in t4.cases}


def test_commit_passed_in_names_a_tree_without_git(monkeypatch):
    import importlib

    provenance = importlib.import_module("normbench.records.provenance")

    provenance.git_commit.cache_clear()
    monkeypatch.setenv(provenance.GIT_COMMIT_ENV, "0123abcd" * 5)
    try:
        assert provenance.git_commit() == ("0123abcd" * 5, None)
    finally:
        provenance.git_commit.cache_clear()


def test_script_dry_run_and_no_gpu_message(tmp_path):
    env_py = sys.executable
    out = subprocess.run(["bash", "scripts/gpu-campaign.sh", "--dry-run", "--json"], cwd=REPO, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": env_py}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["1"]["cases"] == 4 * 6 * 3 * 3
    run = subprocess.run(["bash", "scripts/gpu-campaign.sh", "--tier", "1", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHON": env_py},
                         timeout=120)
    assert run.returncode != 0 and "needs a CUDA device" in run.stderr


def test_script_without_jsonschema_says_to_carry_the_wheels(tmp_path):
    """The GPU image has no jsonschema: with no .whl/ to install it from, the script stops and says what to do."""
    blocked = tmp_path / "blocked" / "jsonschema"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not in this image')\n")
    python = tmp_path / "python"  # this interpreter, as an image without jsonschema sees it
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{blocked.parent}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for script in ("gpu-campaign.sh", "gpu-env.sh"):  # the campaign sources the shared GPU set-up
        shutil.copy(f"{REPO}/scripts/{script}", tree / "scripts")
    run = subprocess.run(["bash", "scripts/gpu-campaign.sh", "--dry-run"], cwd=tree, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)}, timeout=60)
    assert run.returncode == 1, run.stderr
    assert "bash scripts/gpu-wheels.sh" in run.stderr and "name .whl in the device run's carry" in run.stderr


# --- the campaign fails loudly (issue #35 item 2), driven on the CPU with a tiny tier ----------------------------



def _tiny(monkeypatch, tmp_path, backends, norm="gate_probe"):
    """A one-tier plan of ``norm`` x ``backends`` (fwd, one quick shape, on the CPU), the gate-probe norm of
    test_gate_devices registered, a stated ceiling and a fresh check cache."""
    from test_gate_devices import PROBE

    from normbench.discovery import REGISTRY
    from normbench.measure import group, planning, sweep
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance

    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    fast = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: group.Context(
        50.0, "test ceiling", provenance(command="pytest", device="cpu"), fast, None))
    shape = by_label("quick-8x128x512")
    cases = [planning.Case(norm, b, shape, "float32", "fwd", "cpu", "hot", 1, False, "campaign") for b in backends]
    return {1: campaign.Tier(1, "tiny", cases=cases)}, fast


def _run(tmp_path, plan, fast, **kw):
    logs: list[str] = []
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu", plan=plan,
                         settings=fast, log=logs.append, **kw)
    assert json.loads((tmp_path / "out" / "campaign-log.json").read_text()) == json.loads(json.dumps(entry,
                                                                                                     default=str))
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]
    return entry, "\n".join(logs)


def test_a_refused_backend_is_printed_logged_and_fails_the_campaign_while_the_rest_is_measured(monkeypatch,
                                                                                                tmp_path):
    plan, fast = _tiny(monkeypatch, tmp_path, ("eager", "wrong_on_cpu"))
    entry, logs = _run(tmp_path, plan, fast)
    assert "REFUSED: refusing to measure gate_probe's wrong_on_cpu backend on cpu" in logs
    assert "differs from eager on cpu" in logs  # the reason, not just the count
    [refused] = entry["tiers"][1]["refused"]
    assert (refused["backend"], refused["device"], refused["status"]) == ("wrong_on_cpu", "cpu", "failed")
    assert "differs from eager" in refused["detail"] and entry["tiers"][1]["refused_norms"] == []
    assert entry["smoke"]["written"] == 1 and entry["tiers"][1]["already_done"] == 1  # eager, once, kept
    assert campaign.exit_code(entry) == 1
    assert any("gate_probe/wrong_on_cpu@cpu" in p for p in entry["problems"])
    [rec] = campaign.unpack([tmp_path / "out"])
    assert rec["config"]["backend"] == "eager" and rec["check"]["status"] == "passed"


def test_a_smoke_step_that_writes_nothing_stops_the_campaign_at_once(monkeypatch, tmp_path):
    plan, fast = _tiny(monkeypatch, tmp_path, ("wrong_on_cpu",))
    plan[2] = campaign.Tier(2, "never reached", cases=plan[1].cases)
    logs: list[str] = []
    entry = campaign.run((1, 2), out=tmp_path / "out", work=tmp_path / "work", device="cpu", plan=plan,
                         settings=fast, log=logs.append)
    assert entry["stopped"] == "smoke" and entry["tiers"] == {} and campaign.exit_code(entry) == 1
    assert "the smoke step wrote no records" in entry["problems"][0] and "refused by the check gate" in \
        entry["problems"][0]
    assert entry["smoke"]["refused"][0]["backend"] == "wrong_on_cpu"
    assert json.loads((tmp_path / "out" / "campaign-log.json").read_text())["stopped"] == "smoke"


def test_a_tier_that_writes_nothing_or_fails_a_case_fails_the_campaign(monkeypatch, tmp_path):
    from normbench.measure import group, sweep

    plan, fast = _tiny(monkeypatch, tmp_path, ("gpu_only", "eager"))  # gpu_only: not on the CPU
    real = group.measure_group

    def broken(cases, ctx, refused=None):
        if cases[0].backend == "eager":
            raise RuntimeError("kernel exploded")
        return real(cases, ctx, refused)

    monkeypatch.setattr(sweep, "measure_group", broken)
    entry, logs = _run(tmp_path, plan, fast, smoke=False)
    assert "smoke" not in entry and campaign.exit_code(entry) == 1
    t1 = entry["tiers"][1]
    assert t1["written"] == 0 and t1["failed_count"] == 1 and "kernel exploded" in t1["failed"][0][1]
    assert t1["left_out"][0]["backend"] == "gpu_only" and "does not run on cpu" in t1["left_out"][0]["detail"]
    assert "FAILED gate_probe/eager" in logs and "left out: gate_probe/gpu_only on cpu" in logs
    assert {"tier 1: 1 case(s) failed", "tier 1 wrote no records (1 planned, 0 already done)"} <= set(
        entry["problems"])
    assert entry["records"] == 0 and entry["files"] == []


def test_a_clean_campaign_exits_zero(monkeypatch, tmp_path):
    plan, fast = _tiny(monkeypatch, tmp_path, ("eager",), norm="rmsnorm")
    entry, _ = _run(tmp_path, plan, fast)
    assert entry["problems"] == [] and campaign.exit_code(entry) == 0 and entry["records"] == 1


def test_packing_is_atomic_an_interrupted_pack_keeps_the_old_files_and_leaves_no_tmp(tmp_path, monkeypatch):
    old = campaign.pack(_records(3), tmp_path)
    before = old[0].read_bytes()

    def stop(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign.os, "fsync", stop)  # the same os module the store's atomic write uses
    with pytest.raises(KeyboardInterrupt):
        campaign.pack(_records(5), tmp_path)
    assert old[0].read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records-0.json.gz"]
    monkeypatch.undo()
    assert len(json.loads(gzip.decompress(campaign.pack(_records(5), tmp_path)[0].read_bytes()))) == 5
