"""#52: ``normbench.best``'s words and numbers as a reader sees them (the site's By-model cells, ``best``'s text):
a margin as a speed-up with its paired interval, a row described with every other backend, a backend not ranked
with its time, its clock and its host time. Expected strings written out by hand from the rules in the docstrings."""

from __future__ import annotations

from pathlib import Path

from test_mutation_headtohead import _case, _ctx, rehearsal, timed  # noqa: F401  (fixtures)

from normbench import best
from normbench.measure import headtohead

ROOT = Path(__file__).resolve().parents[1]

PAIRED = {"ratio": 0.8, "ci": [0.75, 0.85], "paired": True, "n": 21}
APART = {"ratio": 0.5, "paired": False}


def test_a_margin_reads_as_the_runner_ups_time_over_the_winners():
    assert best.speedup_text(PAIRED) == "1.25x [1.18, 1.33]"
    assert best.speedup_text(APART) == "2.00x"
    assert best.speedup_text(None) == "" and best.speedup_text({}) == ""
    assert best.margin_text(PAIRED) == "1.25x faster [1.18, 1.33] (paired, n=21)"
    assert best.margin_text(APART) == "2.00x faster (medians, measured apart: no interval)"
    assert best.margin_text(None) == "" and best.margin_text({}) == ""


def test_a_row_is_described_with_every_slower_and_unranked_backend():
    row = {"status": "winner", "winner": "triton", "runner_up": "eager", "margin": PAIRED, "backends": [
        {"backend": "triton", "verdict": "winner"},
        {"backend": "eager", "verdict": "slower", "ratio": 1.25, "ci": [1.18, 1.33]},
        {"backend": "compile", "verdict": "slower", "ratio": 1.5},
        {"backend": "liger", "verdict": "not_ranked", "why": "flagged noisy"},
        {"backend": "native", "verdict": "tie"}]}
    assert best.describe(row) == ("triton over eager: 1.25x faster [1.18, 1.33] (paired, n=21); eager slower 1.25x "
                                  "[1.18, 1.33]; compile slower 1.50x; liger not ranked (flagged noisy)")
    alone = {**row, "backends": [{"backend": "triton", "verdict": "winner"}]}
    assert best.describe(alone) == "triton over eager: 1.25x faster [1.18, 1.33] (paired, n=21)"
    assert best.describe({**row, "backends": None}) == best.describe(alone)


def test_a_backend_not_ranked_keeps_its_time_clock_and_host_time(tmp_path, timed, rehearsal):  # noqa: F811
    """Records as the writer stores them and the reader gives them back: a (simulated) GPU record with its host time,
    measured head to head through the device seam, and a committed CPU record."""
    from normbench import results
    from normbench.records.store import iter_records

    results.write_records(headtohead.measure_set([_case("eager", device="cuda")], _ctx(1000.0, "cuda")), tmp_path)
    [gpu] = [r for _, r in iter_records(tmp_path)]
    m = gpu["metrics"]
    assert gpu["flags"] and m["host_s"] is not None   # rehearsal-flagged, with host info: what this test is about
    assert best._not_ranked(gpu, "flagged rehearsal") == {
        "backend": "eager", "verdict": "not_ranked", "record": gpu["id"], "flags": list(gpu["flags"]),
        "why": "flagged rehearsal", "time_s": m["time_median_s"], "clock": "gpu", "host_s": m["host_s"]}
    assert best.backend_text(best._not_ranked(gpu, "flagged rehearsal")) == (
        f"eager: not ranked, flagged rehearsal (GPU {best.fmt_seconds(m['time_median_s'])}, host "
        f"{best.fmt_seconds(m['host_s'])} per call)")
    cpu = next(r for _, r in iter_records(ROOT / "results" / "kernel" / "cpu-amd-epyc-2c")
               if r["config"]["device"] == "cpu" and "host_s" not in r["metrics"])
    assert best._not_ranked(cpu, "stale") == {
        "backend": cpu["config"]["backend"], "verdict": "not_ranked", "record": cpu["id"],
        "flags": list(cpu["flags"]), "why": "stale", "time_s": cpu["metrics"]["time_median_s"], "clock": "cpu"}


def test_seconds_read_in_the_largest_unit_that_is_at_least_one():
    cases = {2.5: "2.5 s", 1.0: "1 s", 0.999: "999 ms", 4.56e-3: "4.56 ms", 1e-3: "1 ms", 12.34e-6: "12.3 us",
             1e-6: "1 us", 9.99e-7: "999 ns", 5e-10: "0.5 ns"}
    assert {t: best.fmt_seconds(t) for t in cases} == cases


