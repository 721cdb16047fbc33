"""``normbench compare``: matching cases across record sets, noise-aware verdicts, the exit status; and the compact
record files it reads (round trip, migration of plain v1 files, concurrent writers)."""

from __future__ import annotations

import gzip
import importlib
import json
import multiprocessing
import sys
import textwrap

import pytest
import torch
from test_results import _norm, kernel_record

from normbench import results
from normbench.cli import main
from normbench.measure import group, noise, planning, sweep
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings
from normbench.records import store
from normbench.results import compare as cmp

TINY = Shape("tiny-tokens", "tokens", (16, 64), "quick")


def _rec(time_s, iqr_frac=0.02, reps=50, dtype="float32", norm="layernorm", flags=None, hw="cpu-test-2c"):
    rec = kernel_record(time_s=time_s, dtype=dtype, norm=norm, time_iqr_s=time_s * iqr_frac, reps=reps,
                        ceiling=1e9)
    rec["provenance"]["hardware_id"] = hw
    for f, why in (flags or {}).items():
        results.add_flag(rec, f, why)
    return rec


# --- verdicts from known medians and IQRs ---------------------------------------------------------------------------

def test_verdicts_follow_the_factor_and_the_noise():
    base = [_rec(1e-3, dtype="float32"), _rec(1e-3, dtype="bfloat16"), _rec(1e-3, dtype="float16"),
            _rec(1e-3, dtype="float64", norm="rmsnorm"), _rec(1e-3, norm="dyt")]
    new = [_rec(2e-3, dtype="float32"),                       # 2x, tight IQRs: slower
           _rec(0.5e-3, dtype="bfloat16"),                    # 0.5x: faster
           _rec(1.3e-3, iqr_frac=1.5, reps=5, dtype="float16"),  # 1.3x but the IQR is wider than the change
           _rec(1.05e-3, dtype="float64", norm="rmsnorm"),    # within the factor
           _rec(1e-3, norm="groupnorm")]                      # only in new
    rows = cmp.compare(base, new, factor=1.1)
    got = {r.case.split("/")[0] + "/" + r.case.split("/")[3]: (r.verdict, r.ratio) for r in rows}
    assert got["layernorm/float32"] == ("slower", pytest.approx(2.0))
    assert got["layernorm/bfloat16"] == ("faster", pytest.approx(0.5))
    assert got["layernorm/float16"][0] == "within noise"
    assert got["rmsnorm/float64"] == ("same", pytest.approx(1.05))
    assert got["groupnorm/float32"][0] == "only in new" and got["dyt/float32"][0] == "only in base"
    ratios = [r.ratio for r in rows if r.ratio is not None]
    assert ratios == sorted(ratios, reverse=True)  # largest slow-down first
    # a larger factor turns the 2x regression into "same"
    assert {r.verdict for r in cmp.compare(base[:1], new[:1], factor=3.0)} == {"same"}


def test_median_interval_uses_order_statistics_of_the_recorded_quantiles():
    rec = _rec(1e-3, iqr_frac=0.1, reps=25)
    m = rec["metrics"]
    m.update(time_q25_s=0.96e-3, time_q75_s=1.06e-3, time_min_s=0.9e-3)
    # n = 25: quantiles 0.5 -/+ 2.5758 * 0.5 / 5 = 0.2424 / 0.7576
    lo, hi = cmp.median_interval(rec)
    assert lo == pytest.approx(0.9e-3 + (0.96e-3 - 0.9e-3) * 0.2424 / 0.25, rel=1e-3)
    assert hi == pytest.approx(1.06e-3 + 1.5 * 0.1e-3 * (0.7576 - 0.75) / 0.25, rel=1e-3)
    m["reps"] = 10_000  # many repetitions: the interval shrinks to the median
    lo, hi = cmp.median_interval(rec)
    assert hi - lo < 0.02 * (1.06e-3 - 0.96e-3) * 4
    m["reps"] = 3  # very few: the interval reaches the minimum and Tukey's fence
    assert cmp.median_interval(rec) == (pytest.approx(0.9e-3), pytest.approx(1.06e-3 + 1.5e-4))


