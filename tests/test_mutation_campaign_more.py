"""#52: campaign.run, _finish, _gate, main and the command against what their docstrings promise (the mutation run's
survivors): resuming keeps what came in and measures the rest, the log says partial until the run ends, the budget
stops new groups and the GPU test commands, an interruption packs what exists and exits 130, the smoke step says why
it wrote nothing, the gate judges each backend on its own device, and the command line's plumbing. Driven on the CPU
with a tiny tier, the copy-bandwidth ceiling stated (``_stub_ceiling``) and everything else real. No timing asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import pytest
import torch

from normbench import campaign
from normbench.measure.shapes import parse_shape

SMALL = "tokens-2x64x512"     # smaller than quick-8x128x512: the smoke step picks it
FAST = dict(warmup=1, min_reps=3, max_reps=3, min_time=0.0)


def _stub_ceiling(monkeypatch, tmp_path):
    """A fresh check cache, and a stated ceiling instead of a measured one (make_context, provenance and the rest
    stay real: the record says which command and settings measured it)."""
    from normbench.measure import ceiling

    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ceiling, "measure", lambda device="cpu", fresh=False: ceiling.Ceiling(50.0, "stated", device))


def _case(norm="rmsnorm", backend="eager", shape="quick-8x128x512", pass_="fwd", device="cpu"):
    from normbench.measure import planning

    return planning.Case(norm, backend, parse_shape(shape), "float32", pass_, device, "hot", 1, False, "campaign")


def _fast():
    from normbench.measure.timers import TimerSettings

    return TimerSettings(**FAST)


class _Stderr:
    """A stand-in for sys.stderr that keeps what is written and whether a flush followed each line at once."""

    def __init__(self):
        self.events: list = []

    def write(self, text):
        self.events.append(("w", text))
        return len(text)

    def flush(self):
        self.events.append(("f", None))

    def text(self) -> str:
        return "".join(t for kind, t in self.events if kind == "w")

    def flushed_lines(self) -> set[str]:
        """The lines written whole and flushed right after (print(msg, flush=True): msg, newline, flush)."""
        out = set()
        ev = self.events
        for i in range(1, len(ev) - 1):
            if ev[i] == ("w", "\n") and ev[i - 1][0] == "w" and ev[i + 1] == ("f", None):
                out.add(ev[i - 1][1])
        return out


def _log_file(out) -> dict:
    return json.loads((out / "campaign-log.json").read_text())


def _packed(out) -> dict:
    return {r["id"]: r for r in campaign.unpack([out])}


# --- resuming, the log, the checkpoints ------------------------------------------------------------------------------

def test_a_resumed_campaign_keeps_what_came_in_measures_only_the_rest_and_packs_the_union(monkeypatch, tmp_path,
                                                                                         capsys, one_thread):
    from normbench.records.provenance import GIT_COMMIT_ENV
    from normbench.records.store import iter_records

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setenv(GIT_COMMIT_ENV, "")   # run sets it; the test's end restores it
    a, b = _case(shape=SMALL), _case()
    err = _Stderr()
    monkeypatch.setattr(sys, "stderr", err)
    seen = []

    def on_group(entry):   # what a reader of the log sees right after a group: partial, the group's records packed
        seen.append((entry, _log_file(tmp_path / "out1"), sorted(_packed(tmp_path / "out1"))))

    t0 = time.monotonic()
    first = campaign.run((1,), out=tmp_path / "out1", work=tmp_path / "work1", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=[a])}, settings=_fast(), commit="c0ffee" * 5,
                         on_group=on_group)
    elapsed = time.monotonic() - t0
    monkeypatch.setattr(sys, "stderr", sys.__stderr__)
    assert capsys.readouterr().out == ""            # the default log is stderr's
    # the default log: each line printed to stderr and flushed at once (a remote runner's log survives a kill)
    lines = err.flushed_lines()
    assert f"smoke: 1 case(s), one per backend of tier 1 ({a.describe()})" in lines
    assert "tier 1: 0 written, 1 already done, 0 skipped, 0 failed, 0 backend(s) refused" in lines
    assert "%|" not in err.text() and "case/s" not in err.text()   # no progress bar in a remote runner's log
    [rec] = _packed(tmp_path / "out1").values()
    assert rec["provenance"]["command"] == "normbench campaign --tier 1"   # the smoke step is tier 1's
    assert rec["metrics"]["reps"] == FAST["max_reps"] and rec["check"]["status"] == "passed"
    assert os.environ[GIT_COMMIT_ENV] == "c0ffee" * 5
    log = _log_file(tmp_path / "out1")
    assert (log["commit"], log["budget_s"], log["torch"]) == ("c0ffee" * 5, campaign.DEFAULT_BUDGET_S,
                                                               torch.__version__)
    assert "partial" not in log and "partial" not in first and log["records"] == 1
    assert isinstance(log["wall_s"], float) and log["wall_s"] == round(log["wall_s"], 1)
    assert 0 <= log["wall_s"] <= elapsed + 0.05
    [(entry, during, packed)] = seen       # one group measured (the smoke step's), one checkpoint
    assert entry is first and during["partial"] is True and during["records"] == 1 and packed == [rec["id"]]
    assert [g["group"] for g in log["groups"]] == [f"rmsnorm/eager/{SMALL}/float32"]
    assert log["groups"][0]["cases"] == 1

    # Resumed in a fresh work tree: the carried record is not measured again, the other case is; both come back.
    logs: list[str] = []
    second = campaign.run((1,), out=tmp_path / "out2", work=tmp_path / "work2", device="cpu",
                          plan={1: campaign.Tier(1, "tiny", cases=[a, b])}, settings=_fast(), log=logs.append,
                          resume=[tmp_path / "out1"])
    assert "resumed: 1 records already measured" in logs
    assert second["problems"] == [] and campaign.exit_code(second) == 0
    assert (second["smoke"]["written"], second["smoke"]["already_done"]) == (0, 1)   # the smoke case came in
    assert (second["tiers"][1]["written"], second["tiers"][1]["already_done"]) == (1, 1)
    got = _packed(tmp_path / "out2")
    assert len(got) == 2 and got[rec["id"]] == rec       # the carried record as it came, the new one beside it
    assert {tuple(r["config"]["shape"]) for r in got.values()} == {(2, 64, 512), (8, 128, 512)}
    assert rec["id"] in {r["id"] for _, r in iter_records(tmp_path / "work2")}   # the work tree knows it


def test_a_spent_budget_starts_no_group_and_no_later_tier_and_the_log_says_out_of_time(monkeypatch, tmp_path):
    _stub_ceiling(monkeypatch, tmp_path)
    plan = {1: campaign.Tier(1, "tiny", cases=[_case()]), 2: campaign.Tier(2, "later", cases=[_case(shape=SMALL)])}
    logs: list[str] = []
    entry = campaign.run((1, 2), out=tmp_path / "out", work=tmp_path / "work", device="cpu", plan=plan,
                         settings=_fast(), log=logs.append, smoke=False, budget_s=0.0)
    assert entry is not None and entry["budget_s"] == 0.0
    assert entry["tiers"][1]["out_of_time"] is True and entry["tiers"][1]["written"] == 0
    assert list(entry["tiers"]) == [1]                     # tier 2 not started
    assert ("tier 1: 0 written, 0 already done, 0 skipped, 0 failed, 0 backend(s) refused (out of time: resume "
            "with these records)") in logs
    assert entry["problems"] == ["tier 1 wrote no records (1 planned, 0 already done, out of time)"]
    assert _log_file(tmp_path / "out") == json.loads(json.dumps(entry, default=str)) and entry["records"] == 0


# --- the GPU test commands of a tier ---------------------------------------------------------------------------------

@pytest.fixture
def command_modules(tmp_path, monkeypatch):
    """``python -m`` modules: ``ok_cmd`` prints its arguments and exits 0, ``bad_cmd`` exits 1."""
    (tmp_path / "ok_cmd.py").write_text("import sys\nprint('ok', *sys.argv[1:])\n")
    (tmp_path / "bad_cmd.py").write_text("import sys\nprint('bad', *sys.argv[1:])\nsys.exit(1)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_a_tiers_gpu_test_commands_run_in_turn_and_a_failed_one_is_a_problem(command_modules, monkeypatch,
                                                                              tmp_path):
    _stub_ceiling(monkeypatch, tmp_path)
    plan = {3: campaign.Tier(3, "commands only", commands=[["ok_cmd", "-q"], ["bad_cmd", "--x"]])}
    entry = campaign.run((3,), out=tmp_path / "out", work=tmp_path / "work", device="cpu", plan=plan,
                         log=lambda m: None, smoke=False)
    done = entry["commands"]
    assert [(d["command"], d["returncode"], d["tail"]) for d in done] == [("ok_cmd -q", 0, "ok -q\n"),
                                                                           ("bad_cmd --x", 1, "bad --x\n")]
    assert entry["problems"] == ["tier 3 wrote no records (0 planned, 0 already done)", "tier 3: bad_cmd --x exited 1"]
    assert "not_run" not in entry and (tmp_path / "out" / "gpu-tests.log").read_text() == "bad --x\n"
    assert _log_file(tmp_path / "out")["commands"] == done


def test_gpu_test_commands_past_the_budget_are_listed_as_not_run(command_modules, monkeypatch, tmp_path):
    _stub_ceiling(monkeypatch, tmp_path)
    plan = {3: campaign.Tier(3, "commands only", commands=[["ok_cmd", "-q"], ["bad_cmd", "--x"]])}
    entry = campaign.run((3,), out=tmp_path / "out", work=tmp_path / "work", device="cpu", plan=plan,
                         log=lambda m: None, smoke=False, budget_s=0.0)
    assert entry["not_run"] == ["ok_cmd -q", "bad_cmd --x"] and "commands" not in entry
    assert entry["problems"] == ["tier 3 wrote no records (0 planned, 0 already done)"]
    assert not (tmp_path / "out" / "gpu-tests.log").exists()


# --- interruptions ---------------------------------------------------------------------------------------------------

def test_an_interrupted_campaign_packs_what_exists_logs_it_and_exits_130(monkeypatch, tmp_path):
    from normbench.measure import sweep

    _stub_ceiling(monkeypatch, tmp_path)

    def stop(cases, ctx, refused=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "measure_group", stop)
    plan = {1: campaign.Tier(1, "tiny", cases=[_case()]), 2: campaign.Tier(2, "never", cases=[_case(shape=SMALL)])}
    for smoke in (True, False):
        out = tmp_path / f"out-{smoke}"
        logs: list[str] = []
        entry = campaign.run((1, 2), out=out, work=tmp_path / f"work-{smoke}", device="cpu", plan=plan,
                             settings=_fast(), log=logs.append, smoke=smoke)
        assert entry["interrupted"] is True and campaign.exit_code(entry) == 130
        assert logs[-1] == "interrupted: packing the records measured so far (re-run with --resume to go on)"
        assert _log_file(out)["interrupted"] is True and "partial" not in _log_file(out)
        assert list(entry["tiers"]) == ([] if smoke else [1])


def test_exit_codes():
    assert campaign.exit_code({"interrupted": True, "problems": []}) == 130
    assert campaign.exit_code({"interrupted": True, "problems": ["x"]}) == 130
    assert campaign.exit_code({"interrupted": False, "problems": ["x"]}) == 1
    assert campaign.exit_code({"problems": []}) == 0


# --- the smoke step: why it wrote nothing ----------------------------------------------------------------------------

def test_a_smoke_step_whose_cases_fail_says_how_many_and_its_summary_keeps_the_estimate_and_left_out(monkeypatch,
                                                                                                    tmp_path):
    from test_gate_devices import PROBE

    from normbench.discovery import REGISTRY
    from normbench.measure import headtohead, sweep

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)

    def broken(cases, ctx, refused=None):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(sweep, "measure_group", broken)    # a group of one backend
    monkeypatch.setattr(headtohead, "measure_set", broken)  # a set of several, head to head
    # two backends that pass the gate here (wrong_on_gpu is right on the CPU), one not available here
    cases = [_case("gate_probe", b) for b in ("eager", "wrong_on_gpu", "gpu_only")]
    kept = cases[:2]
    logs: list[str] = []
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=cases)}, settings=_fast(), log=logs.append)
    assert entry["stopped"] == "smoke" and entry["tiers"] == {}
    assert entry["problems"] == ["the smoke step wrote no records (2 failed, 0 skipped of 2): nothing would be "
                                 "measured; see the REFUSED, FAILED and skipped lines above (tier 1 had 3 cases)"]
    assert f"smoke: 2 case(s), one per backend of tier 1 ({kept[0].describe()}, {kept[1].describe()})" in logs
    for c in kept:
        assert [m for m in logs if m.startswith(f"smoke: FAILED {c.describe()}: RuntimeError: kernel exploded")]
    smoke = entry["smoke"]
    assert smoke["estimated_s"] == round(campaign.estimate(kept), 1) and smoke["failed_count"] == 2
    assert [(x["norm"], x["backend"]) for x in smoke["left_out"]] == [("gate_probe", "gpu_only")]

    # the same tier without the smoke step: the tier's own lines and summary
    logs.clear()
    entry = campaign.run((1,), out=tmp_path / "out2", work=tmp_path / "work2", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=cases)}, settings=_fast(), log=logs.append,
                         smoke=False)
    t1 = entry["tiers"][1]
    assert t1["estimated_s"] == round(campaign.estimate(kept), 1) and t1["planned"] == 2
    assert [x["backend"] for x in t1["left_out"]] == ["gpu_only"]
    assert [m for m in logs if m.startswith(f"tier 1: FAILED {kept[0].describe()}: RuntimeError: kernel exploded")]


def test_a_smoke_step_with_every_backend_refused_says_so(monkeypatch, tmp_path):
    from test_gate_devices import PROBE

    from normbench.discovery import REGISTRY

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    logs: list[str] = []
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=[_case("gate_probe", "wrong_on_cpu")])},
                         settings=_fast(), log=logs.append)
    assert "smoke: 0 case(s), one per backend of tier 1 (none: every backend was refused)" in logs
    assert entry["stopped"] == "smoke"


def test_a_case_the_core_skips_is_logged_with_its_reason(monkeypatch, tmp_path):
    from test_gate_devices import PROBE

    from normbench.discovery import REGISTRY

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    case = _case("gate_probe", shape="quick-8x32x32x32")   # tokens only: the core skips images, saying why
    logs: list[str] = []
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=[case])}, settings=_fast(), log=logs.append,
                         smoke=False)
    [(what, n)] = entry["tiers"][1]["skip_reasons"].items()
    assert n == 1 and f"tier 1: skipped 1: {what}" in logs and "images" in what


def test_two_refusals_in_a_tier_are_named_in_one_problem(monkeypatch, tmp_path):
    import dataclasses

    from test_gate_devices import PROBE

    from normbench.discovery import REGISTRY

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe2", dataclasses.replace(PROBE, name="gate_probe2"))
    cases = [_case("gate_probe", "wrong_on_cpu"), _case("gate_probe2", "wrong_on_cpu")]
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=cases)}, settings=_fast(), log=lambda m: None,
                         smoke=False)
    assert ("tier 1: 2 (norm, backend, device) refused by the check gate: gate_probe/wrong_on_cpu@cpu, "
            "gate_probe2/wrong_on_cpu@cpu") in entry["problems"]


# --- optional (baseline) backends -----------------------------------------------------------------------------------

def test_a_tiers_optional_backends_join_where_they_import_and_are_logged_where_not(monkeypatch, tmp_path):
    import dataclasses

    from normbench.measure import baselines

    _stub_ceiling(monkeypatch, tmp_path)
    fake = dataclasses.replace(baselines.REGISTRY[("liger", "rmsnorm")], backend="fakecuda", module="json")
    monkeypatch.setitem(baselines.REGISTRY, ("fakecuda", "rmsnorm"), fake)   # imports, but needs CUDA
    optional = {"native": [_case(backend="native"), _case(backend="native", shape=SMALL)],
                "fakecuda": [_case(backend="fakecuda")], "nothing": []}
    logs: list[str] = []
    entry = campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cpu",
                         plan={1: campaign.Tier(1, "tiny", cases=[_case()], optional=optional)}, settings=_fast(),
                         log=logs.append, smoke=False, budget_s=0.0)   # no group starts: the plan is what counts
    assert entry["tiers"][1]["planned"] == 3 and entry["tiers"][1]["refused"] == []   # eager + both native
    assert "tier 1: 1 fakecuda cases left out (fakecuda does not import here)" in logs
    assert not [m for m in logs if "native cases left out" in m or "nothing cases" in m]


# --- the gate, each backend on its own device ------------------------------------------------------------------------

def test_the_gate_judges_each_backend_on_the_device_its_case_runs_on(monkeypatch, tmp_path):
    from test_gate_devices import FAKE_CUDA, PROBE

    from normbench import check
    from normbench.discovery import REGISTRY

    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)   # a (fake) GPU kind the gate can check on
    cases = [_case("gate_probe", b, device=d) for b, d in (("eager", "cuda"), ("wrong_on_gpu", "cuda"),
                                                           ("wrong_on_gpu", "cpu"), ("gpu_only", "cuda"),
                                                           ("gpu_only", "cpu"))]
    cases.append(_case("rmsnorm", "native"))   # a baseline: checked through the baselines' provider
    logs: list[str] = []
    kept, refused, verdicts, left_out = campaign._gate(cases, logs.append)
    assert [(c.backend, c.device) for c in kept] == [("eager", "cuda"), ("wrong_on_gpu", "cpu"),
                                                     ("native", "cpu")]
    [r] = refused
    assert (r["norm"], r["backend"], r["device"], r["status"], r["contract"]) == ("gate_probe", "wrong_on_gpu",
                                                                                 "cuda", "failed", False)
    assert "differs from eager on cuda" in r["detail"] and f"REFUSED: {r['message']}" in logs
    assert left_out == [{"norm": "gate_probe", "backend": "gpu_only", "detail": left_out[0]["detail"]}]
    assert "does not run on cpu" in left_out[0]["detail"]
    assert any(m.startswith("checking gate_probe") for m in logs)   # the gate's own progress goes to the log
    assert set(verdicts) == {"gate_probe", "rmsnorm"}


# --- packed files in, the smoke step's choice ------------------------------------------------------------------------

def _real_records(n):
    """Real kernel records from the repository's results (written by the current writers)."""
    from conftest import REPO

    from normbench.records.store import iter_records

    out = []
    for _, rec in iter_records(f"{REPO}/results/kernel"):
        out.append(rec)
        if len(out) == n:
            break
    assert len(out) == n
    return out


