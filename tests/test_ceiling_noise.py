"""The copy ceiling on a noisy host: more repetitions, retried when unsteady, re-measured during a long sweep, while
a busy machine is still flagged (docs/measurement.md, "Noise")."""

from __future__ import annotations

import pytest
import torch

from normbench import results
from normbench.measure import ceiling, group, noise, planning, sweep
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
TINY = Shape("tiny-tokens", "tokens", (16, 64), "quick")


def _ceil(spread, gbps=20.0):
    return ceiling.Ceiling(gbps, f"fake copy, spread {spread}", "cpu", spread)


def test_an_unsteady_measurement_is_taken_again_and_the_steady_one_kept():
    seq, slept = iter([_ceil(0.30), _ceil(0.02, 25.0)]), []
    got = ceiling.steady(lambda: next(seq), sleep=slept.append)
    assert (got.gbps, got.spread, got.attempt) == (25.0, 0.02, 2)
    assert "attempt 2 of 3" in got.method and len(slept) == 1
    # a steady first measurement is kept as it is
    first = ceiling.steady(lambda: _ceil(0.01), sleep=slept.append)
    assert first.attempt == 1 and "attempt" not in first.method and len(slept) == 1


def test_a_machine_unsteady_in_every_attempt_stays_unsteady():
    calls = []

    def once():
        calls.append(1)
        return _ceil(0.25 + 0.01 * len(calls))

    got = ceiling.steady(once, sleep=lambda s: None)
    assert len(calls) == ceiling.ATTEMPTS and got.attempt == ceiling.ATTEMPTS
    assert got.spread == pytest.approx(0.25 + 0.01 * ceiling.ATTEMPTS)
    assert noise.reasons({"ceiling_spread": got.spread})  # still flags the run's records


def test_the_cpu_ceiling_times_many_copies():
    got = ceiling.measure_cpu(nbytes=2**20)
    assert f"median of {ceiling.CPU_REPS}" in got.method
    assert got.gbps > 0 and got.spread is not None


def _ctx(spread):
    return group.Context(20.0, "first ceiling", results.provenance(command="pytest", device="cpu"), FAST, None,
                         ceiling_spread=spread, ceiling_at=100.0)


def test_the_context_is_refreshed_only_when_its_ceiling_is_old(monkeypatch):
    monkeypatch.setattr(ceiling, "measure", lambda device, fresh=False: _ceil(0.03, 22.0) if fresh else None)
    ctx = _ctx(0.4)
    assert group.refresh_context(ctx, "cpu", every_s=60, now=lambda: 150.0) is ctx
    new = group.refresh_context(ctx, "cpu", every_s=60, now=lambda: 161.0)
    assert (new.ceiling_gbps, new.ceiling_spread, new.ceiling_at) == (22.0, 0.03, 161.0)
    assert new.run_id == ctx.run_id and new.provenance is ctx.provenance and new.settings is ctx.settings


