"""The site built from real records written by the current writers (issue #52 item 3), not test_site_support's
synthetic ones: CPU records of a real tiny ``normbench bench`` run, the H200 run's records (tests/fixtures/gpu-runs,
read through the store's reader as the site reads them) and a GPU record with host info made through the fake GPU
stream (tests/fake_gpu.py). Every record is published with its metrics, flags and provenance as its page shows them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import test_site_support as sup
from fake_gpu import FakeGPU, cuda_on_cpu

from normbench import cli
from normbench.measure import group, planning
from normbench.measure.shapes import parse_shape
from normbench.measure.timers import TimerSettings
from normbench.records import iter_records
from normbench.records.store import write_records

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "fixtures" / "gpu-runs" / "2026-11-27-h200"
FAKE_HW = "gpu-fake-stream-h200"


def _fake_gpu_record(monkeypatch, h200_prov: dict) -> dict:
    """A host-bound GPU record made by measure_group through the fake stream, with the H200 run's provenance under a
    hardware id of its own (it was not measured on that machine)."""
    prov = dict(h200_prov, hardware_id=FAKE_HW, command="pytest: measure_group through tests/fake_gpu.py")
    gpu = FakeGPU()
    cuda_on_cpu(monkeypatch, gpu, host_s=200e-6, gpu_s=20e-6)
    ctx = group.Context(4000.0, "fake GPU copy ceiling", prov, TimerSettings(warmup=1, min_reps=8, max_reps=8,
                                                                             min_time=0.0), 4800.0)
    case = planning.Case("rmsnorm", "eager", parse_shape("4x8x64"), "float32", "fwd", "cuda", "hot", 1,
                         keep_ahead=False)
    [rec] = group.measure_group([case], ctx)
    monkeypatch.undo()
    return rec


@pytest.fixture(scope="module")
def real_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-site")
    results = root / "results"
    # CPU: a real tiny bench run, eager and native head to head (the check gate and the CPU ceiling as a user's run
    # has them)
    code = cli.main(["bench", "--norm", "rmsnorm", "--backend", "eager", "native", "--shape", "4x8x64",
                     "--dtype", "float32", "--pass", "fwd", "--quick", "--executor", "inprocess", "--threads", "1",
                     "--no-progress", "--out", str(results)])
    assert code == 0
    # the H200 run's files, as they came back
    h200_dir = results / "kernel" / "gpu-h200-fixture"
    h200_dir.mkdir(parents=True)
    for f in H200.glob("*.json.gz"):
        shutil.copy(f, h200_dir / f.name)
    h200 = [r for _, r in iter_records(H200, kind="kernel", errors="raise")]
    mp = pytest.MonkeyPatch()
    try:
        fake = _fake_gpu_record(mp, h200[0]["provenance"])
    finally:
        mp.undo()
    write_records([fake], results)
    records = [r for _, r in iter_records(results, errors="raise")]
    from normbench.site import build_site

    report = build_site(results, root / "site", charts=False, cache=False)
    return root / "site", report, records, fake


def test_every_real_record_is_published_with_what_its_page_shows(real_site):
    from normbench.site.pages import _text

    site, report, records, fake = real_site
    cpu = [r for r in records if r["config"]["device"] == "cpu"]
    gpu = [r for r in records if r["config"]["device"] == "cuda"]
    assert len(cpu) == 2 and len(gpu) == 258 + 1 and not report.rejected
    assert report.records == len(records) and report.kernel == len(records)
    published = {r["id"]: (p, r) for p, r in sup.published(site)}
    assert set(published) == {r["id"] for r in records}
    details: dict = {}
    for rec in records:
        page = sup.page_of(published[rec["id"]][0])
        if page not in details:
            details[page] = sup.record_details(page)
        d = details[page][rec["id"]]
        assert d["metrics"] == {k: _text(v) for k, v in sup.flat2(rec["metrics"]) if k != "curve"}, rec["id"]
        assert d["config"] == {k: _text(v) for k, v in sup.flat2(rec["config"])}
        for f in rec.get("flags") or []:
            assert f in {x[1] for x in d["flags"]}


def test_the_real_writers_fields_reach_the_pages(real_site):
    """The fields the synthetic records lack: shape labels, bytes models, noise, cache residency, the same-size copy,
    host time and keep-ahead; the fake GPU record's host_bound flag with its reason."""
    site, _, records, fake = real_site
    published = {r["id"]: (p, r) for p, r in sup.published(site)}
    cpu = next(r for r in records if r["config"]["device"] == "cpu")
    for rec in (cpu, fake):
        assert rec["config"]["shape_label"] and rec["config"]["bytes_model"]["formula"]
        assert rec["metrics"]["noise"] and rec["metrics"]["cache_resident"]
        assert rec["metrics"]["copy_same_size"] is not None
    assert all(len(r["metrics"]["paired"]) == 1 for r in records if r["config"]["device"] == "cpu")  # head to head
    p, _ = published[fake["id"]]
    d = sup.record_details(sup.page_of(p))[fake["id"]]
    assert fake["metrics"]["host_s"] > 0 and "host_s" in d["metrics"]
    assert "host_bound" in {x[1] for x in d["flags"]} and "host_bound" in fake["flags"]
    pages = {sup.page_of(p).name for p, r in sup.published(site)}
    assert len(pages) == 3  # one record page per machine: the CPU, the H200 and the fake GPU