def test_a_heavy_upper_tail_does_not_hide_a_gross_change():
    base = _rec(23e-6, reps=15)
    base["metrics"].update(time_q25_s=21e-6, time_q75_s=26e-6, time_min_s=20e-6, time_iqr_s=5e-6)
    new = _rec(2.7e-3, reps=15)  # 117x slower, and a quarter of its repetitions preempted for ~20 ms
    new["metrics"].update(time_q25_s=2.5e-3, time_q75_s=18e-3, time_min_s=2.4e-3, time_iqr_s=15.5e-3)
    [row] = cmp.compare([base], [new])
    assert row.verdict == "slower"


def test_invalid_new_records_fail_and_flags_are_shown():
    base = [_rec(1e-3), _rec(1e-3, dtype="bfloat16")]
    new = [_rec(1e-4, flags={"non_finite": "y is NaN"}), _rec(1e-3, dtype="bfloat16", flags={"noisy": "load"})]
    rows = {r.case.split("/")[3]: r for r in cmp.compare(base, new)}
    assert rows["float32"].verdict == "failed" and rows["float32"].ratio is None  # fast because broken
    assert rows["bfloat16"].verdict == "same" and rows["bfloat16"].flags == ["new:noisy"]
    assert cmp.compare(base, new)[0].verdict == "failed"  # failures lead the list


def test_newest_record_of_a_case_counts_and_hardware_can_be_ignored():
    old, newer = _rec(1e-3), _rec(3e-3)
    newer["provenance"]["timestamp"] = "2026-01-01T00:00:00Z"
    newer["impl_hash"] = "0123456789abcdef"  # re-measured after a code change: another id, the same case
    [row] = cmp.compare([_rec(1e-3)], [old, newer])
    assert row.verdict == "slower" and row.ratio == pytest.approx(3.0)
    other = _rec(1e-3, hw="gpu-other")
    assert {r.verdict for r in cmp.compare([_rec(1e-3)], [other])} == {"only in base", "only in new"}
    [row] = cmp.compare([_rec(1e-3)], [other], ignore_hardware=True)
    assert row.verdict == "same"