def test_unpack_reads_several_folders_and_single_files_and_names_a_bad_file(tmp_path):
    recs = _real_records(3)
    campaign.pack(recs[:2], tmp_path / "a")
    campaign.pack(recs[2:], tmp_path / "b", prefix="more")
    assert [r["id"] for r in campaign.unpack([tmp_path / "a", tmp_path / "b"])] == [r["id"] for r in recs]
    assert [r["id"] for r in campaign.unpack([tmp_path / "b" / "more-0.json.gz"])] == [recs[2]["id"]]
    (tmp_path / "junk.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=r"junk\.json\.gz: not a packed record file \("):
        campaign.unpack([tmp_path / "junk.json.gz"])


def test_the_smoke_step_prefers_a_forward_at_the_smallest_shape_in_any_order():
    cases = campaign.plan_tiers("cuda")[0].cases
    for order in (cases, list(reversed(cases))):
        got = campaign.smoke_cases(order)
        assert {c.pass_ for c in got} == {"fwd"}
        assert {c.shape.numel for c in got} == {min(c.shape.numel for c in cases)}


def test_a_tier_summary_rounds_its_wall_time_to_a_tenth():
    from normbench.measure.sweep import SweepSummary

    got = campaign._summary(SweepSummary(), [], [], time.monotonic() - 5.55, 0.0)["wall_s"]
    assert isinstance(got, float) and got == round(got, 1) and 5.5 <= got < 60


# --- the command line ------------------------------------------------------------------------------------------------

def test_python_m_help_names_the_program_and_the_first_paragraph(capsys):
    with pytest.raises(SystemExit) as stop:
        campaign.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m normbench.campaign ")
    assert ("The GPU campaign: a tiered, resumable kernel sweep for a fresh GPU machine, packed to travel back in a "
            "few files.") in " ".join(out.split())
    assert "Made for a GPU machine" not in out


def _interrupting(signum=signal.SIGINT):
    def command(args):
        os.kill(os.getpid(), signum)   # as the device run's time limit or a Ctrl-C does
        time.sleep(5)
        raise AssertionError("the signal did not interrupt the command")
    return command


def test_an_interrupted_command_says_so_returns_130_and_gives_the_signals_back(monkeypatch, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(campaign, "command", _interrupting(signal.SIGTERM))
    assert campaign.main(["--dry-run"]) == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert {s: signal.getsignal(s) for s in before} == before   # not a program: the test's handlers are back


def test_as_a_program_an_interrupted_campaign_exits_130_at_once(monkeypatch, capsys):
    from normbench import processes
    from normbench.processes import interruption

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    exits = []
    monkeypatch.setattr(processes, "exit_stopped", lambda code: exits.append((code, interruption._State.stopping)))
    monkeypatch.setattr(campaign, "command", _interrupting())
    monkeypatch.setattr(sys, "argv", ["python -m normbench.campaign", "--dry-run"])
    try:
        assert campaign.main() == 130
    finally:   # a program's stop keeps its handlers and its deadline: undo that here
        interruption._State.done.set()
        interruption._State.stopping = False
        for s, h in before.items():
            signal.signal(s, h)
    assert exits == [(130, True)]      # out now, the stop still under way (the handlers kept)
    assert capsys.readouterr().err == "interrupted\n"


def test_the_campaign_command_runs_with_its_arguments_and_reports_problems(monkeypatch, capsys):
    monkeypatch.delenv("NORMBENCH_GIT_COMMIT", raising=False)
    monkeypatch.delenv("OUT", raising=False)
    calls = []
    entry = {"records": 3, "files": ["records-0.json.gz"], "wall_s": 1.5, "problems": ["tier 1: 1 case(s) failed",
                                                                                     "tier 1 wrote no records"],
             "tiers": {}}

    def fake_run(tiers, **kw):
        calls.append((tiers, kw))
        return dict(entry)

    monkeypatch.setattr(campaign, "run", fake_run)
    p = argparse.ArgumentParser()
    campaign.add_arguments(p)
    args = p.parse_args(["--tier", "1,models", "--out", "o", "--resume", "r1", "r2", "--budget-s", "60",
                         "--commit", "abc", "--no-smoke"])
    assert campaign.command(args) == 1
    assert calls == [((1, 4), {"out": "o", "resume": ["r1", "r2"], "budget_s": 60.0, "commit": "abc",
                               "smoke": False})]
    out, err = capsys.readouterr()
    assert json.loads(out) == {"records": 3, "files": ["records-0.json.gz"], "wall_s": 1.5,
                               "problems": entry["problems"]}
    assert err == ("normbench campaign: 2 problem(s) (campaign-log.json, 'problems'):\n"
                   "  tier 1: 1 case(s) failed\n  tier 1 wrote no records\n")
    entry["problems"] = []
    assert campaign.command(p.parse_args([])) == 0
    assert calls[-1] == ((1,), {"out": "campaign-out", "resume": [], "budget_s": campaign.DEFAULT_BUDGET_S,
                                "commit": None, "smoke": True})
    assert capsys.readouterr().err == ""
    entry["interrupted"] = True
    assert campaign.command(p.parse_args([])) == 130


def test_the_unpack_command_merges_and_says_how_many(tmp_path, capsys):
    from normbench.records.store import iter_records

    recs = _real_records(2)
    campaign.pack(recs, tmp_path / "back")
    p = argparse.ArgumentParser()
    campaign.add_arguments(p)
    assert campaign.command(p.parse_args(["--unpack", str(tmp_path / "back"), "--into", str(tmp_path / "res")])) == 0
    assert capsys.readouterr().out == f"2 record(s) merged into {tmp_path / 'res'}\n"
    assert sorted(r["id"] for _, r in iter_records(tmp_path / "res")) == sorted(r["id"] for r in recs)
    with pytest.raises(ValueError, match="--tier takes"):
        campaign.command(p.parse_args(["--tier", "9", "--unpack", str(tmp_path / "back")]))