def test_a_disturbance_at_the_start_flags_only_the_groups_measured_before_the_recheck(monkeypatch, tmp_path):
    """The ceiling was unsteady when the run started and when its first group began, steady from the second on:
    only the first group's records are noisy (before, one unsteady ceiling flagged the whole run)."""
    monkeypatch.setattr(noise, "machine_load", lambda own=0.0, busy=None: {"load1": 0.0, "cores": 2,
                                                               "background_load_per_core": 0.0})
    monkeypatch.setattr(noise, "REL_IQR_LIMIT", float("inf"))
    monkeypatch.setattr(ceiling, "RECHECK_S", 0.0)
    seq = iter([_ceil(0.30), _ceil(0.30), _ceil(0.02), _ceil(0.02)])
    monkeypatch.setattr(ceiling, "measure", lambda device="cpu", fresh=False: next(seq))
    cases = [planning.Case(norm, "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())
             for norm in ("dyt", "rmsnorm")]
    logged = []
    sweep.run_sweep(cases, tmp_path, settings=FAST, progress=False, log=logged.append)
    recs = {r["norm"]["name"]: r for _, r in results.iter_records(tmp_path)}
    first, second = (recs[g[0].norm] for g in sweep._groups(cases))
    assert "noisy" in first["flags"] and "copy ceiling" in first["flag_reasons"]["noisy"]
    assert "noisy" not in second["flags"]
    assert second["metrics"]["noise"]["ceiling_spread"] == 0.02
    assert sum("ceiling re-measured" in m for m in logged) == 2


def test_a_busy_machine_is_still_flagged_with_a_steady_ceiling(monkeypatch, tmp_path):
    monkeypatch.setattr(noise, "load_average", lambda: 64.0)
    monkeypatch.setattr(noise, "busy_cores", lambda: 64.0)   # the half-second sample confirms it
    monkeypatch.setattr(ceiling, "measure", lambda device="cpu", fresh=False: _ceil(0.01))
    cases = [planning.Case("dyt", "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())]
    sweep.run_sweep(cases, tmp_path, settings=FAST, progress=False, log=lambda m: None)
    [rec] = [r for _, r in results.iter_records(tmp_path)]
    assert "noisy" in rec["flags"] and "background load" in rec["flag_reasons"]["noisy"]


def test_a_ceiling_far_below_the_runs_best_flags_the_records_judged_by_it(monkeypatch):
    """A process on the other core halved the CPU copy ceiling (25 -> 12 GB/s) while the load average lagged: the
    re-measured ceiling's drop below the run's best measurement flags the records judged by it."""
    seq = iter([_ceil(0.02, 12.0), _ceil(0.02, 23.0)])
    monkeypatch.setattr(ceiling, "measure", lambda device, fresh=False: next(seq))
    ctx = group.refresh_context(_ctx(0.02), "cpu", every_s=0, now=lambda: 200.0)
    assert (ctx.ceiling_gbps, ctx.ceiling_best_gbps) == (12.0, 20.0)
    drop = 1 - 12.0 / 20.0
    assert any("below the run's best" in r for r in noise.reasons({"ceiling_drop": drop}))
    ctx = group.refresh_context(ctx, "cpu", every_s=0, now=lambda: 300.0)
    assert (ctx.ceiling_gbps, ctx.ceiling_best_gbps) == (23.0, 23.0)  # the best is the highest so far
    assert noise.reasons({"ceiling_drop": 0.0}) == []
    assert noise.reasons({"ceiling_drop": noise.CEILING_DROP_LIMIT - 0.01}) == []


def test_records_carry_the_ceiling_drop(monkeypatch):
    monkeypatch.setattr(noise, "machine_load", lambda own=0.0, busy=None: {"load1": 0.0, "cores": 2,
                                                               "background_load_per_core": 0.0})
    monkeypatch.setattr(noise, "REL_IQR_LIMIT", float("inf"))
    case = planning.Case("dyt", "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())
    ctx = _ctx(0.02)
    ctx.ceiling_gbps, ctx.ceiling_best_gbps = 1e9, 2e9  # half the run's best: dropped by 50 %
    [rec] = group.measure_group([case], ctx)
    assert rec["metrics"]["noise"]["ceiling_drop"] == 0.5
    assert "noisy" in rec["flags"] and "below the run's best" in rec["flag_reasons"]["noisy"]


def _counting_cpu(monkeypatch, spread=0.02, gbps=20.0):
    """``measure_cpu`` replaced by a counted measurement stamped now (as the real one is), and no process cache."""
    import time

    calls = []

    def once(nbytes=None, reps=ceiling.CPU_REPS):
        calls.append(1)
        return ceiling.Ceiling(gbps + len(calls), f"copy #{len(calls)}", "cpu", spread, measured_at=time.time())

    monkeypatch.setattr(ceiling, "measure_cpu", once)
    monkeypatch.setattr(ceiling, "_CACHE", {})
    monkeypatch.setattr(ceiling, "RETRY_PAUSE_S", 0.0)
    return calls


def test_a_steady_cpu_ceiling_is_shared_with_the_next_process_for_a_minute(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path))
    calls = _counting_cpu(monkeypatch)
    first = ceiling.measure("cpu")
    assert len(calls) == 1 and "shared" not in first.method
    monkeypatch.setattr(ceiling, "_CACHE", {})  # another process on this machine
    second = ceiling.measure("cpu")
    assert len(calls) == 1 and (second.gbps, second.spread) == (first.gbps, first.spread)
    assert "shared: measured by normbench process" in second.method
    # a sweep's recheck takes it while it is at most RECHECK_S old (its age is kept), and measures once it is older
    ctx = group.refresh_context(_ctx(0.01), "cpu", every_s=60, now=lambda: 1000.0)
    assert len(calls) == 1 and 1000.0 - ctx.ceiling_at == pytest.approx(second.age_s(), abs=1.0)
    monkeypatch.setattr(ceiling, "RECHECK_S", -1.0)
    third = ceiling.measure("cpu", fresh=True)
    assert len(calls) == 2 and "shared" not in third.method and third.gbps == 22.0
    # another thread count is another machine for the copy
    monkeypatch.setattr(ceiling, "RECHECK_S", 60.0)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if before > 1 else 2)
        monkeypatch.setattr(ceiling, "_CACHE", {})
        assert "shared" not in ceiling.measure("cpu").method and len(calls) == 3
    finally:
        torch.set_num_threads(before)


def test_an_unsteady_ceiling_is_never_shared(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path))
    calls = _counting_cpu(monkeypatch, spread=0.5)
    ceiling.measure("cpu")
    assert len(calls) == ceiling.ATTEMPTS
    monkeypatch.setattr(ceiling, "_CACHE", {})
    assert "shared" not in ceiling.measure("cpu").method and len(calls) == 2 * ceiling.ATTEMPTS
    # a corrupt shared file is measured over, never trusted
    assert not list((tmp_path / "ceiling").glob("*.json"))
    path = ceiling._shared_path("cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    monkeypatch.setattr(ceiling, "_CACHE", {})
    assert "shared" not in ceiling.measure("cpu").method and len(calls) == 3 * ceiling.ATTEMPTS


def test_two_real_processes_share_one_measurement(tmp_path):
    """Each process derives the machine's key on its own (boot, host, threads, affinity, copy size, torch). The first
    one's copy is made steady (a busy test machine would make a real one unsteady, and an unsteady one is never
    shared: tested above), so the second process's real code must find it."""
    import os
    import subprocess
    import sys

    steady = ("import time; from normbench.measure import ceiling; "
              "ceiling.measure_cpu = lambda: ceiling.Ceiling(21.5, 'planted steady copy', 'cpu', 0.01, "
              "measured_at=time.time()); ")
    show = "from normbench.measure import ceiling; c = ceiling.measure('cpu'); print(c.gbps, c.method)"
    env = dict(os.environ, NORMBENCH_CACHE_DIR=str(tmp_path))
    outs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                           timeout=300).stdout for code in (steady + show, show)]
    assert outs[0].startswith("21.5 planted steady copy") and "shared" not in outs[0]
    assert outs[1].startswith("21.5 planted steady copy; shared: measured by normbench process"), outs[1]