def test_cli_compare_exit_status_and_json(tmp_path, capsys):
    base, new = tmp_path / "base", tmp_path / "new"
    results.write_records([_rec(1e-3), _rec(1e-3, dtype="bfloat16")], base)
    results.write_records([_rec(1e-3), _rec(5e-3, dtype="bfloat16")], new)
    assert main(["compare", str(base), str(base)]) == 0
    capsys.readouterr()
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr()
    first = out.out.splitlines()[1]
    assert first.startswith("+") and "slower" in first and "bfloat16" in first and "5.00" in first
    assert "1 regression(s)" in out.err
    assert main(["compare", str(base), str(new), "--factor", "10"]) == 0
    capsys.readouterr()
    assert main(["compare", str(base), str(new), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["counts"] == {"same": 1, "slower": 1}
    assert main(["compare", str(base), str(tmp_path / "nope")]) == 2
    assert main(["compare", str(base), str(new), "--factor", "0.9"]) == 2


_SLOW_PLUGIN = """
import torch
from torch import nn
from normbench import NormSpec, Paper

REPEAT = {repeat}


class PlantedRMS(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        for _ in range(REPEAT - 1):  # the planted slow-down: the same work done again, result discarded
            (self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).sum()
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


SPEC = NormSpec(name="planted", title="planted", paper=Paper("p", "a", 2024, "https://example.org/p"),
                family="features", kind="activation", layouts=("tokens",), formula="y = w x / rms(x)",
                factory=lambda c, layout="tokens", **kw: PlantedRMS(c))
"""


def test_compare_catches_a_planted_slowdown_in_real_records(tmp_path, monkeypatch, capsys):
    """Two real sweeps of one norm, the second with 40x the work: a gross change, so not a timing test."""
    from normbench.discovery import REGISTRY

    monkeypatch.syspath_prepend(str(tmp_path))
    settings = TimerSettings(warmup=2, min_reps=15, max_reps=15, min_time=0.0)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: group.Context(
        1e6, "test ceiling", results.provenance(command="pytest", device="cpu"), settings, None))
    cases = [planning.Case("planted", "eager", TINY, "float32", p, "cpu", "hot", torch.get_num_threads())
             for p in ("fwd", "fwd+bwd")]
    cases += [planning.Case("rmsnorm", "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())]
    for name, repeat in (("base", 1), ("new", 40)):
        (tmp_path / "nb_planted.py").write_text(textwrap.dedent(_SLOW_PLUGIN.format(repeat=repeat)))
        importlib.invalidate_caches()
        sys.modules.pop("nb_planted", None)
        monkeypatch.setitem(REGISTRY.specs, "planted", importlib.import_module("nb_planted").SPEC)
        s = sweep.run_sweep(cases if name == "base" else cases[:2], tmp_path / name, settings=settings,
                            progress=False, log=lambda m: None)
        assert not s.failed
    sys.modules.pop("nb_planted", None)
    rc = main(["compare", str(tmp_path / "base"), str(tmp_path / "new")])
    out = capsys.readouterr().out
    assert rc == 1, out
    verdicts = {next(w for w in line.split() if w.startswith("planted/")).split("/")[4]: line
                for line in out.splitlines() if "planted/" in line}
    assert "slower" in verdicts["fwd"] and "slower" in verdicts["fwd+bwd"]
    assert any("only in base" in line and "rmsnorm/" in line for line in out.splitlines())


# --- compact record files -------------------------------------------------------------------------------------------

def test_compact_files_round_trip_and_store_provenance_once(tmp_path):
    recs = [kernel_record(dtype=d) for d in ("float32", "bfloat16", "float16")]
    for i, r in enumerate(recs):
        r["provenance"]["timestamp"] = f"2025-01-02T03:04:0{i}Z"
    recs.append({"not": "a record"})  # whatever was in a file survives a rewrite
    blob = store.dump_compact(recs)
    assert blob == store.dump_compact(recs)  # deterministic bytes (no gzip timestamp)
    data = json.loads(gzip.decompress(blob))
    assert len(data["provenance"]) == 1 and len(data["norms"]) == 1
    path = tmp_path / "x.json.gz"
    path.write_bytes(blob)
    back, problem = results.read_record_file(path)
    assert problem is None and back == recs
    assert list(back[0]) == list(recs[0])  # field order kept too


def test_plain_v1_files_are_merged_into_compact_files_and_migrated(tmp_path, capsys):
    hw = tmp_path / "kernel" / "cpu-test-2c"
    hw.mkdir(parents=True)
    v1 = kernel_record(time_s=2.5e-4)  # above the 10 GB/s ceiling
    for key in ("impl_hash", "flags", "flag_reasons", "check"):
        v1.pop(key)
    v1.update(schema_version=1)
    v1["metrics"].update(suspect=True, suspect_reason="cache-resident")
    broken = dict(kernel_record(dtype="float16"), schema_version=1)
    broken["metrics"] = {"time_median_s": -1}
    (hw / "layernorm.json").write_text(json.dumps([v1, broken]))
    # a new write merges the plain file in: nothing dropped, the plain file gone once the compact one is written
    new = kernel_record(dtype="bfloat16")
    results.write_records([new], tmp_path)
    assert sorted(p.name for p in hw.iterdir()) == ["layernorm.json.gz"]
    stored, _ = results.read_record_file(hw / "layernorm.json.gz")
    assert [r["id"] for r in stored] == [v1["id"], broken["id"], new["id"]]
    assert stored[0]["schema_version"] == 1  # a write keeps old records as they were
    # migrate: every valid record becomes v2 with flags from its data; the invalid one stays whole
    (hw / "rmsnorm.json").write_text(json.dumps([dict(v1, norm=_norm("rmsnorm"))]))
    assert main(["migrate", str(tmp_path)]) == 1  # 1: one record could not be migrated (invalid, kept)
    out = capsys.readouterr()
    assert "kept as is" in out.err and "metrics" in out.err
    assert sorted(p.name for p in hw.iterdir()) == ["layernorm.json.gz", "rmsnorm.json.gz"]
    stored, _ = results.read_record_file(hw / "layernorm.json.gz")
    assert [r["schema_version"] for r in stored] == [2, 1, 2]
    m = stored[0]
    assert m["id"] == v1["id"] and m["impl_hash"] == "" and m["flags"] == ["suspect"]
    assert m["flag_reasons"]["suspect"] == "cache-resident" and "suspect" not in m["metrics"]
    assert stored[1] == broken
    assert {r["id"] for _, r in results.iter_records(tmp_path, errors="ignore")} == {v1["id"], new["id"]}


def test_interrupted_merge_never_shows_a_record_twice(tmp_path):
    """The compact file was written but the plain one not yet removed: readers see each record once."""
    rec = kernel_record()
    [path] = results.write_records([rec], tmp_path)
    legacy = path.with_name("layernorm.json")
    extra = kernel_record(dtype="bfloat16")
    legacy.write_text(json.dumps([rec, extra]))
    ids = [r["id"] for _, r in results.iter_records(tmp_path)]
    assert sorted(ids) == sorted([rec["id"], extra["id"]])


def _writer(root, dtype_index):
    from test_results import kernel_record as kr

    dtypes = ("float32", "bfloat16", "float16", "float64")
    for i in range(5):
        rec = kr(dtype=dtypes[dtype_index], time_s=1e-3 * (i + 1))
        rec["config"]["threads"] = i + 1  # a distinct case per write
        rec["id"] = results.record_id("kernel", "layernorm", rec["config"], "cpu-test-2c")
        results.write_records([rec], root)


def test_concurrent_writers_merge_instead_of_overwriting(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), k)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert len({r["id"] for _, r in results.iter_records(tmp_path)}) == 20
    assert results.load_report(tmp_path) == []


def test_a_full_sweep_fits_the_size_budget(tmp_path, monkeypatch):
    """Real core records, re-keyed to the size of a full GPU sweep (13,000 records, the issue's count): < 5 MB."""
    import random

    monkeypatch.setattr(noise, "machine_load", lambda own=0.0, busy=None: {"load1": 0.3, "cores": 16,
                                                                "background_load_per_core": 0.02})
    ctx = group.Context(1e6, "device-to-device copy_ of 1024 MiB, CUDA events, median of 20; GB/s = 2·size/time",
                        results.provenance(command="normbench bench --device cuda", device="cpu"),
                        TimerSettings(warmup=0, min_reps=3, max_reps=3, min_time=0.0), 4800.0, ceiling_spread=0.004)
    seed = []
    for norm in ("layernorm", "rmsnorm", "dyt", "groupnorm"):
        shape = TINY if norm != "groupnorm" else Shape("tiny-images", "images", (2, 8, 4, 4), "quick")
        seed += group.measure_group([planning.Case(norm, "eager", shape, "float32", p, "cpu", "hot", 1)
                                    for p in ("fwd", "bwd", "fwd+bwd")], ctx)
    rng = random.Random(0)
    recs = []
    per_norm = 13000 // 4
    for i in range(per_norm * 4):
        r = json.loads(json.dumps(seed[i % len(seed)]))
        m = r["metrics"]
        scale = rng.uniform(0.2, 5.0)  # full-precision floats that differ in every record: the worst case for gzip
        for k in ("time_median_s", "time_iqr_s", "time_q25_s", "time_q75_s", "time_min_s"):
            m[k] *= scale
        m["gbps"] = m["bytes_moved"] / m["time_median_s"] / 1e9
        m["pct_of_ceiling"] = 100 * m["gbps"] / m["ceiling_gbps"]
        m["noise"]["rel_iqr"] = rng.random()
        r["config"]["shape"] = [rng.choice([1, 4, 16]), rng.choice([512, 2048, 8192]), 64]
        r["provenance"]["timestamp"] = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
        r["id"] = f"k-{i:020d}"
        recs.append(r)
    total = 0
    for k in range(4):  # one file per norm, as the store lays them out
        total += len(store.dump_compact(recs[k::4]))
    assert total < 5_000_000, total
