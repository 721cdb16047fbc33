"""Issue #28: the same-size copy reference, cache residency, and cache-resident records ranked apart on the site.

No timing is asserted: the tests check what is timed (bytes, tensors, sharing), the residency rule, the record
fields and their arithmetic, and where the site ranks each record.
"""

from __future__ import annotations

import math

import pytest
import test_site_support as sup
import torch

from normbench import results
from normbench.measure import bytes_model as bm
from normbench.measure import group, planning, reference
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings
from normbench.records.residency import known_caches, record_residency, residency
from normbench.records.schema import validate_record
from normbench.site import aggregate as agg
from normbench.site.records import Entry

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
TINY = Shape("tiny-tokens", "tokens", (16, 64), "quick")
CACHES = {"l2_bytes": 2 * 2**20, "llc_bytes": 32 * 2**20}


def _ctx():
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)


def _case(norm="layernorm", pass_="fwd", dtype="float32", shape=TINY):
    return planning.Case(norm, "eager", shape, dtype, pass_, "cpu", "hot", torch.get_num_threads())


# --- the reference ----------------------------------------------------------------------------------------------

def test_same_size_copy_moves_the_cases_bytes_and_times_a_plain_copy():
    """The reference's bytes model equals the case's, and what it times is a plain ``copy_`` of those bytes."""
    import normbench

    case = _case(pass_="fwd+bwd")
    prep = group.Prepared(normbench.get_norm("layernorm"), "eager", TINY, "float32", "cpu")
    model = prep.bytes_model()
    nbytes = bm.bytes_moved(model["formula"], case.pass_, model["params"])
    src, dst = reference.copy_tensors(nbytes, torch.float32, "cpu")
    assert reference.copy_bytes(src) == nbytes  # reads half, writes half: the case's volume
    assert src.shape == dst.shape and src.dtype == torch.float32
    # the reference's timing of copy_ and a plain copy_ of the same tensor do the same work (no time asserted)
    samples, graph = reference.time_copy(src, dst, FAST)
    plain = torch.empty_like(src)
    plain.copy_(src)
    assert torch.equal(plain, dst) and len(samples) == 3 and not graph and all(s > 0 for s in samples)
    ref = reference.measure_copy(nbytes, "float32", case, FAST)
    assert ref["bytes_moved"] == nbytes and ref["reps"] == 3
    assert ref["gbps"] == pytest.approx(nbytes / ref["time_median_s"] / 1e9)


def test_odd_halves_are_copied_as_bytes():
    src, _ = reference.copy_tensors(2 * 4099, torch.bfloat16, "cpu")  # 4099 bytes: not whole bfloat16 elements
    assert src.dtype == torch.uint8 and reference.copy_bytes(src) == 2 * 4099


def test_one_reference_per_size_dtype_and_timing_mode_within_a_run(monkeypatch):
    calls = []

    def fake(nbytes, dtype, case, settings):
        calls.append((nbytes, dtype, case.timing))
        return {"bytes_moved": nbytes, "gbps": 1.0, "time_median_s": nbytes / 1e9, "time_iqr_s": 0.0, "reps": 3,
                "method": "fake"}

    monkeypatch.setattr(reference, "measure_copy", fake)
    reference.clear()
    fwd, other_norm = _case(pass_="fwd"), _case(norm="rmsnorm", pass_="fwd")
    reference.same_size_copy("run1", 1000, "float32", fwd, FAST)
    reference.same_size_copy("run1", 1000, "float32", other_norm, FAST)  # same size, dtype, mode: shared
    reference.same_size_copy("run1", 1000, "bfloat16", fwd, FAST)        # another dtype
    reference.same_size_copy("run1", 2000, "float32", fwd, FAST)         # another size
    reference.same_size_copy("run2", 1000, "float32", fwd, FAST)         # another run
    hot_graphs = planning.Case("layernorm", "eager", TINY, "float32", "fwd", "cpu", "hot", fwd.threads, True)
    reference.same_size_copy("run1", 1000, "float32", hot_graphs, FAST)  # another timing mode (graphs)
    assert len(calls) == 5
    assert reference.same_size_copy("run1", 0, "float32", fwd, FAST) is None  # moves nothing: no reference
    reference.clear()


