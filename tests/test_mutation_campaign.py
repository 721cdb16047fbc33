"""#52: campaign.py's smaller parts, each against what it is documented to do (its mutation run's survivors): the
smoke step's cases, the tier summary the log carries, a GPU test command run as a real subprocess, the dry-run plan
and what it prints, the command's arguments, and which baselines count as importable. No GPU; no timing asserted."""

from __future__ import annotations

import argparse
import io
import sys
import time

import pytest

from normbench import campaign
from normbench.measure.sweep import SweepSummary

# --- the smoke step --------------------------------------------------------------------------------------------------

def test_smoke_cases_are_each_backends_smallest_forward_first_in_first_seen_order():
    cases = campaign.plan_tiers("cuda")[0].cases
    want, order = {}, []
    for c in cases:   # by hand: per backend, the smallest shape; at equal size a forward over a backward; then first
        best = want.get(c.backend)
        key = (c.shape.numel, c.pass_ != "fwd")
        if best is None or key < (best.shape.numel, best.pass_ != "fwd"):
            want[c.backend] = c
    ranked = sorted(want.values(), key=lambda c: (c.shape.numel, c.pass_ != "fwd"))
    order = [c.backend for c in ranked]
    got = campaign.smoke_cases(cases)
    assert [c.backend for c in got] == order and len(got) == len({c.backend for c in cases})
    assert all(c is want[c.backend] and c.pass_ == "fwd" for c in got)
    assert campaign.smoke_cases(list(reversed(cases)))[0].shape.numel == min(c.shape.numel for c in cases)
    assert campaign.smoke_cases([]) == []


# --- the summary a tier leaves in the log ----------------------------------------------------------------------------

def test_a_tier_summary_counts_every_outcome_and_keeps_the_first_fifty_failures():
    s = SweepSummary(written=7, already_done=3, out_of_time=True)
    s.skipped = [("a", "no GPU"), ("b", "no GPU"), ("c", "too big")]
    s.failed = [(f"case {i}", "boom") for i in range(60)]
    refused = [{"norm": "rmsnorm", "contract": False}, {"norm": "dyt", "contract": True},
               {"norm": "derf", "contract": True}, {"norm": "dyt", "contract": True}]
    cases = list(range(12))
    t0 = time.monotonic() - 5.0
    got = campaign._summary(s, cases, refused, t0, 321.5, left_out=[{"norm": "x", "backend": "y", "detail": "z"}])
    wall = got.pop("wall_s")
    assert 5.0 <= wall < 60 and wall == round(wall, 1)
    assert got == {"planned": 12, "written": 7, "already_done": 3, "skipped": 3,
                   "skip_reasons": {"no GPU": 2, "too big": 1}, "failed": s.failed[:50], "failed_count": 60,
                   "refused": refused, "refused_norms": ["derf", "dyt"],
                   "left_out": [{"norm": "x", "backend": "y", "detail": "z"}], "out_of_time": True,
                   "estimated_s": 321.5}
    assert campaign._skip_reasons(SweepSummary()) == {}
    assert campaign._summary(SweepSummary(), [], [], time.monotonic(), 0.0)["left_out"] == []


# --- a GPU test command, run as a subprocess -------------------------------------------------------------------------

