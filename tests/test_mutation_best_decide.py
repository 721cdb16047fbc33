"""#52: ``best.decide``'s answer for one shape, whole, in each of its outcomes (only, flagged, a noisy record without
a partner, tie, undecided by interval, measured apart, a cycle of pairings), and the pairing rules under it (a
pairing read from the partner's side, the reference a pairing outranks medians for, the error tolerance). The
records are a committed record (results/kernel/cpu-amd-epyc-2c) with its backend, time (and what is derived from
it), flags with their reasons and pairings in the writer's form set per case, each passing the schema as a written
record does: no measurement gives a chosen cycle of pairings on demand. Expected answers are written out by hand
from the rules in the docstrings (TIE_FACTOR 1.1: a paired interval inside [1/1.1, 1.1] is a tie)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from normbench import best
from normbench.records.schema import validate_record
from normbench.records.store import iter_records

ROOT = Path(__file__).resolve().parents[1]
BASE = next(r for _, r in iter_records(ROOT / "results" / "kernel" / "cpu-amd-epyc-2c" / "rmsnorm.json.gz")
            if r["config"]["dtype"] == "float32")
HOST = (" (its host time per call bounds the GPU time: the GPU time is not what a caller waits for; batch more work "
        "per call or capture it in a CUDA graph)")
NOISY_ALONE = ("flagged noisy: its own spread is too wide for its median to rank it and it has no paired partner "
               "here; measure it head to head")


def rid(name: str) -> str:
    """A record id of the form the writer gives (``records.schema``'s id pattern)."""
    return f"k-test-{name}"


def rec(name: str, backend: str, t: float, flags=(), paired=(), device="cpu", host_s=None, err=1e-7) -> dict:
    """``BASE`` with these fields set; each pairing ``(partner, ratio, ci, verdict)`` in the writer's form
    (``headtohead``'s entry: partner id and backend, ratio, interval, n, verdict, confidence, tie factor). The
    record must pass the schema, as a written one does."""
    r = copy.deepcopy(BASE)
    r["id"], r["flags"] = rid(name), list(flags)
    r["config"].update(backend=backend, device=device, dtype="float32")
    r["flag_reasons"] = {f: f"this test's {f} record" for f in flags}
    m = r["metrics"]
    scale = t / m["time_median_s"]   # the record's times, and what is derived from them, at time t
    for k in ("time_median_s", "time_iqr_s", "time_q25_s", "time_q75_s", "time_min_s"):
        m[k] *= scale
    m["time_median_s"] = t
    for k in ("gbps", "pct_of_ceiling", "pct_of_same_size_copy"):
        m[k] /= scale
    m["paired"] = [{"partner": rid(p), "partner_backend": f"{p}-backend", "ratio": ratio, "ci": list(ci), "n": 21,
                    "verdict": v, "confidence": 0.95, "tie_factor": best.TIE_FACTOR} for p, ratio, ci, v in paired]
    m.pop("host_s", None)
    if host_s is not None:
        m["host_s"] = host_s
    m.setdefault("err", {}).setdefault("y", {})["max_abs"] = err
    assert validate_record(r) == [], validate_record(r)
    return r


def entry(r: dict, verdict: str | None = None) -> dict:
    e = {"backend": r["config"]["backend"], "record": r["id"], "flags": list(r["flags"]),
         "time_s": r["metrics"]["time_median_s"], "clock": "gpu" if r["config"]["device"].startswith("cuda") else "cpu"}
    if verdict:
        e["verdict"] = verdict
    if r["metrics"].get("host_s") is not None:
        e["host_s"] = r["metrics"]["host_s"]
    return e


def not_ranked(r: dict, why: str) -> dict:
    return {**entry(r, "not_ranked"), "why": why}


def test_no_records_is_missing():
    assert best.decide([]) == {"status": "missing", "backends": []}


def test_one_clean_record_is_the_only_one():
    a = rec("a", "eager", 1e-3)
    assert best.decide([a]) == {
        "evidence": [rid("a")], "fastest": "eager", "times_s": {"eager": 1e-3}, "status": "only", "winner": "eager",
        "runner_up": None, "margin": None, "backends": [entry(a, "only")]}


def test_every_record_flagged_says_each_reason_and_a_host_bound_one_what_to_do():
    h = rec("h", "triton", 2e-3, flags=["host_bound"], device="cuda", host_s=9e-3)
    f = rec("f", "eager", 1e-3, flags=["forced"], device="cuda")
    assert best.decide([h, f]) == {
        "status": "flagged", "reasons": ["flagged forced", "flagged host_bound" + HOST],
        "evidence": [rid("h"), rid("f")],
        "backends": [not_ranked(h, "flagged host_bound" + HOST), not_ranked(f, "flagged forced")]}


def test_a_noisy_record_without_a_partner_is_not_ranked_and_the_clean_one_is_the_only_one():
    n = rec("n", "triton", 1e-3, flags=["noisy"])
    c = rec("c", "eager", 2e-3)
    assert best.decide([n, c]) == {
        "evidence": [rid("c")], "fastest": "eager", "times_s": {"eager": 2e-3}, "status": "only", "winner": "eager",
        "runner_up": None, "margin": None, "backends": [entry(c, "only"), not_ranked(n, NOISY_ALONE)]}
    assert best.decide([n]) == {"status": "flagged", "reasons": [NOISY_ALONE], "evidence": [rid("n")],
                                "backends": [not_ranked(n, NOISY_ALONE)]}


def test_the_closest_tie_by_its_paired_ratio_is_the_runner_up():
    """Two ties with the reference; the one slower by median has the smaller paired ratio: it is the runner-up."""
    a = rec("a", "eager", 1.0e-3, flags=["noisy"])   # the reference, ranked through its pairings only
    c = rec("c", "compile", 1.05e-3, paired=[("a", 1.06, (1.03, 1.09), "tie")])
    b = rec("b", "triton", 1.10e-3, paired=[("a", 1.01, (0.99, 1.03), "tie")], flags=["noisy"])
    got = best.decide([b, c, a])
    assert got["status"] == "tie" and got["winner"] is None and got["runner_up"] == "triton"
    assert got["ties"] == ["eager", "compile", "triton"]
    assert got["margin"]["ratio"] == pytest.approx(1 / 1.01) and got["margin"]["paired"] is True
    assert got["margin"]["ci"] == pytest.approx([1 / 1.03, 1 / 0.99]) and got["margin"]["verdict"] == "tie"
    assert got["times_s"] == {"compile": 1.05e-3}   # the noisy ones' medians are not shown as ranked numbers
    assert got["backends"][0] == entry(a, "tie") and got["backends"][0]["flags"] == ["noisy"]
    assert got["backends"][2] == {**entry(b, "tie"), "vs": "eager", "ratio": 1.01, "ci": [0.99, 1.03], "n": 21,
                                  "paired": True}
    assert got["backends"][2]["flags"] == ["noisy"]


def test_an_interval_that_holds_one_and_leaves_the_band_is_undecided_with_the_ties_listed():
    a = rec("a", "eager", 1.0e-3)
    u = rec("u", "triton", 1.02e-3, paired=[("a", 1.02, (0.95, 1.15), "undecided")])
    t = rec("t", "compile", 1.04e-3, paired=[("a", 1.0, (0.98, 1.02), "tie")])
    s = rec("s", "liger", 2e-3, paired=[("a", 2.0, (1.9, 2.1), "slower")])
    got = best.decide([s, t, u, a])
    assert got["status"] == "undecided" and got["undecided_by"] == "interval" and got["winner"] is None
    assert got["runner_up"] == "triton" and got["ties"] == ["eager", "triton", "compile"]
    assert [(b["backend"], b["verdict"]) for b in got["backends"]] == [
        ("eager", "undecided"), ("triton", "undecided"), ("compile", "tie"), ("liger", "slower")]


def test_medians_measured_apart_are_undecided_with_the_reference_over_the_closest():
    a = rec("a", "eager", 1.0e-3)
    b = rec("b", "triton", 1.2e-3)
    c = rec("c", "compile", 1.5e-3)
    got = best.decide([c, a, b])
    assert got["status"] == "undecided" and got["undecided_by"] == "measured apart"
    assert got["runner_up"] == "triton" and got["ties"] == ["eager", "triton", "compile"]
    assert got["margin"] == {"ratio": pytest.approx(1 / 1.2), "ci": None, "n": None, "verdict": "apart",
                             "paired": False}
    assert got["backends"][0] == entry(a, "apart")
    assert got["backends"][1]["ratio"] == pytest.approx(1.2) and got["backends"][1]["verdict"] == "apart"


def test_a_cycle_of_pairings_leaves_no_verdict_standing():
    """b paired-faster than a, c than b, a than c: whichever is chosen, one other is paired-faster than it; that one
    reads undecided (never "faster" than the chosen one) and is the runner-up (``best`` raised a TypeError here: the
    runner-up was looked for among the unrewritten verdicts)."""
    a = rec("a", "eager", 1.0e-3, paired=[("c", 0.8, (0.75, 0.85), "faster")])
    b = rec("b", "triton", 1.1e-3, paired=[("a", 0.8, (0.75, 0.85), "faster")])
    c = rec("c", "compile", 1.2e-3, paired=[("b", 0.8, (0.75, 0.85), "faster")])
    got = best.decide([a, b, c])
    verdicts = {x["backend"]: x["verdict"] for x in got["backends"]}
    assert "faster" not in verdicts.values()
    # the reference after following the pairings is a again; b is paired-faster than it: b is the runner-up
    assert verdicts == {"eager": "undecided", "triton": "undecided", "compile": "slower"}
    assert (got["status"], got["undecided_by"], got["winner"], got["runner_up"], got["ties"]) == (
        "undecided", "interval", None, "triton", ["eager", "triton"])


def test_a_pairing_held_only_by_the_partner_is_read_mirrored():
    a = rec("a", "eager", 1e-3)
    b = rec("b", "triton", 1.3e-3, paired=[("a", 0.8, (0.75, 0.85), "faster")])
    got = best._pair(a, b)
    assert got == {"ratio": pytest.approx(1.25), "ci": pytest.approx([1 / 0.85, 1 / 0.75]), "n": 21,
                   "verdict": "slower", "paired": True}
    assert best._pair(b, a) == {"ratio": 0.8, "ci": [0.75, 0.85], "n": 21, "verdict": "faster", "paired": True}
    apart = best._pair(rec("x", "eager", 3e-3), rec("y", "triton", 2e-3))
    assert apart == {"ratio": pytest.approx(1.5), "ci": None, "n": None, "verdict": "apart", "paired": False}


def test_the_reference_is_the_fastest_median_unless_a_pairing_says_another_is_faster():
    a = rec("a", "eager", 1.0e-3)
    c = rec("c", "compile", 1.3e-3, paired=[("a", 0.9, (0.85, 0.95), "faster")])
    b = rec("b", "triton", 1.2e-3, paired=[("a", 0.95, (0.92, 0.98), "faster")])
    assert best._reference([a, c, b]) is b   # of the two paired-faster, the faster median
    assert best._reference([a, rec("d", "liger", 1.1e-3)]) is a
    d = rec("d", "liger", 1.1e-3, paired=[("a", 1.05, (1.0, 1.1), "tie")])
    assert best._reference([a, d]) is a      # a tie is not faster


def test_the_error_tolerance_admits_its_bound_and_refuses_above_or_not_finite():
    tol = best.ERR_TOL["float32"]
    assert best._err_ok(rec("a", "eager", 1e-3, err=tol)) == (True, "")
    assert best._err_ok(rec("a", "eager", 1e-3, err=tol / 2)) == (True, "")
    assert best._err_ok(rec("a", "eager", 1e-3, err=None)) == (True, "")
    assert best._err_ok(rec("a", "eager", 1e-3, err=2 * tol)) == (
        False, f"error {2 * tol:.3g} against float64 above the float32 tolerance {tol:g}")
    nan = rec("a", "eager", 1e-3)
    nan["metrics"]["err"]["y"]["max_abs"] = math.nan   # the schema refuses it; _err_ok refuses it too
    ok, why = best._err_ok(nan)
    assert not ok and why.startswith("error nan against float64")
    odd = rec("a", "eager", 1e-3, err=1.0)
    odd["config"]["dtype"] = "int8"   # no tolerance for this dtype: not judged
    assert best._err_ok(odd) == (True, "")
    assert best._why_not(rec("a", "eager", 1e-3, flags=["forced", "noisy", "stale"])) == "flagged forced, stale"
    assert best._why_not(rec("a", "eager", 1e-3, flags=["noisy"])) == ""
    assert best._why_not(rec("a", "eager", 1e-3, err=2 * tol)).startswith("error ")