def test_records_carry_both_percentages_and_their_residency():
    reference.clear()
    ctx = _ctx()
    cases = [_case(pass_=p) for p in ("fwd", "fwd+bwd")]
    recs = group.measure_group(cases, ctx)
    for rec in recs:
        m = rec["metrics"]
        assert validate_record(rec) == []
        assert m["copy_same_size"]["bytes_moved"] == m["bytes_moved"] == m["working_set_bytes"]
        assert m["pct_of_same_size_copy"] == pytest.approx(100 * m["gbps"] / m["copy_same_size_gbps"])
        assert m["pct_of_ceiling"] == pytest.approx(100 * m["gbps"] / 50.0)  # the DRAM ceiling's stays
        caches = reference.cache_sizes("cpu")
        assert m["cache_bytes"] == caches
        assert m["cache_resident"] == residency(m["working_set_bytes"], caches, threads=rec["config"]["threads"])
        assert "copy" not in str(rec["config"])  # metrics only: ids unchanged


def test_validation_recomputes_the_same_size_percentage():
    reference.clear()
    rec = group.measure_group([_case()], _ctx())[0]
    rec["metrics"]["pct_of_same_size_copy"] *= 2
    assert any("pct_of_same_size_copy" in p for p in validate_record(rec))
    rec["metrics"]["cache_resident"] = "L9"
    assert any("cache_resident" in p for p in validate_record(rec))


def test_cpu_cache_sizes_read_from_the_os(tmp_path):
    for name, level, kind, size in (("index0", 1, "Data", "48K"), ("index1", 1, "Instruction", "64K"),
                                    ("index2", 2, "Unified", "2048K"), ("index3", 3, "Unified", "32768K")):
        d = tmp_path / name
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    got = reference.cpu_caches(str(tmp_path))
    assert (got["l2_bytes"], got["llc_bytes"]) == (2 * 2**20, 32 * 2**20)
    assert reference.cpu_caches(str(tmp_path / "missing"))["llc_bytes"] is None


def test_residency_rule():
    assert residency(1 * 2**20, CACHES) == "L2"
    assert residency(3 * 2**20, CACHES, threads=1) == "LLC"
    assert residency(3 * 2**20, CACHES, threads=2) == "L2"  # one L2 per thread's core
    assert residency(32 * 2**20, CACHES) == "LLC"
    assert residency(32 * 2**20 + 1, CACHES) == "none"
    gpu = {"l2_bytes": 50 * 2**20, "llc_bytes": 50 * 2**20}
    assert residency(2**20, gpu, device="cuda", timing="cold", pass_="fwd") == "none"  # flushed before each rep
    assert residency(2**20, gpu, device="cuda", timing="cold", pass_="fwd+bwd") == "L2"  # bwd re-reads fwd's data
    assert residency(2**20, gpu, device="cuda", timing="hot") == "L2"
    assert residency(60 * 2**20, gpu, device="cuda", timing="host") == "none"
    assert residency(2**20, {"l2_bytes": None, "llc_bytes": None}) is None


# --- the site ---------------------------------------------------------------------------------------------------

def _kernel(norm, shape, time_s, *, cache=None, copy_gbps=None, shape_class="llm", hwid="cpu-test-cpu-9000-8c",
            ts="2025-11-21T10:00:00Z"):
    rec = sup.kernel(norm, "eager", shape, time_s, timing="hot", shape_class=shape_class, hwid=hwid, ts=ts)
    m = rec["metrics"]
    if cache is not None:
        m.update(cache_resident=cache, working_set_bytes=m["bytes_moved"], cache_bytes=dict(CACHES),
                 copy_same_size_gbps=copy_gbps, pct_of_same_size_copy=100 * m["gbps"] / copy_gbps,
                 copy_same_size={"bytes_moved": m["bytes_moved"], "time_median_s": m["bytes_moved"] / copy_gbps / 1e9,
                                 "reps": 5, "method": "test"})
    assert validate_record(rec) == [], validate_record(rec)
    return rec


def _rows(recs):
    rows = [agg.kernel_row(Entry(r, "results/x.json", i)) for i, r in enumerate(recs)]
    agg.add_cache_residency(rows)
    return rows


