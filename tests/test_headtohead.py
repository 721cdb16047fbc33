"""Head-to-head timing (interleaved, paired), the verdict rule and `normbench best`.

No timing is asserted: the verdict logic is tested on synthetic paired samples and on recorded timing noise from
this 2-core machine (tests/fixtures/paired_noise.json, written by scripts/calibrate_paired.py), replayed with a fixed
seed.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from normbench import best, results
from normbench.measure import group, headtohead, planning, sweep
from normbench.measure.shapes import parse_shape
from normbench.measure.timers import TimerSettings, interleaved_time
from normbench.stats import median_ci_ranks, paired_ratio, verdict_of

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
NOISE = Path(__file__).parent / "fixtures" / "paired_noise.json"


def _ctx():
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


# --- the verdict rule -----------------------------------------------------------------------------------------------

def test_sign_test_ranks():
    assert median_ci_ranks(5) == (0, 4)
    assert median_ci_ranks(10) == (1, 8)
    assert median_ci_ranks(20) == (5, 14)
    assert median_ci_ranks(50) == (17, 32)


def test_verdicts():
    assert verdict_of(0.95, 1.05) == "tie"
    assert verdict_of(1.0 / 1.1, 1.1) == "tie"
    assert verdict_of(0.7, 0.8) == "faster"
    assert verdict_of(1.2, 1.4) == "slower"
    assert verdict_of(0.95, 1.3) == "undecided"
    assert verdict_of(0.85, 0.97) == "faster"


def test_paired_ratio_cancels_drift():
    rng = random.Random(1)
    drift = [1 + 2.0 * i / 100 for i in range(100)]  # the machine slows threefold over the run
    a = [d * (1 + rng.gauss(0, 0.01)) for d in drift]
    b = [1.3 * d * (1 + rng.gauss(0, 0.01)) for d in drift]
    p = paired_ratio(b, a)
    assert p.verdict == "slower" and 1.25 < p.lo <= p.ratio <= p.hi < 1.35 and p.n == 100
    assert paired_ratio(a, a).verdict == "tie"
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


def _noise():
    return json.loads(NOISE.read_text())


def test_recorded_decode_runs_give_the_calibrated_verdicts():
    """Every recorded live decode-sized run (32 x 4096, float32), replayed: identical backends tie and the planted
    1.3x slower one is slower, in at least 95 % of the runs (the live rates are in docs/measurement.md)."""
    arm = _noise()["decode"]
    for name, want in (("identical", "tie"), ("planted", "slower")):
        got = [paired_ratio(a, b).verdict for a, b in arm[name]]
        assert got.count(want) >= 0.95 * len(got), (name, got)


def test_recorded_quiet_prefill_runs_give_the_calibrated_verdicts():
    """Prefill-sized runs (2048 x 4096, float32, 30 rounds) on the quiet machine (2026-11-26, load average 1.9-2.2:
    the calibration's own 2 threads): tie and slower in at least 95 % of the runs, replayed."""
    arm = _noise()["prefill"]
    assert arm["shape"] == [1, 2048, 4096] and len(arm["identical"]) == len(arm["planted"]) >= 20
    for name, want in (("identical", "tie"), ("planted", "slower")):
        got = [paired_ratio(a, b).verdict for a, b in arm[name]]
        assert got.count(want) >= 0.95 * len(got), (name, got)
        assert got == arm["live_verdicts"][name]  # the replay decides as the live run did


def test_recorded_busy_prefill_runs_never_give_a_wrong_winner():
    """Prefill-sized runs (2048 x 4096) on the machine with load 4 to 7 (other jobs): identical backends tie or come
    out undecided, never faster or slower; the planted slowdown is found in at least 95 % of the runs."""
    arm = _noise()["prefill_busy"]
    got = [paired_ratio(a, b).verdict for a, b in arm["identical"]]
    assert set(got) <= {"tie", "undecided"} and "tie" in got
    slow = [paired_ratio(a, b).verdict for a, b in arm["planted"]]
    assert slow.count("slower") >= 0.95 * len(slow)


def test_resampled_recorded_noise_with_a_fixed_seed():
    """Rounds drawn (with replacement, fixed seed) from the recorded decode runs' rounds: the same rates hold."""
    arm = _noise()["decode"]
    rng = random.Random(26)
    for name, want in (("identical", "tie"), ("planted", "slower")):
        rounds = [(x, y) for a, b in arm[name] for x, y in zip(a, b)]
        n = 50  # the head-to-head minimum
        hits = 0
        for _ in range(200):
            draw = [rounds[rng.randrange(len(rounds))] for _ in range(n)]
            hits += paired_ratio([x for x, _ in draw], [y for _, y in draw]).verdict == want
        assert hits >= 0.95 * 200, (name, hits)


# --- the interleaved timer ------------------------------------------------------------------------------------------

def test_interleaved_timer_shuffles_every_round_and_pairs_rounds():
    calls, orders = [], []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    pres = {"b": lambda: calls.append("pre-b")}
    s = interleaved_time(fns, TimerSettings(warmup=2, min_reps=20, max_reps=20, min_time=0.0), pres, seed=3,
                         order_log=orders)
    assert {k: len(v) for k, v in s.items()} == {"a": 20, "b": 20, "c": 20}
    assert len(orders) == 20 and len({tuple(o) for o in orders}) > 1  # shuffled, not one fixed order
    assert calls[:2 * 4] == ["a", "pre-b", "b", "c"] * 2  # warm-up: every callable, in turn
    timed = calls[8:]
    for i, k in enumerate(timed):
        if k == "b":
            assert timed[i - 1] == "pre-b"  # the untimed pre runs right before its callable


def test_measure_set_pairs_backends_on_the_same_inputs():
    shape = parse_shape("4x8x64")
    cases = [planning.Case("rmsnorm", b, shape, "float32", p, "cpu", "hot", torch.get_num_threads())
             for b in ("eager", "native", "triton") for p in ("fwd", "fwd+bwd")]
    refused: list = []
    recs = headtohead.measure_set(cases, _ctx(), refused)
    assert {c.backend for c, _ in refused} == {"triton"}  # no GPU: refused, the others still run
    assert len(recs) == 4
    by = {(r["config"]["backend"], r["config"]["pass"]): r for r in recs}
    for (b, p), r in by.items():
        other = by[("native" if b == "eager" else "eager", p)]
        [pair] = r["metrics"]["paired"]
        assert pair["partner"] == other["id"] and pair["verdict"] in ("faster", "slower", "tie", "undecided")
        assert r["metrics"]["reps"] == other["metrics"]["reps"] >= headtohead.MIN_ROUNDS or r["metrics"]["reps"] >= 3
        assert "paired" not in r["config"]  # the id is the shape's, not the comparison's
    # the same case measured alone has the same id
    alone = group.measure_group([cases[0]], _ctx())
    assert alone[0]["id"] == by[("eager", "fwd")]["id"]
    from normbench.records.schema import validate_record

    for r in recs:
        assert validate_record(r) == []
    # the same-size copy was one more member of each pass's rounds: its reference moves the case's bytes, in the
    # same rounds (as many as the backends'), and both backends of a pass share it
    for p in ("fwd", "fwd+bwd"):
        eager, native = by[("eager", p)]["metrics"], by[("native", p)]["metrics"]
        ref = eager["copy_same_size"]
        assert "member of the head-to-head set" in ref["method"]
        assert ref["bytes_moved"] == eager["bytes_moved"] and ref["reps"] == eager["reps"]
        assert native["copy_same_size"] == ref and native["copy_same_size_gbps"] == eager["copy_same_size_gbps"]
        assert eager["pct_of_same_size_copy"] == pytest.approx(100 * eager["gbps"] / eager["copy_same_size_gbps"])


def test_sweep_measures_a_set_whole_or_not_at_all(tmp_path):
    shape = parse_shape("2x4x32")
    cases = [planning.Case("rmsnorm", b, shape, "float32", "fwd", "cpu", "hot", torch.get_num_threads())
             for b in ("eager", "native")]
    kw = dict(settings=FAST, progress=False, log=lambda m: None, interleave=True)
    s = sweep.run_sweep(cases, tmp_path, **kw)
    assert s.written == 2
    s = sweep.run_sweep(cases, tmp_path, **kw)
    assert s.written == 0 and s.already_done == 2
    more = cases + [planning.Case("rmsnorm", "eager", shape, "bfloat16", "fwd", "cpu", "hot",
                                  torch.get_num_threads())]
    s = sweep.run_sweep(more, tmp_path, **kw)
    assert s.written == 1 and s.already_done == 2  # another set: the done one is left alone


def test_a_set_with_a_backend_that_cannot_run_here_is_done_once_the_others_are(tmp_path):
    """`bench --model` plans every backend; one that cannot run here (not installed) is skipped each time, and must
    not keep its set open, or every re-run measures the whole set again (seen: a second model sharing a shape
    re-measured all of the first one's sets)."""
    shape = parse_shape("2x4x32")
    cases = [planning.Case("rmsnorm", b, shape, "float32", "fwd", "cpu", "hot", torch.get_num_threads())
             for b in ("eager", "native", "never_here")]
    runs = {"eager": True, "native": True, "never_here": False}
    done: set = set()
    todo, already = sweep._sets_to_measure(cases, lambda c: c.backend in done, lambda c: runs[c.backend])
    assert len(todo) == 1 and already == 0
    done |= {"eager", "native"}
    todo, already = sweep._sets_to_measure(cases, lambda c: c.backend in done, lambda c: runs[c.backend])
    assert todo == [] and already == 2
    runs["never_here"] = True  # installed since: the set is measured again, whole
    todo, _ = sweep._sets_to_measure(cases, lambda c: c.backend in done, lambda c: runs[c.backend])
    assert [len(t) for t in todo] == [3]
    # the default check is the planner's: eager always runs; a backend of no norm never does
    assert planning.runs_here(cases[0])


# --- best -----------------------------------------------------------------------------------------------------------

def _rec(backend, t, rid, paired=(), flags=(), err=1e-7, dims=(8, 1, 4096), dtype="float32"):
    return {"kind": "kernel", "id": rid, "norm": {"name": "rmsnorm"}, "flags": list(flags),
            "config": {"backend": backend, "layout": "tokens", "shape": list(dims), "dtype": dtype, "pass": "fwd",
                       "device": "cpu", "shape_label": "tokens-" + "x".join(map(str, dims))},
            "metrics": {"time_median_s": t, "err": {"y": {"max_abs": err}}, "paired": list(paired)},
            "provenance": {"hardware_id": "cpu-test"}}


def _pair(partner, ratio, lo, hi):
    return {"partner": partner, "ratio": ratio, "ci": [lo, hi], "n": 50, "verdict": verdict_of(lo, hi)}


def test_best_decides_winner_tie_undecided_flagged_missing():
    win = best.decide([_rec("eager", 2.0, "e", [_pair("n", 1.9, 1.7, 2.1)]),
                       _rec("native", 1.0, "n", [_pair("e", 0.52, 0.48, 0.58)])])
    assert win["status"] == "winner" and win["winner"] == "native" and win["runner_up"] == "eager"
    assert win["margin"]["paired"] and win["margin"]["ci"] == [0.48, 0.58]
    tie = best.decide([_rec("eager", 1.02, "e"), _rec("native", 1.0, "n", [_pair("e", 0.98, 0.95, 1.03)])])
    assert tie["status"] == "tie" and set(tie["ties"]) == {"eager", "native"}
    und = best.decide([_rec("eager", 1.1, "e"), _rec("native", 1.0, "n", [_pair("e", 0.9, 0.8, 1.2)])])
    assert und["status"] == "undecided"
    # a flagged record never wins; nor does one whose error exceeds its dtype's tolerance
    fl = best.decide([_rec("eager", 2.0, "e"), _rec("native", 1.0, "n", flags=["noisy"])])
    assert fl["status"] == "only" and fl["winner"] == "eager"
    bad = best.decide([_rec("eager", 2.0, "e"), _rec("native", 1.0, "n", err=0.5)])
    assert bad["winner"] == "eager"
    only_flagged = best.decide([_rec("native", 1.0, "n", flags=["stale"])])
    assert only_flagged["status"] == "flagged" and "flagged stale" in only_flagged["reasons"]
    assert best.decide([])["status"] == "missing"
    # every flag bars a record, suspect (above the DRAM ceiling: a cache-resident decode timing) included
    sus = best.decide([_rec("native", 1.0, "n", flags=["suspect"])])
    assert sus["status"] == "flagged" and "flagged suspect" in sus["reasons"]
    # measured apart: medians, no interval, so no winner however far apart the medians are
    apart = best.decide([_rec("eager", 2.0, "e"), _rec("native", 1.0, "n")])
    assert apart["status"] == "undecided" and apart["undecided_by"] == "measured apart"
    assert apart["winner"] is None and apart["margin"]["paired"] is False and apart["margin"]["ci"] is None
    assert {b["backend"]: b["verdict"] for b in apart["backends"]} == {"native": "apart", "eager": "apart"}


def test_best_answers_every_site_and_regime_with_commands():
    from normbench import catalog

    model = catalog.get("llama-3.1-8b")
    recs = [_rec("eager", 2.0, "e", [_pair("n", 1.9, 1.7, 2.1)]), _rec("native", 1.0, "n", [_pair("e", .5, .4, .6)]),
            _rec("native", 1.0, "s", flags=["stale"], dims=(1, 1, 4096))]
    rows = best.answer(recs, best.model_targets(model), model_arg="--model llama-3.1-8b")
    assert len(rows) == len(catalog.site_shapes(model))
    by = {(r["site"], r["regime"]): r for r in rows}
    assert by[("input_layernorm", "decode-8")]["winner"] == "native"
    assert by[("residual_add+norm", "decode-8")]["status"] == "missing"  # add_rmsnorm has no record
    assert by[("input_layernorm", "decode-1")]["status"] == "flagged"
    assert "--redo" in by[("input_layernorm", "decode-1")]["command"]
    assert by[("input_layernorm", "prefill-1x2048")]["command"].startswith(
        "normbench bench --model llama-3.1-8b --norm rmsnorm --dtype float32 --pass fwd --device cpu")


def test_best_cli_json_validates_against_its_schema(tmp_path, capsys, monkeypatch):
    import jsonschema

    from normbench.cli import main
    from normbench.measure import ceiling

    monkeypatch.setattr(ceiling, "measure", lambda device: ceiling.Ceiling(50.0, "test ceiling", device))
    monkeypatch.setattr(headtohead, "MIN_ROUNDS", 6)
    monkeypatch.setattr(headtohead, "MIN_TIME", 0.0)
    assert main(["bench", "--norm", "rmsnorm", "--backend", "eager,native", "--shape", "3x64", "--dtype",
                 "float32", "--pass", "fwd", "--device", "cpu", "--quick", "--out",
                 str(tmp_path), "--no-progress", "--force"]) == 0
    capsys.readouterr()
    assert main(["best", "--shape", "3x64", "--results", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, best.SCHEMA)
    [row] = doc["answers"]
    assert row["shape"] == [1, 3, 64] and len(row["evidence"]) in (1, 2)
    assert doc["policy"][0]["evidence"] == row["evidence"]
    # read through records_that_count: a record flagged other than noisy never wins (a noisy one may, by its
    # decisive paired interval: both were timed in the same rounds, --interleave being the default)
    recs = results.records_that_count(tmp_path, kind="kernel").records
    assert {b["backend"] for b in row["backends"]} == {"eager", "native"}  # every backend named
    barred = {r["id"] for r in recs if set(r.get("flags") or ()) - {"noisy"}}
    if barred == {r["id"] for r in recs}:
        assert row["status"] == "flagged" and row["reasons"] and "--redo" in row["command"]
    else:
        assert row["status"] in ("winner", "only", "tie", "undecided")
        assert (row.get("winner") or "") not in {r["config"]["backend"] for r in recs if r["id"] in barred}
        assert row.get("undecided_by") != "measured apart"
    assert main(["best", "--shape", "3x64", "--results", str(tmp_path)]) == 0
    assert "3x64" in capsys.readouterr().out


# --- verdicts you can act on (#37): real recorded rounds, every backend named -------------------------------------

def _from_rounds(samples: dict, paired: bool = True, flags: dict | None = None) -> list[dict]:
    """Records of backends timed in the same rounds (``samples``: backend -> per-round times), as ``measure_set``
    writes them: each one's median, and (``paired``) one ``metrics.paired`` entry per partner."""
    import statistics

    recs = {b: _rec(b, statistics.median(t), b, flags=(flags or {}).get(b, ())) for b, t in samples.items()}
    if paired:
        for b, r in recs.items():
            r["metrics"]["paired"] = [
                {"partner": o, "partner_backend": o, **paired_ratio(samples[b], samples[o]).to_dict()}
                for o in samples if o != b]
    return list(recs.values())


def _arms():
    """Every recorded live run of the calibration (decode busy, prefill quiet, prefill busy): (eager, twin) rounds
    of identical code."""
    noise = _noise()
    return [(a, b) for arm in ("decode", "prefill", "prefill_busy") for a, b in noise[arm]["identical"]]


def test_identical_backends_never_get_a_winner_measured_apart_or_paired():
    """Eager against its identical twin, in every recorded live run (the issue saw "eager 1.24x faster" from
    medians measured apart): paired, a tie or undecided; apart, always 'undecided: measured apart'; both backends are
    named every time."""
    runs = _arms()
    assert len(runs) >= 50
    paired_st, apart_st = [], []
    for a, b in runs:
        got = best.decide(_from_rounds({"eager": a, "twin": b}))
        paired_st.append(got["status"])
        assert got["winner"] is None and {x["backend"] for x in got["backends"]} == {"eager", "twin"}
        apart = best.decide(_from_rounds({"eager": a, "twin": b}, paired=False))
        apart_st.append(apart["status"])
        assert apart["status"] == "undecided" and apart["undecided_by"] == "measured apart" and not apart["winner"]
    assert set(paired_st) <= {"tie", "undecided"} and paired_st.count("tie") >= 0.9 * len(runs)
    assert set(apart_st) == {"undecided"}


def test_a_slower_backend_is_named_slower_with_its_paired_ratio_even_when_noisy():
    """Eager, its twin and a backend 1.5x slower in every round (the twin's recorded rounds x 1.5): the answer ties
    eager and twin and names the slow one 'slower' with its paired ratio and interval, also when its record is
    flagged noisy (its own spread wide: the issue's case, where it vanished from the answer)."""
    for a, b in _arms():
        slow = [1.5 * x for x in b]
        for flags in ({}, {"slow": ["noisy"]}):
            got = best.decide(_from_rounds({"eager": a, "twin": b, "slow": slow}, flags=flags))
            by = {x["backend"]: x for x in got["backends"]}
            assert set(by) == {"eager", "twin", "slow"} and got["winner"] is None
            assert by["slow"]["verdict"] == "slower" and by["slow"]["paired"] and by["slow"]["vs"] in ("eager", "twin")
            lo, hi = by["slow"]["ci"]
            assert 1.1 < lo <= by["slow"]["ratio"] <= hi
            assert re.search(r"; slow slower 1\.[45]\dx \[1\.\d\d, 1\.\d\d\]", best.describe(got))
    # the noisy slow backend measured apart is not ranked, and says why and how to re-measure
    a, b = _arms()[0]
    got = best.decide(_from_rounds({"eager": a, "slow": [1.5 * x for x in b]}, paired=False,
                                   flags={"slow": ["noisy"]}))
    by = {x["backend"]: x for x in got["backends"]}
    assert got["status"] == "only" and by["slow"]["verdict"] == "not_ranked" and "head to head" in by["slow"]["why"]


def test_a_decisive_paired_verdict_ranks_a_noisy_record_and_its_time_stays_off_the_estimate():
    a, b = _arms()[0]
    got = best.decide(_from_rounds({"eager": a, "slow": [1.5 * x for x in b]}, flags={"eager": ["noisy"]}))
    assert got["status"] == "winner" and got["winner"] == "eager" and got["margin"]["verdict"] == "faster"
    assert "eager" not in got["times_s"] and "slow" in got["times_s"]  # absolute numbers: only unflagged records


def test_host_bound_and_other_flags_are_never_ranked_and_host_time_is_shown():
    e = _rec("eager", 2e-5, "e", [_pair("t", 1.5, 1.4, 1.6)])
    t = _rec("triton", 1e-5, "t", [_pair("e", 0.66, 0.6, 0.7)], flags=["host_bound"])
    for r in (e, t):
        r["config"]["device"] = "cuda"
    t["metrics"]["host_s"] = 3e-5
    got = best.decide([e, t])
    by = {x["backend"]: x for x in got["backends"]}
    assert got["status"] == "only" and got["winner"] == "eager"
    assert by["triton"]["verdict"] == "not_ranked" and "host" in by["triton"]["why"]
    line = best.backend_text(by["triton"])
    assert "GPU 10 us" in line and "host 30 us per call" in line
    stale = best.decide([e, _rec("native", 1e-6, "n", [_pair("e", 0.1, 0.09, 0.11)], flags=["stale", "noisy"])])
    assert stale["winner"] == "eager"  # noisy may be looked past by a pairing, stale never


def test_every_backend_is_named_in_the_json_policy_and_it_validates():
    import jsonschema

    a, b = _arms()[0]
    recs = _from_rounds({"eager": a, "twin": b, "slow": [1.5 * x for x in b]}, flags={"slow": ["noisy"]})
    recs.append(_rec("compile", 1e-9, "c", flags=["stale"]))
    rows = best.answer(recs, best.shape_targets(recs, "8x1x4096"))
    doc = best.to_policy(rows, {"model": None, "shape": "8x1x4096"})
    jsonschema.validate(doc, best.SCHEMA)
    [row] = doc["answers"]
    by = {x["backend"]: x for x in row["backends"]}
    assert set(by) == {"eager", "twin", "slow", "compile"} and by["compile"]["verdict"] == "not_ranked"
    assert by["compile"]["command"].startswith("normbench bench --shape tokens:8x1x4096 --norm rmsnorm")
    assert "--redo" in by["compile"]["command"]
    apart = best.answer(_from_rounds({"eager": a, "twin": b}, paired=False), best.shape_targets(recs, "8x1x4096"))
    assert apart[0]["status"] == "undecided" and "--redo" in apart[0]["command"]
    assert best.describe(apart[0]).startswith("undecided: measured apart")