@pytest.fixture
def probe_module(tmp_path, monkeypatch):
    """Modules for ``python -m``: ``envprobe`` prints TRITON_INTERPRET, ``N`` x's and ``<end>`` on stderr, exits with
    ``RC``; ``only_out`` and ``only_err`` print one line on one stream (flushed) and sleep a minute."""
    (tmp_path / "envprobe.py").write_text(
        "import os, sys\n"
        "print('TRITON_INTERPRET=' + os.environ.get('TRITON_INTERPRET', '<unset>'))\n"
        "print('x' * int(os.environ.get('N', '0')), end='')\n"
        "print('<end>', file=sys.stderr)\n"
        "sys.exit(int(os.environ.get('RC', '0')))\n")
    for name, stream in (("only_out", "sys.stdout"), ("only_err", "sys.stderr")):
        (tmp_path / f"{name}.py").write_text(
            f"import sys, time\nprint('<{name}>', file={stream}, flush=True)\ntime.sleep(60)\n")
    (tmp_path / "bad_bytes.py").write_text(   # a byte that is not UTF-8, then <bad_bytes>
        "import sys, time\nsys.stdout.buffer.write(b'\\xff<bad_bytes>\\n')\nsys.stdout.flush()\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return tmp_path


def test_a_gpu_test_command_runs_without_the_interpreter_and_logs_its_output(probe_module, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("N", "3000")
    monkeypatch.setenv("RC", "3")
    got = campaign._run_command(["envprobe", "--an-argument"], out, time.monotonic() + 120)
    log = (out / "gpu-tests.log").read_text()
    assert got["command"] == "envprobe --an-argument" and got["returncode"] == 3
    assert log == "TRITON_INTERPRET=0\n" + "x" * 3000 + "<end>\n"
    assert got["tail"] == log[-2000:] and len(got["tail"]) == 2000
    assert 0 <= got["wall_s"] < 120 and got["wall_s"] == round(got["wall_s"], 1)
    monkeypatch.setenv("N", "2000100")   # the log keeps the output's last 2,000,000 characters
    campaign._run_command(["envprobe"], out, time.monotonic() + 120)
    full = "TRITON_INTERPRET=0\n" + "x" * 2_000_100 + "<end>\n"
    assert (out / "gpu-tests.log").read_text() == full[-2_000_000:]
    got = campaign._run_command(["envprobe_not_there"], out, time.monotonic() + 120)
    assert got["returncode"] == 1 and "No module named envprobe_not_there" in got["tail"]
    assert "No module named envprobe_not_there" in (out / "gpu-tests.log").read_text()


def test_a_gpu_test_command_past_its_deadline_gets_ten_seconds_then_reads_timed_out(probe_module, tmp_path):
    """Each stream's output before the kill is kept (a byte that is not UTF-8 replaced), and an empty stream adds
    nothing (the cases at once: three commands in three threads, ten seconds in all)."""
    from concurrent.futures import ThreadPoolExecutor

    outs = {name: tmp_path / name for name in ("only_out", "only_err", "bad_bytes")}
    for d in outs.values():
        d.mkdir()
    with ThreadPoolExecutor(3) as pool:
        got = dict(zip(outs, pool.map(lambda kv: campaign._run_command([kv[0]], kv[1], time.monotonic() - 100),
                                      outs.items())))
    for name, d in outs.items():
        want = ("\ufffd" if name == "bad_bytes" else "") + f"<{name}>\n\ntimed out after 10s"
        assert got[name]["returncode"] == 124 and got[name]["tail"] == want, got[name]
        assert (d / "gpu-tests.log").read_text() == want


# --- the dry run ----------------------------------------------------------------------------------------------------

def test_the_dry_run_summary_and_print_are_each_tiers_plan():
    buf = io.StringIO()
    summary = campaign.dry_run("cuda", out=buf)
    tiers = campaign.plan_tiers("cuda")
    assert list(summary) == [t.number for t in tiers]
    lines = buf.getvalue().splitlines()
    for t in tiers:
        s = summary[t.number]
        est = campaign.estimate(t.cases)
        opt = {b: campaign.estimate(v) - campaign.CEILING_S - campaign.CHECK_S * len({c.norm for c in v})
               for b, v in t.optional.items()}
        assert s == {"title": t.title, "cases": len(t.cases), "optional_cases": {b: len(v) for b, v in
                                                                                 t.optional.items()},
                     "groups": len({c.group for c in t.cases}), "estimated_s": round(est, 1),
                     "estimated_optional_s": {b: round(v, 1) for b, v in opt.items()},
                     "commands": [" ".join(c) for c in t.commands]}
        i = lines.index(f"tier {t.number}: {t.title}")
        want = [f"  {len(t.cases)} cases in {s['groups']} groups, ~{est / 60:.1f} min"]
        want += [f"  + {len(v)} {b} cases where {b} imports, ~{opt[b] / 60:.1f} min" for b, v in t.optional.items()]
        want += [f"  + {' '.join(c)}" for c in t.commands]
        assert lines[i + 1:i + 1 + len(want)] == want, lines[i:i + 1 + len(want)]
    assert any(summary[t]["optional_cases"] for t in summary) and any(summary[t]["commands"] for t in summary)


def test_the_dry_run_prints_to_stdout_by_default(capsys):
    campaign.dry_run("cuda")
    assert capsys.readouterr().out.startswith("tier 1: ")


# --- the command line ------------------------------------------------------------------------------------------------

def test_the_campaign_command_and_its_defaults(monkeypatch):
    monkeypatch.setenv("OUT", "/tmp/device-out")
    monkeypatch.setenv("NORMBENCH_GIT_COMMIT", "abc123")
    parser = argparse.ArgumentParser(prog="normbench")
    sub = parser.add_subparsers(dest="command")
    campaign.register(sub)
    sp = sub.choices["campaign"]
    assert sp.description == campaign.__doc__.split("\n\n")[0]
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert helps["campaign"] == "tiered, resumable GPU kernel sweep packed into a few files (scripts/gpu-campaign.sh)"
    args = parser.parse_args(["campaign"])
    assert args.func is campaign.command
    assert (args.tier, args.out, args.resume, args.budget_s, args.commit, args.no_smoke, args.dry_run, args.json,
            args.unpack, args.into) == ("1", "/tmp/device-out", [], campaign.DEFAULT_BUDGET_S, "abc123", False,
                                        False, False, None, "results")
    monkeypatch.delenv("OUT")
    monkeypatch.delenv("NORMBENCH_GIT_COMMIT")
    p = argparse.ArgumentParser()
    campaign.add_arguments(p)
    args = p.parse_args(["--tier", "1,2", "--out", "o", "--resume", "a", "b", "--budget-s", "60", "--no-smoke",
                         "--dry-run", "--json", "--unpack", "x", "--into", "r"])
    assert (args.tier, args.out, args.resume, args.budget_s, args.commit, args.no_smoke, args.dry_run, args.json,
            args.unpack, args.into) == ("1,2", "o", ["a", "b"], 60.0, None, True, True, True, ["x"], "r")
    assert p.parse_args([]).out == "campaign-out"


def test_the_dry_run_command_prints_json_alone_on_stdout(capsys):
    p = argparse.ArgumentParser()
    campaign.add_arguments(p)
    assert campaign.command(p.parse_args(["--dry-run", "--json"])) == 0
    out, err = capsys.readouterr()
    import json

    assert json.loads(out)["1"]["cases"] == len(campaign.plan_tiers("cuda")[0].cases) and "tier 1: " in err


# --- which baselines count ------------------------------------------------------------------------------------------

def test_a_baseline_is_importable_where_it_runs_on_the_tokens_layout(monkeypatch):
    import dataclasses

    from normbench.measure import baselines

    # a CUDA-only baseline whose module imports here (as liger's would where it is installed): judged by the device
    fake = dataclasses.replace(baselines.REGISTRY[("liger", "rmsnorm")], backend="fakecuda", module="json")
    monkeypatch.setitem(baselines.REGISTRY, ("fakecuda", "rmsnorm"), fake)
    assert campaign._importable("fakecuda", "rmsnorm", "cuda") is True
    assert campaign._importable("fakecuda", "rmsnorm", "cpu") is False
    assert campaign._importable("native", "rmsnorm", "cuda") is True
    assert campaign._importable("native", "rmsnorm", "cpu") is True
    assert campaign._importable("rmsnorm", "native", "cuda") is False   # (backend, norm), in that order
    assert campaign._importable("native", "layernorm", "cuda") is False   # no native layernorm baseline
    if "liger_kernel" not in sys.modules:
        try:
            import liger_kernel  # noqa: F401
        except ImportError:
            assert campaign._importable("liger", "rmsnorm", "cuda") is False