def test_a_cache_sized_record_is_never_ranked_against_the_dram_ceiling():
    # cache-sized: 2 MiB of float32, at 19 GB/s (95 % of the 20 GB/s DRAM ceiling, 50 % of its same-size copy);
    # DRAM-sized: 256 MiB at 16 GB/s (80 % of the ceiling)
    small = _kernel("layernorm", [512, 1024], (2 * 512 * 1024 * 4 + 8192) / 19e9, cache="LLC", copy_gbps=38.0)
    big = _kernel("rmsnorm", [65536, 1024], (2 * 65536 * 1024 * 4 + 8192) / 16e9, cache="none", copy_gbps=17.0)
    rows = _rows([small, big])
    by = {r["norm"]: r for r in rows}
    assert by["layernorm"]["pct"] > by["rmsnorm"]["pct"]  # by the DRAM % alone the cache-sized one would lead
    assert [r["norm"] for r in agg.best_by_bandwidth(rows)] == ["rmsnorm"]
    assert [r["norm"] for r in agg.best_by_same_size_copy(rows)] == ["layernorm"]
    assert [r["norm"] for r in agg.rank_by_bandwidth(rows)] == ["rmsnorm", "layernorm"]
    assert [r["norm"] for r in agg.best_backend_per_norm(rows)] == ["rmsnorm"]
    assert [r["norm"] for r in agg.best_backend_per_norm(rows, "copy")] == ["layernorm"]


def test_old_records_get_their_hardwares_cache_sizes_or_are_kept_out_when_clearly_cache_sized():
    new = _kernel("rmsnorm", [65536, 1024], 0.03, cache="none", copy_gbps=17.0, ts="2025-12-01T00:00:00Z")
    old_small = _kernel("layernorm", [3072, 1024], 2e-3)       # same hardware, no field: derived LLC
    old_big = _kernel("dyt", [65536, 1024], 0.03)               # derived none
    other_hw_quick = _kernel("layernorm", [8, 128, 512], 5e-4, shape_class="quick", hwid="cpu-other-2c")
    other_hw_llm = _kernel("dyt", [4096, 512], 1e-3, hwid="cpu-other-2c")
    known = known_caches([new, old_small, other_hw_quick])
    assert known == {"cpu-test-cpu-9000-8c": {"l2_bytes": CACHES["l2_bytes"], "llc_bytes": CACHES["llc_bytes"]}}
    assert record_residency(new, known) == ("none", "recorded")
    assert record_residency(old_small, known) == ("LLC", "derived")
    assert record_residency(old_big, known) == ("none", "derived")
    assert record_residency(other_hw_quick, known) == ("LLC", "assumed")
    assert record_residency(other_hw_llm, known) == (None, "unknown")
    rows = _rows([new, old_small, old_big, other_hw_quick, other_hw_llm])
    ranked = {r["norm"] + "/" + r["hardware"] for r in agg.best_by_bandwidth(rows, 10)}
    assert ranked == {"rmsnorm/cpu-test-cpu-9000-8c", "dyt/cpu-test-cpu-9000-8c", "dyt/cpu-other-2c"}
    assert agg.best_by_same_size_copy(rows) == []  # old records have no same-size copy: shown, not ranked


def test_the_site_leads_with_a_dram_case_and_ranks_the_cache_resident_one_apart(tmp_path):
    from normbench.records import write_records
    from normbench.site import build_site

    small = _kernel("layernorm", [512, 1024], (2 * 512 * 1024 * 4 + 8192) / 19e9, cache="LLC", copy_gbps=38.0)
    big = _kernel("rmsnorm", [65536, 1024], (2 * 65536 * 1024 * 4 + 8192) / 16e9, cache="none", copy_gbps=17.0)
    write_records([small, big], tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "site", charts=False)
    html = (tmp_path / "site" / "index.html").read_text()
    dram = html.index("Closest to the DRAM bandwidth ceiling")
    copy = html.index("Closest to a same-size copy")
    assert dram < html.index("rmsnorm", dram) < copy  # the DRAM ranking holds the DRAM-sized case
    assert html.find("layernorm", dram, copy) == -1   # and never the cache-resident one
    assert html.find("layernorm", copy) > copy and "% same-size copy" in html[copy:]
    assert math.isclose(small["metrics"]["pct_of_same_size_copy"], 50.0, rel_tol=1e-3)


