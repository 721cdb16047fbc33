"""The GPU noise rule and the ``host_bound`` flag on records, judged on the first H200 run's 258 records
(tests/fixtures/gpu-runs/2026-11-27-h200: forced, host-bound test data, never results).

The run timed every Python-launched callable at the host's pace (issue #35): the GPU rule must flag every Triton,
compile and Liger record among them and keep the eager records at 4096x8192 and above, whose GPU work outlasted the
host's launches, except the three LayerNorm eager backward records that spread as the host-bound ones do.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

from normbench import results
from normbench.measure import group, noise, planning
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings
from normbench.records import iter_records
from normbench.records.schema import bound_by, is_ranked
from normbench.site import aggregate as agg
from normbench.site.records import Entry

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "fixtures" / "gpu-runs" / "2026-11-27-h200"


@pytest.fixture(scope="module")
def h200() -> list[dict]:
    return [r for _, r in iter_records(H200, kind="kernel", errors="raise")]


def spread_flags(rec: dict) -> bool:
    met = rec["metrics"]
    return any(w.startswith("the repetitions spread")
               for w in noise.reasons(met["noise"], rec["config"]["device"], met["time_iqr_s"]))


def test_the_gpu_rule_flags_every_host_paced_backend_and_keeps_large_eager(h200):
    assert len(h200) == 258 and all(r["config"]["device"] == "cuda" and "forced" in r["flags"] for r in h200)
    others = [r for r in h200 if r["config"]["backend"] in ("triton", "compile", "liger")]
    assert len(others) == 192 and all(spread_flags(r) for r in others)
    large_eager = [r for r in h200 if r["config"]["backend"] == "eager"
                   and math.prod(r["config"]["shape"]) >= 4096 * 8192]
    flagged = sorted((r["norm"]["name"], r["config"]["shape_label"], r["config"]["pass"])
                     for r in large_eager if spread_flags(r))
    assert len(large_eager) == 30 and len(large_eager) - len(flagged) == 27
    # no limit could keep these three and flag the least spread Liger record (7.3 %): eager LayerNorm's backward
    # spreads as the host-paced records do (7.7-31.5 %)
    assert flagged == [("layernorm", "llm-4096x16384", "bwd"), ("layernorm", "llm-4096x16384", "fwd+bwd"),
                       ("layernorm", "llm-4096x8192", "fwd+bwd")]
    # the CPU limit, which judged them when they were measured, flagged 20 of 258
    assert sum(r["metrics"]["noise"]["rel_iqr"] > noise.REL_IQR_LIMIT for r in h200) == 20


def test_a_gpu_spread_below_the_event_resolution_is_not_noise():
    quiet = {"rel_iqr": 0.2}
    assert noise.reasons(quiet, "cuda", iqr_s=0.6e-6) == []                   # a tick of a 3 µs kernel
    assert "GPU limit" in noise.reasons(quiet, "cuda", iqr_s=3e-6)[0]
    assert noise.reasons({"rel_iqr": 0.2}, "cpu", iqr_s=3e-6) == []          # the CPU limit is 50 %
    assert noise.rel_iqr_limit("cuda:1") == noise.GPU_REL_IQR_LIMIT < noise.REL_IQR_LIMIT


def test_the_documented_h200_figures_are_the_reports_output(h200):
    spec = importlib.util.spec_from_file_location("gpu_run_report", ROOT / "scripts" / "gpu_run_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs" / "measurement.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- normbench:generated h200-timing begin -->\n(.*?)<!-- normbench:generated h200-timing "
                      r"end -->", doc, re.S)
    assert block, "docs/measurement.md lost its h200-timing block"
    assert block.group(1).rstrip("\n") == mod.report(str(H200), h200).rstrip("\n"), \
        "regenerate it: python scripts/gpu_run_report.py tests/fixtures/gpu-runs/2026-11-27-h200"


def test_gpu_host_time_and_host_bound_reach_the_record_and_the_site():
    tiny = Shape("tiny-tokens", "tokens", (16, 64), "quick")
    case = planning.Case("dyt", "eager", tiny, "float32", "fwd", "cpu", "hot", 1)
    import normbench

    prep = group.Prepared(normbench.get_norm("dyt"), "eager", tiny, "float32", "cpu")
    ctx = group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"),
                        TimerSettings(warmup=0, min_reps=3, max_reps=3, min_time=0.0), None, ceiling_spread=0.01)
    err = {"y": {"max_abs": 0.0, "max_rel": 0.0}}
    quiet = {"load1": 0.0, "cores": 2, "background_load_per_core": 0.0}
    ahead = {"batches": 5, "retries": 2, "failed": 1, "spin_clock_hz": 1.98e9, "spin_s": 0.01}
    bound = group.build_record(prep, case, ctx, [20e-6] * 3, False, err, None, None, quiet,
                               host={"host_s": 200e-6, "keep_ahead": ahead, "host_bound": "the queue ran dry"})
    clean = group.build_record(prep, case, ctx, [20e-6] * 3, False, err, None, None, quiet,
                               host={"host_s": 5e-6, "keep_ahead": dict(ahead, failed=0), "host_bound": None})
    for r in (bound, clean):
        assert results.validate_record(r) == []
    assert bound["flags"] == ["host_bound"] and bound["flag_reasons"]["host_bound"] == "the queue ran dry"
    assert not is_ranked(bound) and is_ranked(clean)
    assert bound["metrics"]["host_s"] == 200e-6 and bound["metrics"]["keep_ahead"] == ahead
    assert bound_by(bound) == "host" and bound_by(clean) == "gpu"
    row = agg.kernel_row(Entry(bound, "x.json", 0))
    assert row["flagged"] and row["host"] == 200e-6 and row["bound"] == "host"
    from normbench.site.pages import bound_text, timing_text

    assert "the host bounds the call" in bound_text(row) and "the GPU bounds" in timing_text(clean)
    # ranked nowhere, as every other flag: the site's best lists, `best`, the claims' statistics
    clean_row = agg.kernel_row(Entry(clean, "y.json", 0))
    assert agg.best_by_same_size_copy([row, clean_row]) + agg.best_by_bandwidth([row, clean_row]) == [clean_row]
    from normbench import stats
    from normbench.best import _why_not

    assert "host_bound" in _why_not(bound) and stats.record_status(bound) == "flagged"
    # a record without host time (a CPU or an older GPU record) has none to show
    plain = group.build_record(prep, case, ctx, [20e-6] * 3, False, err, None, None, quiet)
    assert "host_s" not in plain["metrics"] and bound_by(plain) is None and timing_text(plain) is None
