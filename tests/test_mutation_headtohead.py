"""Tests written against the mutants of normbench/measure/headtohead.py (issue #52 item 2; docs/mutation-report.md).

``measure_set`` runs for real (modules built, checked and timed on this CPU, or on the rehearsal's simulated CUDA
device) with few rounds; the timer is wrapped to keep what it measured, and each record is checked against numbers
computed here from those samples (``stats.paired_ratio``, the median) and against the cases given. No timing is
asserted."""

from __future__ import annotations

import copy
import dataclasses
import statistics

import pytest
import torch

from normbench import results
from normbench.measure import group, headtohead, planning, reference
from normbench.measure.shapes import parse_shape
from normbench.measure.timers import TimerSettings
from normbench.stats import paired_ratio

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
SHAPE = parse_shape("4x8x64")
ROUNDS = 5


def _case(backend="eager", pass_="fwd", norm="rmsnorm", device="cpu", timing="hot", **kw) -> planning.Case:
    return planning.Case(norm, backend, SHAPE, "float32", pass_, device, timing, 1, **kw)


def _ctx(ceiling: float = 50.0, device: str = "cpu") -> group.Context:
    return group.Context(ceiling, "test ceiling", results.provenance(command="pytest", device=device), FAST, None)


@pytest.fixture
def timed(monkeypatch):
    """Few rounds (``ROUNDS``), the threads restored afterwards, and every call of the interleaved timer kept: its
    arguments and a copy of the samples it returned."""
    monkeypatch.setattr(headtohead, "MIN_ROUNDS", ROUNDS)
    monkeypatch.setattr(headtohead, "MAX_ROUNDS", ROUNDS)
    monkeypatch.setattr(headtohead, "MIN_TIME", 0.0)
    calls: list[dict] = []
    real = headtohead.interleaved_timing

    def spy(fns, settings, pres=None, device="cpu", seed=0, order_log=None, **kw):
        got = real(fns, settings, pres, device, seed, order_log, **kw)
        calls.append({"keys": list(fns), "settings": settings, "device": device, "seed": seed,
                      "order": order_log, "samples": copy.deepcopy(got.samples), **kw})
        return got

    monkeypatch.setattr(headtohead, "interleaved_timing", spy)
    threads = torch.get_num_threads()
    yield calls
    torch.set_num_threads(threads)


# --- sets ----------------------------------------------------------------------------------------------------------

def test_a_set_is_the_cases_that_differ_only_in_backend_and_pass():
    base = _case()
    same = [dataclasses.replace(base, backend="native"), dataclasses.replace(base, pass_="fwd+bwd")]
    assert all(headtohead.set_key(c) == headtohead.set_key(base) for c in same)
    others = {"norm": "layernorm", "shape": parse_shape("2x64"), "dtype": "bfloat16", "device": "cuda",
              "graphs": True, "harness": "asv", "mode": "eval", "timing": "cold", "threads": 2, "flush": "evict",
              "keep_ahead": False}
    for field, value in others.items():
        assert headtohead.set_key(dataclasses.replace(base, **{field: value})) != headtohead.set_key(base), field
    a, b = base, dataclasses.replace(base, dtype="bfloat16")
    a2, b2 = dataclasses.replace(a, backend="native"), dataclasses.replace(b, pass_="fwd+bwd")
    assert headtohead.sets([a, b, a2, b2]) == [[a, a2], [b, b2]]
    assert headtohead.sets([]) == []


def test_paired_settings_raise_the_timer_to_the_head_to_head_minimums_and_keep_more():
    low = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0, max_time=0.5)
    got = headtohead.paired_settings(low)
    assert (got.warmup, got.min_reps, got.max_reps, got.min_time, got.max_time) == (2, 50, 400, 0.25, 4.0)
    high = TimerSettings(warmup=9, min_reps=60, max_reps=500, min_time=1.5, max_time=8.0)
    got = headtohead.paired_settings(high)
    assert (got.warmup, got.min_reps, got.max_reps, got.min_time, got.max_time) == (9, 60, 500, 1.5, 8.0)
    assert dataclasses.replace(got, warmup=0, min_reps=0, max_reps=0, min_time=0, max_time=0) == \
        dataclasses.replace(high, warmup=0, min_reps=0, max_reps=0, min_time=0, max_time=0)   # nothing else changed


def test_every_backend_of_a_set_gets_copies_of_the_first_ones_inputs():
    from normbench.discovery import REGISTRY

    spec = REGISTRY.get("add_rmsnorm")   # two inputs
    # two builds of one backend under two keys (a set's backends are its keys), on different seeds
    preps = {key: group.Prepared(spec, "eager", SHAPE, "float32", "cpu", seed=s) for s, key in enumerate("ab")}
    first, other = preps["a"], preps["b"]
    assert not torch.equal(first.inputs[0], other.inputs[0])   # different seeds: different inputs to start with
    headtohead._share_inputs(preps)
    assert len(other.inputs) == len(first.inputs) == 2
    for x, y in zip(first.inputs, other.inputs):
        assert torch.equal(x, y) and y is not x and y.data_ptr() != x.data_ptr()
        assert y.requires_grad == x.requires_grad and y.dtype == x.dtype and y.grad_fn is None
    assert other.targets == other.inputs + other.params and len(other.targets) == 2 + len(other.params)