def test_suspect_is_judged_against_the_same_size_copy_for_cache_resident_cases():
    """The rule the measuring code and the validator share (schema.above_reference): a cache-resident case is
    suspect when faster than its same-size copy, not for beating the DRAM ceiling (20 GB/s in these records)."""
    import copy as copy_mod

    from normbench.records.schema import above_reference

    assert above_reference(40.0, 20.0, 60.0, "LLC") is None
    assert above_reference(10.0, 20.0, 5.0, "L2") == ("same-size copy", 5.0)
    assert above_reference(40.0, 20.0, 60.0, "none") == ("copy ceiling", 20.0)
    assert above_reference(40.0, 20.0, None, "LLC") == ("copy ceiling", 20.0)  # no copy: the DRAM ceiling
    nbytes = 2 * 512 * 1024 * 4 + 8192
    # twice the DRAM ceiling, within its same-size copy, in cache: valid without the flag
    in_cache = _kernel("layernorm", [512, 1024], nbytes / 40e9, cache="LLC", copy_gbps=60.0)
    assert "suspect" not in in_cache["flags"]
    # the same speed out of cache must be flagged
    out = copy_mod.deepcopy(in_cache)
    out["metrics"]["cache_resident"] = "none"
    assert any("above the ceiling" in p and "not flagged suspect" in p for p in validate_record(out))
    # faster than its copy and than the DRAM ceiling: must be flagged
    beats_copy = _kernel("layernorm", [512, 1024], nbytes / 40e9, cache="LLC", copy_gbps=60.0)
    m = beats_copy["metrics"]
    m.update(copy_same_size_gbps=30.0, pct_of_same_size_copy=100 * m["gbps"] / 30.0)
    assert any("same-size copy" in p and "not flagged suspect" in p for p in validate_record(beats_copy))
    # faster than its copy but under the DRAM ceiling (a record made before the rule): still valid
    _kernel("layernorm", [512, 1024], nbytes / 10e9, cache="L2", copy_gbps=5.0)


def test_a_case_faster_than_its_same_size_copy_is_flagged_when_measured(monkeypatch):
    reference.clear()
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": dict(CACHES))
    slow_copy = {"bytes_moved": 0, "gbps": 1e-6, "time_median_s": 1.0, "time_iqr_s": 0.0, "reps": 3,
                 "method": "a disturbed copy"}
    monkeypatch.setattr(reference, "same_size_copy", lambda run, nbytes, *a: {**slow_copy, "bytes_moved": nbytes})
    [rec] = group.measure_group([_case()], _ctx())
    assert rec["metrics"]["cache_resident"] == "L2"
    assert "suspect" in rec["flags"] and "same bytes" in rec["flag_reasons"]["suspect"]
    assert validate_record(rec) == []


def test_the_committed_overview_ranks_no_cache_resident_case_against_the_dram_ceiling(committed_results):
    """Issue #28's 'done when' on the records as committed: per device, the overview's 'closest to the DRAM ceiling'
    rows are all out of cache (the quick shapes, which fit a CPU's caches, led it before), and every cache-resident
    ranked row is ranked in the same-size-copy table instead."""
    from normbench.site.records import load_results

    loaded = load_results(committed_results)
    rows = [agg.kernel_row(e) for e in loaded.entries if e.kind == "kernel"]
    agg.add_cache_residency(rows)
    by_hw: dict = {}
    for r in rows:
        by_hw.setdefault(r["hardware"], []).append(r)
    led = 0
    for hw, hr in by_hw.items():
        top = agg.best_by_bandwidth(hr, 5)
        assert all(r["cache"] in ("none", "unknown", None) and r["dram"] for r in top), hw
        # a quick shape leads only where it does not fit the caches: cpu-amd-epyc-2c's quick tokens moving 8.4 MB
        # against its 8 MiB L3 are out of cache by the residency rule (its records say cache_resident "none")
        assert all(r["shape_class"] != "quick" or (r["cache"] == "none" and r["bytes"] > 8 * 2**20) for r in top), hw
        assert all(r["cache"] in ("L2", "LLC") for r in agg.best_by_same_size_copy(hr, 5)), hw
        led += bool(top)
    assert led >= 1  # at least one device has a DRAM-sized ranked case on top
