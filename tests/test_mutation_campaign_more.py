"""#52: campaign.run, _finish, _gate, main and the command against what their docstrings promise (the mutation run's
survivors): resuming keeps what came in and measures the rest, the log says partial until the run ends, the budget
stops new groups and the GPU test commands, an interruption packs what exists and exits 130, the smoke step says why
it wrote nothing, the gate judges each backend on its own device, and the command line's plumbing. Driven on the CPU
with a tiny tier, the copy-bandwidth ceiling stated (``_stub_ceiling``) and everything else real. No timing asserted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sys
import time
from pathlib import Path

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
    assert {r["provenance"]["command"] for r in got.values()} == {"normbench campaign --tier 1"}
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
    assert all(isinstance(d["wall_s"], float) and d["wall_s"] == round(d["wall_s"], 1) for d in done)   # a tenth
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

    sets = []

    def broken(cases, ctx, refused=None):
        raise RuntimeError("kernel exploded")

    def broken_set(cases, ctx, refused=None):
        sets.append([c.backend for c in cases])
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(sweep, "measure_group", broken)        # a group of one backend
    monkeypatch.setattr(headtohead, "measure_set", broken_set)  # a set of several, head to head
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
    assert sets == [["eager", "wrong_on_gpu"]]   # every tier head to head: the smoke step's two backends as one set
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
    assert sets == [["eager", "wrong_on_gpu"]] * 2


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
    import dataclasses

    from test_gate_devices import FAKE_CUDA, PROBE

    from normbench import check
    from normbench.discovery import REGISTRY

    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    monkeypatch.setitem(REGISTRY.specs, "gate_probe2", dataclasses.replace(PROBE, name="gate_probe2"))
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)   # a (fake) GPU kind the gate can check on
    cases = [_case("gate_probe", b, device=d) for b, d in (("eager", "cuda"), ("wrong_on_gpu", "cuda"),
                                                           ("wrong_on_gpu", "cpu"), ("gpu_only", "cuda"))]
    cases.append(_case("gate_probe2", "gpu_only"))   # not on the CPU: left out
    cases.append(_case("rmsnorm", "native"))   # a baseline: checked through the baselines' provider
    logs: list[str] = []
    kept, refused, verdicts, left_out = campaign._gate(cases, logs.append)
    assert [(c.norm, c.backend, c.device) for c in kept] == [
        ("gate_probe", "eager", "cuda"), ("gate_probe", "wrong_on_gpu", "cpu"), ("gate_probe", "gpu_only", "cuda"),
        ("rmsnorm", "native", "cpu")]
    [r] = refused
    assert (r["norm"], r["backend"], r["device"], r["status"], r["contract"]) == ("gate_probe", "wrong_on_gpu",
                                                                                 "cuda", "failed", False)
    assert "differs from eager on cuda" in r["detail"] and f"REFUSED: {r['message']}" in logs
    assert left_out == [{"norm": "gate_probe2", "backend": "gpu_only", "detail": left_out[0]["detail"]}]
    assert "does not run on cpu" in left_out[0]["detail"]
    assert any(m.startswith("checking gate_probe") for m in logs)   # the gate's own progress goes to the log
    assert set(verdicts) == {"gate_probe", "gate_probe2", "rmsnorm"}
    assert "left out: gate_probe2/gpu_only on cpu: " + left_out[0]["detail"] in logs


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
    from normbench.records.schema import validate_record

    recs = _real_records(3)
    campaign.pack(recs[:2], tmp_path / "a")
    campaign.pack(recs[2:], tmp_path / "b", prefix="more")
    assert [r["id"] for r in campaign.unpack([tmp_path / "a", tmp_path / "b"])] == [r["id"] for r in recs]
    assert [r["id"] for r in campaign.unpack([tmp_path / "b" / "more-0.json.gz"])] == [recs[2]["id"]]
    (tmp_path / "junk.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=r"junk\.json\.gz: not a packed record file \("):
        campaign.unpack([tmp_path / "junk.json.gz"])
    (tmp_path / "text.json.gz").write_bytes(gzip.compress(b"[not json"))
    with pytest.raises(ValueError, match=r"text\.json\.gz: not a packed record file \("):
        campaign.unpack([tmp_path / "text.json.gz"])
    second_bad = [recs[0], {"id": "x"}]
    (tmp_path / "bad.json.gz").write_bytes(gzip.compress(json.dumps(second_bad).encode()))
    with pytest.raises(ValueError) as bad:
        campaign.unpack([tmp_path / "bad.json.gz"])
    problems = validate_record({"id": "x"})   # the store's own reasons, each named
    assert len(problems) > 1 and str(bad.value) == f"{tmp_path / 'bad.json.gz'}: record 1 is invalid: " + "; ".join(
        problems)


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
    from normbench._stdout import machine_readable

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
    with machine_readable():   # as under --json: only the document reaches stdout
        assert campaign.command(args) == 1
    assert calls == [((1, 4), {"out": "o", "resume": ["r1", "r2"], "budget_s": 60.0, "commit": "abc",
                               "smoke": False})]
    out, err = capsys.readouterr()
    assert json.loads(out) == {"records": 3, "files": ["records-0.json.gz"], "wall_s": 1.5,
                               "problems": entry["problems"]}
    assert err == ("normbench campaign: 2 problem(s) (campaign-log.json, 'problems'):\n"
                   "  tier 1: 1 case(s) failed\n  tier 1 wrote no records\n")
    assert campaign.command(args) == 1   # the same without the diversion: the problems still go to stderr alone
    out, err = capsys.readouterr()
    assert json.loads(out)["problems"] == entry["problems"] and len(out.splitlines()) == 1
    assert err.splitlines() == ["normbench campaign: 2 problem(s) (campaign-log.json, 'problems'):",
                                "  tier 1: 1 case(s) failed", "  tier 1 wrote no records"]
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


# --- run: where it runs, what it plans, where it writes ---------------------------------------------------------------

def test_a_campaign_on_cuda_without_a_gpu_stops_at_once_and_says_to_plan_with_dry_run(monkeypatch, tmp_path):
    plan = {1: campaign.Tier(1, "empty")}
    want = "normbench campaign needs a CUDA device (use --dry-run to plan on this machine)"
    for kw in ({"device": "cuda"}, {"device": "cuda:1"}, {}):   # the default device is CUDA
        with pytest.raises(SystemExit) as stop:
            campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", plan=plan, log=lambda m: None,
                         smoke=False, **kw)
        assert stop.value.code == want
    assert not (tmp_path / "out").exists()


def test_run_plans_the_tiers_for_its_device_and_writes_to_campaign_out_by_default(monkeypatch, tmp_path):
    asked = []

    def plan_tiers(device):
        asked.append(device)
        return [campaign.Tier(1, "empty")]

    monkeypatch.setattr(campaign, "plan_tiers", plan_tiers)
    monkeypatch.chdir(tmp_path)
    entry = campaign.run((1,), work=tmp_path / "work", device="cpu", log=lambda m: None, smoke=False)
    assert asked == ["cpu"]
    assert _log_file(tmp_path / "campaign-out") == json.loads(json.dumps(entry, default=str))
    text = (tmp_path / "campaign-out" / "campaign-log.json").read_text()
    assert text.startswith('{\n "commit": null,\n "tiers": {\n  "1": {\n   "planned": 0,')   # indented for people


def test_the_work_tree_is_the_argument_else_the_environments_else_one_under_tmp(monkeypatch, tmp_path):
    from normbench.records import store

    recs = _real_records(1)
    campaign.pack(recs, tmp_path / "back")
    written = []
    monkeypatch.setattr(store, "write_records", lambda records, root: written.append((len(records), root)))
    plan = {1: campaign.Tier(1, "empty")}

    def go(**kw):
        campaign.run((1,), out=tmp_path / "out", device="cpu", plan=plan, log=lambda m: None, smoke=False,
                     resume=[tmp_path / "back"], **kw)
        return written.pop()

    monkeypatch.delenv("NORMBENCH_CAMPAIGN_WORK", raising=False)
    assert go() == (1, campaign.Path("/tmp/normbench-campaign-work"))
    monkeypatch.setenv("NORMBENCH_CAMPAIGN_WORK", str(tmp_path / "env-work"))
    assert go() == (1, tmp_path / "env-work")
    assert go(work=tmp_path / "given") == (1, tmp_path / "given")


def test_a_cuda_only_baseline_that_imports_joins_the_tier_on_cuda(monkeypatch, tmp_path):
    import dataclasses

    from normbench import device as seam
    from normbench.measure import baselines

    _stub_ceiling(monkeypatch, tmp_path)
    monkeypatch.setattr(seam, "available", lambda *a, **k: True)   # as on a GPU machine
    fake = dataclasses.replace(baselines.REGISTRY[("liger", "rmsnorm")], backend="fakecuda", module="json")
    monkeypatch.setitem(baselines.REGISTRY, ("fakecuda", "rmsnorm"), fake)
    logs: list[str] = []
    campaign.run((1,), out=tmp_path / "out", work=tmp_path / "work", device="cuda", log=logs.append, smoke=False,
                 plan={1: campaign.Tier(1, "t", optional={"fakecuda": [_case(backend="fakecuda", device="cuda")]})},
                 budget_s=0.0)
    assert not [m for m in logs if "does not import here" in m]
    assert [m for m in logs if "rmsnorm/fakecuda" in m or "fakecuda backend" in m]   # the gate saw it


# --- the cost model, by hand -----------------------------------------------------------------------------------------

def _cuda(norm, backend, shape, dtype="bfloat16", pass_="fwd"):
    from normbench.measure import planning

    return planning.Case(norm, backend, parse_shape(shape), dtype, pass_, "cuda", "cold", 1, False, "campaign")


def test_bytes_moved_per_case_by_pass_dtype_and_kind():
    n = 4096 * 1024
    assert campaign._case_bytes(_cuda("rmsnorm", "eager", "llm-4096x1024")) == 2 * 2 * n        # read x, write y
    assert campaign._case_bytes(_cuda("rmsnorm", "eager", "llm-4096x1024", pass_="bwd")) == 3 * 2 * n
    assert campaign._case_bytes(_cuda("rmsnorm", "eager", "llm-4096x1024", pass_="fwd+bwd")) == 5 * 2 * n
    assert campaign._case_bytes(_cuda("rmsnorm", "eager", "llm-4096x1024", "float32")) == 2 * 4 * n
    assert campaign._case_bytes(_cuda("add_rmsnorm", "eager", "llm-4096x1024")) == 2 * 2 * 2 * n   # residual: twice
    assert campaign._case_bytes(_cuda("qk_norm", "eager", "llm-4096x1024", pass_="bwd")) == 2 * 3 * 2 * n
    assert campaign._case_bytes(_cuda("layernorm", "eager", "images-2x8x4x4")) == 2 * 2 * (2 * 8 * 4 * 4)
    # an attention norm sees (batch, heads, seq, head_dim): width 1000 is 15 heads of 64, 960 of its 1000 columns
    assert campaign._case_bytes(_cuda("qk_norm", "eager", "8x1000")) == 2 * 2 * 2 * (8 * 15 * 64)


def test_the_estimate_of_one_case_is_its_repetitions_setup_and_checks():
    one = _cuda("rmsnorm", "eager", "llm-4096x1024")
    t = 2 * 2 * 4096 * 1024 / 2.0e12        # bytes at the assumed 2 TB/s
    spin = 2.0 * 2.5e-4                     # keep-ahead: SPIN_FACTOR x the host's 0.25 ms per repetition
    fixed = 0.2 + 1.0 + 3.0 + 10.0          # per case, eager's setup, the ceiling, one norm's check
    # 0.1 s of minimum time is 11920 repetitions: capped at 200, plus 10 warm-up
    assert campaign.estimate([one]) == pytest.approx(210 * (t + 2.5e-4 + spin) + fixed, rel=1e-12)
    assert campaign.estimate([one], {"keep_ahead": False}) == pytest.approx(210 * (t + 2.5e-4) + fixed, rel=1e-12)
    assert campaign.estimate([one], {"keep_ahead": True}) == campaign.estimate([one])
    # fewer repetitions when the minimum time is short (int(0.001 / t) = 119), more warm-up as asked
    assert campaign.estimate([one], {"min_time": 0.001, "warmup": 1, "keep_ahead": False}) == pytest.approx(
        120 * (t + 2.5e-4) + fixed, rel=1e-12)
    # never fewer than min_reps
    assert campaign.estimate([one], {"min_time": 0.0, "warmup": 0, "keep_ahead": False}) == pytest.approx(
        20 * (t + 2.5e-4) + fixed, rel=1e-12)
    # a backward pays half its bytes' time again (the recompute of the saved statistics)
    bwd = _cuda("rmsnorm", "eager", "llm-4096x1024", pass_="bwd")
    tb = 3 * 2 * 4096 * 1024 / 2.0e12
    assert campaign.estimate([bwd], {"keep_ahead": False}) == pytest.approx(210 * (1.5 * tb + 2.5e-4) + fixed,
                                                                             rel=1e-12)


def test_a_tiny_case_is_timed_as_if_it_took_at_least_a_tenth_of_a_microsecond():
    tiny = _cuda("rmsnorm", "eager", "tokens-1x1x64")   # 256 bytes: 0.13 ns at 2 TB/s
    t = 256 / 2.0e12
    got = campaign.estimate([tiny], {"max_reps": 10**9, "warmup": 0, "keep_ahead": False})
    assert got == pytest.approx(int(0.1 / 1e-7) * (t + 2.5e-4) + 0.2 + 1.0 + 3.0 + 10.0, rel=1e-12)


def test_setup_is_paid_once_per_group_by_its_backend_and_the_check_once_per_norm():
    off = {"keep_ahead": False, "warmup": 0, "min_reps": 1, "max_reps": 1}
    a = _cuda("rmsnorm", "eager", "llm-4096x1024")
    a2 = _cuda("rmsnorm", "eager", "llm-4096x1024", pass_="fwd+bwd")       # the same group as a
    rep = {c: campaign.estimate([c], off) - 0.2 - 1.0 - 3.0 - 10.0 for c in (a, a2)}
    assert campaign.estimate([a, a2], off) == pytest.approx(rep[a] + rep[a2] + 0.4 + 1.0 + 3.0 + 10.0)
    setups = {"eager": 1.0, "compile": 8.0, "triton": 4.0, "liger": 3.0, "quack": 3.0}
    for backend, setup in setups.items():
        c = _cuda("rmsnorm", backend, "llm-4096x1024")
        assert campaign.estimate([c], off) == pytest.approx(rep[a] + 0.2 + setup + 3.0 + 10.0), backend
    two_norms = [a, _cuda("layernorm", "compile", "llm-4096x1024")]
    assert campaign.estimate(two_norms, off) == pytest.approx(2 * rep[a] + 0.4 + 1.0 + 8.0 + 3.0 + 20.0)


# --- the plan ------------------------------------------------------------------------------------------------------

def test_every_planned_case_is_a_cold_single_thread_campaign_case_on_the_device_asked():
    from normbench.measure import baselines

    assert {c.device for c in campaign.plan_tiers()[0].cases} == {"cuda"}   # planned for the GPU by default
    for device in ("cuda", "cpu"):
        tiers = campaign.plan_tiers(device)
        assert [t.number for t in tiers] == [1, 2, 3, 4]
        for t in tiers:
            every = t.cases + [c for v in t.optional.values() for c in v]
            assert every
            assert {(c.device, c.timing, c.threads, c.graphs, c.harness) for c in every} == {
                (device, "cold", 1, False, "campaign")}, t.number
            # the baselines' cases are optional (they run where their library imports), the rest are not
            assert all(b in baselines.BASELINES and {c.backend for c in v} == {b} for b, v in t.optional.items())
            assert not [c for c in t.cases if c.backend in baselines.BASELINES], t.number
        assert tiers[0].optional and tiers[3].optional and tiers[1].optional


def test_the_tiers_titles_and_tier_3s_gpu_test_command():
    t1, t2, t3, t4 = campaign.plan_tiers("cuda")
    assert t1.title == "LN/RMSNorm/DyT/add+RMSNorm x LLM widths x bf16 x 3 passes x eager/compile/triton (+liger)"
    assert t2.title == "the rest of the zoo (LLM + vision shapes, bf16 + fp32), and float32 for tier 1's norms"
    assert t3.title == "ASV's small grid through the core, and the GPU kernel tests (compiled Triton)"
    assert t4.title == ("models: the catalog LLMs' sites at prefill and decode shapes x bf16 x fwd, fwd+bwd x every "
                        "backend, head to head")
    assert t3.commands == [["pytest", "-q", "-p", "no:cacheprovider", "tests/test_triton_kernels.py"]]
    assert t1.commands == t2.commands == t4.commands == []


def test_tier_3_is_asvs_small_grid(monkeypatch):
    monkeypatch.setenv("NORMBENCH_ASV_GRID", "quick")   # whatever ASV's own runs are set to
    t3 = campaign.plan_tiers("cuda")[2]
    assert {(c.backend, c.shape.label, c.dtype, c.pass_) for c in t3.cases} == {
        ("eager", "quick-8x128x512", "float32", "fwd+bwd")}
    assert sorted({c.norm for c in t3.cases}) == ["dyt", "layernorm", "rmsnorm"] and len(t3.cases) == 3
    assert t3.optional == {}


def test_tier_2_is_the_rest_of_the_zoo_and_tier_1s_norms_in_float32_and_their_other_baselines():
    from normbench.discovery import REGISTRY
    from normbench.measure import baselines
    from normbench.measure.shapes import softmax_shapes, vision_shapes

    t2 = campaign.plan_tiers("cuda")[1]
    every = t2.cases + [c for v in t2.optional.values() for c in v]
    assert {c.backend for c in t2.cases} <= {"eager", "compile", "triton"}
    assert set(t2.optional) <= set(baselines.BASELINES) and all(c.backend == b for b, v in t2.optional.items()
                                                                 for c in v)
    rest = set(REGISTRY.names()) - set(campaign.TIER1_NORMS)
    assert {c.norm for c in t2.cases} == rest | set(campaign.TIER1_NORMS)
    assert {c.dtype for c in every} == {"bfloat16", "float32"}
    for c in every:
        if c.norm in campaign.TIER1_NORMS:   # tier 1 has them in bf16 on its backends and liger
            assert c.shape.label in campaign.TIER1_SHAPES
            assert c.dtype == "float32" or (c.backend in baselines.BASELINES and c.backend != "liger"), c.describe()
    labels = {c.shape.label for c in every}
    assert labels == set(campaign.TIER1_SHAPES) | {s.label for s in vision_shapes() + softmax_shapes()}
    for c in every:
        spec = REGISTRY.get(c.norm)
        assert c.shape.layout in spec.layouts and (c.shape.shape_class == "softmax") == (spec.kind == "softmax")
        base = baselines.REGISTRY.get((c.backend, c.norm))
        if base is not None:
            assert c.shape.layout in base.layouts and c.dtype in base.dtypes
            assert c.pass_ == "fwd" or not base.forward_only
    by_norm = {}
    for c in t2.cases:
        by_norm.setdefault(c.norm, set()).add(c.mode)
    for norm, modes in by_norm.items():   # a norm with running statistics in both modes, the others in training
        assert modes == ({"train", "eval"} if REGISTRY.get(norm).running_state else {"train"}), norm
    assert any(REGISTRY.get(n).running_state for n in by_norm)
    assert {c.pass_ for c in t2.cases} == {"fwd", "bwd", "fwd+bwd"}


def test_a_baselines_layouts_dtypes_and_forward_only_limit_its_cases(monkeypatch):
    import dataclasses

    from normbench.measure import baselines

    fo = dataclasses.replace(baselines.REGISTRY[("liger", "rmsnorm")], backend="fo", forward_only=True,
                             dtypes=("float32",), layouts=("tokens",))
    monkeypatch.setitem(baselines.REGISTRY, ("fo", "rmsnorm"), fo)
    monkeypatch.setattr(baselines, "backends_for", lambda norm: ("fo",) if norm == "rmsnorm" else ())
    got = campaign._cases(("rmsnorm",), ("llm-4096x1024", "images-2x8x4x4"), ("bfloat16", "float32"),
                          ("fo", "nope", "eager"), "cuda")   # one left out for its layout, one unknown: the rest go on
    assert [(c.backend, c.shape.layout, c.dtype, c.pass_) for c in got if c.backend == "fo"] == [
        ("fo", "tokens", "float32", "fwd")]
    eager = {(c.shape.label, c.dtype, c.pass_) for c in got if c.backend == "eager"}
    assert eager == {(s, d, p) for s in ("llm-4096x1024", "images-2x8x4x4") for d in ("bfloat16", "float32")
                     for p in ("fwd", "bwd", "fwd+bwd")}
    assert {c.backend for c in got} == {"eager", "fo"}
    assert [c.mode for c in got] == ["train"] * len(got)
    modes = campaign._cases(("batchnorm",), ("images-2x8x4x4",), ("float32",), ("eager",), "cuda", modes=("eval",))
    assert {c.mode for c in modes} == {"eval"} and len(modes) == 3


def test_the_models_tier_takes_each_llm_sites_shapes_once_in_catalog_order(monkeypatch):
    from normbench import catalog
    from normbench.measure.shapes import shape_from_dims

    others_first = sorted(catalog.models(), key=lambda m: m.family == "llm")
    assert others_first[0].family != "llm"
    monkeypatch.setattr(catalog, "models", lambda: others_first)
    got = campaign.model_shapes()
    want: dict = {}
    for m in catalog.models():
        if m.family == "llm":
            for ss in catalog.site_shapes(m):
                want.setdefault(ss.norm, [])
                label = shape_from_dims(ss.layout, ss.dims).label
                if label not in want[ss.norm]:
                    want[ss.norm].append(label)
    assert got == want and all(len(v) == len(set(v)) for v in got.values())
    assert any(m.family != "llm" for m in catalog.models())   # the vision models are not in it
    t4 = campaign.plan_tiers("cuda")[3]
    assert {c.shape.label for c in t4.cases} <= {x for v in got.values() for x in v}


# --- packing, parsing ----------------------------------------------------------------------------------------------

def test_packing_nothing_writes_no_file_and_removes_the_old_ones_of_its_prefix_only(tmp_path):
    campaign.pack(_records_n(3), tmp_path)
    campaign.pack(_records_n(1), tmp_path, prefix="other")
    assert campaign.pack([], tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-0.json.gz"]
    assert campaign.pack([], tmp_path / "new" / "dir") == [] and (tmp_path / "new" / "dir").is_dir()


def test_packing_is_deterministic_and_splits_in_halves_until_each_file_fits(tmp_path):
    recs = _records_n(8, pad=300)
    one = campaign.pack(recs, tmp_path / "a")
    again = campaign.pack(recs, tmp_path / "b")
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in again]   # no timestamp in the gzip header
    assert [p.name for p in one] == ["records-0.json.gz"]
    blob = one[0].read_bytes()
    assert blob[4:8] == bytes(4)                        # gzip's MTIME field: zero
    assert gzip.decompress(blob).decode().startswith('[{"id":"r0","pad":"')   # compact JSON
    size = one[0].stat().st_size
    halves = campaign.pack(recs, tmp_path / "c", max_bytes=size - 1, max_files=8)
    counts = [len(json.loads(gzip.decompress(p.read_bytes()))) for p in halves]
    assert counts == [4, 4] and [p.name for p in halves] == ["records-0.json.gz", "records-1.json.gz"]
    assert campaign.pack(recs, tmp_path / "d", max_bytes=size, max_files=1)[0].read_bytes() == one[0].read_bytes()
    with pytest.raises(ValueError, match="^one record is larger than a packed file may be$"):
        campaign.pack(recs[:1], tmp_path / "e", max_bytes=10)
    with pytest.raises(ValueError, match=rf"^8 records need 2 files of {size - 1} bytes; at most 1 may come back: "
                                         "run fewer tiers per session$"):
        campaign.pack(recs, tmp_path / "f", max_bytes=size - 1, max_files=1)
    assert not (tmp_path / "f").exists() or not list((tmp_path / "f").iterdir())   # nothing written


def _records_n(n, pad=0):
    import random

    rng = random.Random(1)
    return [{"id": f"r{i}", "pad": "".join(rng.choice("0123456789abcdef") for _ in range(pad))} for i in range(n)]


def test_tiers_are_parsed_with_spaces_and_empty_items_and_anything_else_is_refused():
    assert campaign.parse_tiers(" all ") == (1, 4, 2, 3)
    assert campaign.parse_tiers("1, 2,,3") == (1, 2, 3) and campaign.parse_tiers("4") == (4,)
    assert campaign.parse_tiers("models,2") == (4, 2) and campaign.parse_tiers("1, models ") == (1, 4)
    for bad in ("", ",", "0", "1,5", "x", "all,1", "ALL"):
        with pytest.raises(ValueError, match=r"^--tier takes 1, 2, 3, 4 or models \(comma-separated\) or all, got "
                                             + repr(bad).replace("(", r"\(") + "$"):
            campaign.parse_tiers(bad)


def test_the_help_is_the_committed_one(monkeypatch, capsys):
    """``python -m normbench.campaign --help`` as committed (tests/fixtures/campaign_help.txt; regenerate it with
    ``COLUMNS=100 python -m normbench.campaign --help`` when the help is meant to change)."""
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as stop:
        campaign.main(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == (Path(__file__).parent / "fixtures" / "campaign_help.txt").read_text()


def test_the_dry_run_command_prints_the_plan_for_people_on_stdout_and_as_indented_json_with_json(capsys):
    from normbench._stdout import machine_readable

    p = argparse.ArgumentParser()
    campaign.add_arguments(p)
    assert campaign.command(p.parse_args(["--dry-run"])) == 0
    out, err = capsys.readouterr()
    assert out.startswith("tier 1: LN/RMSNorm") and err == ""
    with machine_readable():
        assert campaign.command(p.parse_args(["--dry-run", "--json", "--tier", "models"])) == 0
    out, err = capsys.readouterr()
    assert out.startswith('{\n "1": {\n  "title": ') and err.startswith("tier 1: LN/RMSNorm")
    assert list(json.loads(out)) == ["1", "2", "3", "4"]