def test_the_same_size_copy_member_moves_the_pass_bytes_in_the_case_dtype():
    from normbench.discovery import REGISTRY
    from normbench.measure import bytes_model as bm

    for dtype in ("float32", "bfloat16"):
        prep = group.Prepared(REGISTRY.get("rmsnorm"), "eager", SHAPE, dtype, "cpu")
        case = dataclasses.replace(_case(), dtype=dtype)
        for pass_ in ("fwd", "fwd+bwd"):
            model = prep.bytes_model()
            nbytes = bm.bytes_moved(model["formula"], pass_, model["params"])
            fn, src = headtohead._copy_member(prep, case, pass_)
            assert reference.copy_bytes(src) == nbytes - nbytes % 2 and src.dtype == getattr(torch, dtype)
            assert src.device.type == "cpu"
            fn()   # a copy of the source: callable
    none = group.Prepared(REGISTRY.get("none"), "eager", SHAPE, "float32", "cpu")   # the identity moves no bytes
    assert headtohead._copy_member(none, _case(norm="none"), "fwd") is None


def test_the_copy_reference_says_how_it_was_timed():
    src = torch.ones(1024)
    samples = [2e-6, 1e-6, 3e-6]
    cpu = headtohead._copy_reference(samples, src, dataclasses.replace(_case(), threads=3))
    assert cpu["time_median_s"] == 2e-6 and cpu["bytes_moved"] == 2 * 1024 * 4 and cpu["reps"] == 3
    assert cpu["method"].startswith("copy_ of 4096 bytes (float32) into a preallocated buffer, ")
    assert ("one more member of the head-to-head set: timed in the same shuffled rounds as the backends "
            "(perf_counter, nothing flushed, 3 threads)") in cpu["method"]
    cold = headtohead._copy_reference(samples, src, _case(device="cuda", timing="cold", flush="evict"))
    assert "(CUDA events, L2 flushed (evict) before each call)" in cold["method"]
    hot = headtohead._copy_reference(samples, src, _case(device="cuda:1", timing="hot"))
    assert "(CUDA events, no flush)" in hot["method"]


# --- measure_set ---------------------------------------------------------------------------------------------------

def test_a_set_is_timed_in_shared_rounds_and_each_record_paired_with_the_others(timed):
    cases = [_case(b, p) for b in ("eager", "native", "triton") for p in ("fwd", "fwd+bwd")]
    refused: list = []
    recs = headtohead.measure_set(cases, _ctx(), refused, seed=7)
    # no GPU here: triton is refused with its reason, the others run
    assert [(c.backend, c.pass_) for c, _ in refused] == [("triton", "fwd"), ("triton", "fwd+bwd")]
    assert all("triton" in why and "unavailable" in why for _, why in refused)
    assert torch.get_num_threads() == 1
    assert [(r["config"]["backend"], r["config"]["pass"]) for r in recs] == [
        ("eager", "fwd"), ("native", "fwd"), ("eager", "fwd+bwd"), ("native", "fwd+bwd")]
    assert [c["keys"] for c in timed] == [["eager", "native", headtohead.COPY]] * 2
    for call, pass_ in zip(timed, ("fwd", "fwd+bwd")):
        assert call["seed"] == 7 and call["slow_rounds"] == headtohead.SLOW_ROUNDS and call["cold"] is False
        assert call["device"] == "cpu" and call["order"] is not None and len(call["order"]) == ROUNDS
        s = call["settings"]
        assert (s.warmup, s.min_reps, s.max_reps, s.flush, s.keep_ahead) == (2, ROUNDS, ROUNDS, "zero", True)
        by = {r["config"]["backend"]: r for r in recs if r["config"]["pass"] == pass_}
        samples = call["samples"]
        for b, ob in (("eager", "native"), ("native", "eager")):
            met = by[b]["metrics"]
            assert met["paired"] == [{"partner": by[ob]["id"], "partner_backend": ob,
                                      **paired_ratio(samples[b], samples[ob]).to_dict()}]
            assert met["interleaved"] == {"rounds": ROUNDS, "backends": ["eager", "native"], "seed": 7,
                                          "order": "shuffled every round"}
            assert met["time_median_s"] == pytest.approx(statistics.median(samples[b]), rel=1e-12)
            assert met["reps"] == ROUNDS
            ref = met["copy_same_size"]
            assert ref["time_median_s"] == pytest.approx(statistics.median(samples[headtohead.COPY]), rel=1e-12)
            assert ref["reps"] == ROUNDS
            assert ref["bytes_moved"] == met["bytes_moved"] - met["bytes_moved"] % 2
            assert "(perf_counter, nothing flushed, 1 threads)" in ref["method"]
            assert met["saved_bytes"] is not None   # a backward pass in the set: what the forward saves
            assert (met["err"]["dx"] is None) == (pass_ == "fwd")
            assert "host_s" not in met and "host_syncs" not in met   # a CPU timing: no host info
            assert met["graph_used"] is False   # interleaved rounds are plain calls
    from normbench.records.schema import validate_record

    assert all(validate_record(r) == [] for r in recs)