def test_each_backend_line_says_its_verdict_ratio_interval_and_clock():
    t = {"time_s": 1.5e-5, "clock": "cpu"}
    lines = {
        "winner": ({"backend": "a", "verdict": "winner", **t}, "a: winner (CPU 15 us)"),
        "only": ({"backend": "a", "verdict": "only"}, "a: the only ranked backend"),
        "no-clock": ({"backend": "a", "verdict": "only", "time_s": 2e-3}, "a: the only ranked backend (CPU 2 ms)"),
        "tie": ({"backend": "a", "verdict": "tie", "flags": ["noisy"], **t},
                "a: tie (the fastest of the tied) (CPU 15 us) [its own spread is wide: noisy]"),
        "undecided": ({"backend": "a", "verdict": "undecided"}, "a: undecided (the fastest median)"),
        "apart": ({"backend": "a", "verdict": "apart"}, "a: undecided (measured apart)"),
        "not_ranked": ({"backend": "b", "verdict": "not_ranked", "why": "stale", "command": "normbench bench x"},
                       "b: not ranked, stale: normbench bench x"),
        "slower": ({"backend": "b", "verdict": "slower", "ratio": 1.234, "vs": "a", "paired": True,
                    "ci": [1.2, 1.3], "n": 9, "time_s": 2e-3, "clock": "gpu", "host_s": 3e-3},
                   "b: slower, 1.23x a's time [1.20, 1.30] (paired, n=9) (GPU 2 ms, host 3 ms per call)"),
        "tie-ratio": ({"backend": "b", "verdict": "tie", "ratio": 1.05, "vs": "a", "flags": ["noisy"]},
                      "b: tie, 1.05x a's time (medians, measured apart: no interval) [noisy record: the paired "
                      "interval decides]"),
        "undecided-ratio": ({"backend": "b", "verdict": "undecided", "ratio": 1.2, "vs": "a", "paired": True,
                             "ci": [0.9, 1.5], "n": 5}, "b: undecided, 1.20x a's time [0.90, 1.50] (paired, n=5)"),
        "apart-ratio": ({"backend": "b", "verdict": "apart", "ratio": 2.0, "vs": "a"},
                        "b: undecided, measured apart, 2.00x a's time (medians, measured apart: no interval)"),
    }
    assert {k: best.backend_text(b) for k, (b, _want) in lines.items()} == {k: w for k, (_b, w) in lines.items()}


def test_each_answer_status_has_its_headline():
    tie = {"ratio": 1.04, "ci": [0.98, 1.07]}
    rows = {
        "winner": ({"status": "winner", "winner": "a", "runner_up": "b", "margin": APART},
                   "a over b: 2.00x faster (medians, measured apart: no interval)"),
        "only": ({"status": "only", "winner": "a"}, "a (the only eligible backend)"),
        "tie": ({"status": "tie", "ties": ["a", "b"], "margin": tie},
                "tie: a, b (ratio 1.04 [0.98, 1.07] inside [1/1.1, 1.1])"),
        "tie-apart": ({"status": "tie", "ties": ["a", "b"], "margin": {"ratio": 0.95}},
                      "tie: a, b (ratio 0.95 inside [1/1.1, 1.1])"),
        "apart": ({"status": "undecided", "undecided_by": "measured apart", "ties": ["a", "b"],
                   "margin": {"ratio": 0.8}, "command": "normbench bench y"},
                  "undecided: measured apart (a vs b: medians 1.25x apart, no paired interval; a winner needs them "
                  "timed head to head): normbench bench y"),
        "apart-nocmd": ({"status": "undecided", "undecided_by": "measured apart", "ties": ["a", "b"],
                         "margin": {"ratio": 0.8}},
                        "undecided: measured apart (a vs b: medians 1.25x apart, no paired interval; a winner needs "
                        "them timed head to head): "),
        "undecided": ({"status": "undecided", "ties": ["a", "b"], "margin": {"ratio": 0.85, "ci": [0.7, 1.02]}},
                      "undecided: a vs b (ratio 0.85 [0.70, 1.02] holds 1 and leaves the tie band: re-measure on a "
                      "quieter machine)"),
        "flagged": ({"status": "flagged", "reasons": ["a noisy", "b stale"], "command": "normbench bench z"},
                    "no ranked record (a noisy; b stale): normbench bench z"),
        "missing": ({"status": "missing", "command": "normbench bench w"}, "missing: normbench bench w"),
    }
    assert {k: best.headline(r) for k, (r, _w) in rows.items()} == {k: w for k, (_r, w) in rows.items()}