def test_a_forward_only_set_saves_nothing_and_the_same_seed_gives_the_same_rounds(timed):
    cases = [_case("eager"), _case("native")]
    recs = headtohead.measure_set(cases, _ctx())
    assert all(r["metrics"]["saved_bytes"] is None for r in recs) and len(recs) == 2
    assert timed[0]["seed"] == 0 and recs[0]["metrics"]["interleaved"]["seed"] == 0   # the default seed
    again = headtohead.measure_set(cases, _ctx())
    assert timed[1]["order"] == timed[0]["order"] and again[0]["id"] == recs[0]["id"]
    headtohead.measure_set(cases, _ctx(), seed=1)
    assert timed[2]["order"] != timed[0]["order"]


def test_a_set_of_backends_that_cannot_run_here_gives_nothing(timed):
    refused: list = []
    assert headtohead.measure_set([_case("triton"), _case("triton", "fwd+bwd")], _ctx(), refused) == []
    assert len(refused) == 2 and timed == []
    # without a list to fill: the others still run
    assert len(headtohead.measure_set([_case("eager"), _case("triton")], _ctx())) == 1


def test_cases_of_two_sets_are_refused():
    with pytest.raises(AssertionError) as mixed:
        headtohead.measure_set([_case(), dataclasses.replace(_case(), dtype="bfloat16")], _ctx())
    assert str(mixed.value) == "measure_set needs cases of one set"


def test_a_pass_no_backend_can_run_is_refused_and_the_next_pass_still_runs(timed, monkeypatch):
    """A forward-only backend (an external library's kernel without autograd: ``Prepared.pass_fns`` refuses its
    backward, as for ``baseline.forward_only``), planted here for both backends: their fwd+bwd cases are refused
    with the reason, and the set's forward pass, listed after it, is measured."""
    real = group.Prepared.pass_fns

    def forward_only(self, pass_):
        if pass_ != "fwd":
            raise group.Unsupported(f"{self.backend}'s {self.spec.name} is forward-only (no autograd)")
        return real(self, pass_)

    monkeypatch.setattr(group.Prepared, "pass_fns", forward_only)
    cases = [_case("eager", "fwd+bwd"), _case("native", "fwd+bwd"), _case("eager"), _case("native")]
    refused: list = []
    recs = headtohead.measure_set(cases, _ctx(), refused)
    assert refused == [(cases[0], "eager's rmsnorm is forward-only (no autograd)"),
                       (cases[1], "native's rmsnorm is forward-only (no autograd)")]
    assert [(r["config"]["backend"], r["config"]["pass"]) for r in recs] == [("eager", "fwd"), ("native", "fwd")]
    assert [c["keys"] for c in timed] == [["eager", "native", headtohead.COPY]]


def test_a_timing_far_above_the_ceiling_is_refused_not_recorded(timed):
    refused: list = []
    assert headtohead.measure_set([_case("eager"), _case("native")], _ctx(ceiling=1e-9), refused) == []
    assert [c.backend for c, _ in refused] == ["eager", "native"]
    assert all("the measured ceiling" in why and "a broken timing, not recorded" in why for _, why in refused)


def test_a_norm_that_moves_no_bytes_is_timed_without_a_copy_member(timed):
    recs = headtohead.measure_set([_case("eager", norm="none")], _ctx())
    assert timed[0]["keys"] == ["eager"] and len(recs) == 1
    assert recs[0]["metrics"]["paired"] == [] and recs[0]["metrics"]["interleaved"]["backends"] == ["eager"]


@pytest.fixture
def rehearsal(monkeypatch):
    from normbench import device as seam

    monkeypatch.setenv(seam.REHEARSE_ENV, "normal")
    seam.reset()
    yield
    seam.reset()


def test_on_cuda_each_call_is_probed_and_timed_cold_when_the_case_says_so(timed, rehearsal):
    ctx = _ctx(1000.0, "cuda")
    for timing in ("cold", "hot"):
        cases = [_case(b, device="cuda", timing=timing) for b in ("eager", "native")]
        recs = headtohead.measure_set(cases, ctx)
        assert timed[-1]["cold"] is (timing == "cold") and timed[-1]["device"] == "cuda"
        assert len(recs) == 2
        for r in recs:
            met = r["metrics"]
            assert met["host_syncs"] == {} and "host_sync" not in r["flags"] and "host_s" in met
            # a rehearsal measures no memory (the simulated device has none) and its flag says so
            assert met["peak_mem_bytes"] is None and "no memory was measured" in r["flag_reasons"]["rehearsal"]
            clock = "CUDA events, L2 flushed (zero) before each call" if timing == "cold" else "CUDA events, no flush"
            assert f"({clock})" in met["copy_same_size"]["method"]
    # a call that synchronises is found by the probe and flagged
    recs = headtohead.measure_set([_case("eager", norm="powernorm", device="cuda", timing="cold")], ctx)
    assert recs[0]["metrics"]["host_syncs"] and "host_sync" in recs[0]["flags"]
