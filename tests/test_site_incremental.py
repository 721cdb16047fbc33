"""The incremental site build (``normbench.site.incremental``): a rebuild after one record changes renders exactly
the pages that show it, the rest come from the cache byte for byte, and the site equals a build without the cache."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_site_support as sup

from normbench.records.store import atomic_write_bytes, dump_compact, read_record_file
from normbench.site import build_site, tables
from normbench.site.pages import download_stem
from normbench.site.records import record_data_file


def _page_of_data(rel: str) -> str:
    """The record page of a record data file (``data/machines/<page>.js``)."""
    return "records/" + rel[len("data/machines/"):-len(".js")] + ".html"

TIME = re.compile(rb" on \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _files(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): TIME.sub(b"", p.read_bytes()) for p in site.rglob("*") if p.is_file()}


def _text(rel: str, data: bytes) -> str:
    if rel.endswith(".gz"):
        data = gzip.decompress(data)
    if rel.startswith("data/") and rel.endswith(".js"):   # a data file's payload is compressed (data_script)
        return json.dumps(tables.read_data_script(data.decode("ascii"))[2])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return ""


@pytest.fixture
def demo(tmp_path, monkeypatch):
    # As the demo site: big tables above 30 rows, so the data files (and a norm's shared per-device files) are used.
    monkeypatch.setattr(tables, "PAGE_ROWS", 20)
    monkeypatch.setattr(tables, "INLINE_MAX", 30)
    monkeypatch.setattr(tables, "PREVIEW", 10)
    sup.write_demo(tmp_path / "results")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "measurement.md").write_text("# Measurement\n\nBytes.\n")
    return tmp_path


def _edit(results: Path, pick, change) -> dict:
    """Change the first record ``pick`` accepts, in its file; the record as now stored."""
    for path in sorted(results.rglob("*.json.gz")):
        recs, problem = read_record_file(path)
        assert problem is None
        for rec in recs:
            if pick(rec):
                change(rec)
                atomic_write_bytes(path, dump_compact(recs))
                return rec
    raise AssertionError("no record to edit")


def test_a_rebuild_renders_exactly_the_pages_that_show_the_changed_record(demo):
    results, docs, out = demo / "results", demo / "docs", demo / "site"
    first = build_site(results, out, docs=docs, jobs=1)
    assert first.reused == 0 and (demo / ".site.cache" / "manifest.json").exists()
    before = _files(out)

    again = build_site(results, out, docs=docs, jobs=1)   # nothing changed: nothing rendered but the overview
    assert set(again.rendered) <= {"index.html"} and _files(out) == before

    # One kernel record's peak memory, a number its tables show.
    rec = _edit(results, lambda r: r["kind"] == "kernel" and r["norm"]["name"] == "rmsnorm"
                and r["config"]["backend"] == "eager",
                lambda r: r["metrics"].update(peak_mem_bytes=987_654_321))
    report = build_site(results, out, docs=docs, jobs=1)
    after = _files(out)
    assert set(after) == set(before)
    changed = {rel for rel in after if after[rel] != before[rel]}
    key = rec["id"].replace(":", "_")
    shows = {rel for rel, data in after.items() if key in _text(rel, data) or rec["id"] in _text(rel, data)}
    # Every changed file shows the record (a record page's data file holds its records' config and metrics by
    # position; its device's Parquet download, binary, holds it)...
    shows |= {record_data_file(rel) for rel in shows if rel.startswith("records/") and rel.endswith(".html")}
    hw = rec["provenance"]["hardware_id"]
    part = download_stem(hw)
    assert changed - {"index.html", part + ".parquet"} <= shows, sorted(changed - shows)
    # ... the files showing it in full changed: its record page's data and JSON, its norm's per-device table (the
    # norm's every-record table loads the same file), the downloads.
    page = next(rel for rel in shows if rel.startswith("records/") and rel.endswith(".html"))
    for must in (record_data_file(page), page[:-5] + ".json.gz", part + ".csv.gz", part + ".parquet"):
        assert must in changed, must
    # ... and the other devices' downloads did not (one file pair per device).
    assert not {rel for rel in changed if rel.startswith("downloads/") and not rel.startswith(part)}
    assert [rel for rel in changed if rel.startswith("data/knd-rmsnorm-cpu-test")], hw
    # ... and exactly the pages that changed were rendered (a record page with its data file and JSON, which hold its
    # records' numbers; its HTML holds anchors, flags and commands); every other page came from the cache.
    pages_changed = {rel for rel in changed if rel.endswith(".html")}
    pages_changed |= {_page_of_data(rel) for rel in changed if rel.startswith("data/machines/")}
    assert set(report.rendered) - {"index.html"} == pages_changed - {"index.html"}
    assert report.reused >= len([r for r in after if r.endswith(".html")]) - len(report.rendered)
    assert "987654321" in _text(record_data_file(page), after[record_data_file(page)])

    # The cache never serves what another build would not write: a build without it is the same site.
    cold = build_site(results, demo / "cold", docs=docs, jobs=1, cache=False)
    assert cold.reused == 0
    assert _files(demo / "cold") == after


def test_a_newer_copy_in_another_file_replaces_the_record_everywhere_it_is_shown(demo):
    """Deduplication crosses files: the newer copy of an id, in a plain file beside the others, wins on every page
    that showed the old one, with or without the cache."""
    results, docs, out = demo / "results", demo / "docs", demo / "site"
    build_site(results, out, docs=docs, jobs=1)
    old = next(r for _p, recs in ((p, read_record_file(p)[0]) for p in sorted(results.rglob("*.json.gz")))
               for r in recs if r["kind"] == "kernel")
    new = json.loads(json.dumps(old))
    new["provenance"]["timestamp"] = "2099-01-01T00:00:00Z"
    new["metrics"]["peak_mem_bytes"] = 123_454_321
    (results / "kernel" / "extra.json").write_text(json.dumps([new]))
    report = build_site(results, out, docs=docs, jobs=1)
    assert report.superseded == 1
    after = _files(out)
    key = old["id"].replace(":", "_")
    page = next(rel for rel, data in after.items()
                if rel.startswith("data/machines/") and "123454321" in _text(rel, data))
    assert key in _text(_page_of_data(page), after[_page_of_data(page)])
    assert "extra.json" in _text("rejected.html", after["rejected.html"])
    build_site(results, demo / "cold", docs=docs, jobs=1, cache=False)
    assert _files(demo / "cold") == after


def test_reading_through_the_cache_and_processes_reads_the_same_records(demo):
    """The read cache (``results.readcache``) judged in forked processes and read back (one entry damaged: judged
    again) gives what a plain read gives: the same records, rejections and superseded copies, in the same order."""
    from normbench.results.counted import records_that_count
    from normbench.results.readcache import ReadCache

    results = demo / "results"
    sup.write_hostile(results / "hostile")
    (results / "kernel" / "broken.json").write_text("{not json")

    def seen(c):
        return ([(e.path, e.index, json.dumps(e.rec, sort_keys=True)) for e in c.entries],
                [(r.path, r.index, r.label, r.problems) for r in c.rejected],
                [(a.path, a.index, b.path, b.index) for a, b in c.superseded], c.files)

    want = seen(records_that_count(results))
    # Judged in forked processes, then cached: in a fresh process, since the reader judges serially in one that has
    # loaded vl_convert (its threads do not survive a fork), which another test in this process may have done.
    code = (f"import json, sys; from normbench.results.counted import records_that_count; "
            f"from normbench.results.readcache import ReadCache; cache = ReadCache({str(demo / 'rc')!r}); "
            f"c = records_that_count({str(results)!r}, cache=cache, jobs=2); assert 'vl_convert' not in sys.modules; "
            f"print(json.dumps([[[str(e.path), e.index, json.dumps(e.rec, sort_keys=True)] for e in c.entries], "
            f"[[str(r.path), r.index, r.label, r.problems] for r in c.rejected], "
            f"[[str(a.path), a.index, str(b.path), b.index] for a, b in c.superseded], c.files, cache.misses, "
            f"cache.hits], default=str))")
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    timeout=300).stdout)
    assert got[:4] == json.loads(json.dumps(want, default=str))
    assert got[4] > 0 and got[5] == 0
    cache = ReadCache(demo / "rc")
    # Beside the judged files, the stale judgement's hashes of today's code (so a rebuild need not import the norms).
    hashes = demo / "rc" / cache._name(("stale judgement hashes",))
    assert hashes.is_file() and cache.hashes()
    entries = sorted(p for p in (demo / "rc").iterdir() if p != hashes)
    entries[0].write_bytes(b"not a pickle")   # a damaged entry is judged again, never trusted
    again = ReadCache(demo / "rc")
    assert seen(records_that_count(results, cache=again, jobs=2)) == want
    assert again.hits == len(entries) - 1
    hashes.write_bytes(b"not a pickle")   # damaged hashes are computed again
    assert seen(records_that_count(results, cache=ReadCache(demo / "rc"), jobs=2)) == want


def test_kernel_rows_kept_per_file_are_the_rows_made_from_the_records(demo):
    """``aggregate.kernel_rows`` with the site cache's row store: the first build makes and keeps each file's rows, a
    second reads them back; both are the rows ``kernel_row`` makes (keys in the same order, each row its own dict
    with its entry), also for two files of the same bytes, and for a file whose kept rows miss a record."""
    import shutil

    from normbench.results.readcache import PickleDir, ReadCache
    from normbench.site import aggregate as agg
    from normbench.site.records import load_results

    results = demo / "results"
    src = sorted((results / "kernel").rglob("*.json.gz"))[0]
    twin = src.with_name("copy-" + src.name)
    shutil.copyfile(src, twin)   # same bytes: the same ids, so the reader keeps one copy of each
    loaded = load_results(results, cache=ReadCache(demo / "rc"))

    def seen(rows):
        return [(list(r), [v for k, v in r.items() if k != "entry"], r["entry"]) for r in rows]

    want = seen([agg.kernel_row(e) for e in loaded.entries if e.kind == "kernel"])
    store = PickleDir(demo / "rows", "test")
    assert seen(agg.kernel_rows(loaded.entries, store)) == want     # made and kept
    assert store.dir.is_dir() and any(store.dir.iterdir())
    again = agg.kernel_rows(loaded.entries, PickleDir(demo / "rows", "test"))
    assert seen(again) == want                                        # read back
    assert len({id(r) for r in again}) == len(again)
    # Kept rows that miss a record (it was another file's copy before): made, and the file's entry kept again.
    partial = [e for e in loaded.entries if e.kind == "kernel"]
    key = ("kernel rows", partial[0].digest)
    kept = store.get(key)
    kept.pop(partial[0].index)
    store.put(key, kept)
    assert seen(agg.kernel_rows(loaded.entries, PickleDir(demo / "rows", "test"))) == want
    assert partial[0].index in PickleDir(demo / "rows", "test").get(key)
    # Another namespace (other code) shares nothing.
    assert PickleDir(demo / "rows", "other").get(key) is None


def test_many_machines_rebuild_renders_the_changed_machine_and_equals_a_cold_build(tmp_path, monkeypatch):
    """In the many-machine layout (``pages.MANY_MACHINES`` passed), one machine's re-measured record renders that
    machine's record page and device page again (and the summaries that show it), never another machine's, and the
    site is byte for byte the site built without the cache."""
    from normbench.site import pages

    monkeypatch.setattr(pages, "MANY_MACHINES", 1)
    site, _, _ = sup.machines_site(tmp_path, cache=True)
    results = tmp_path / "results"
    _edit(results, lambda r: r["provenance"]["hardware_id"] == "gpu-machine-2",
          lambda r: r["metrics"].update(peak_mem_bytes=123454321))
    built = []   # the device pages the rebuild builds at all (an unchanged machine's comes from the cache unbuilt)
    device_page = pages.Site.device_page
    monkeypatch.setattr(pages.Site, "device_page", lambda self, hw: built.append(hw) or device_page(self, hw))
    again = build_site(results, site, charts=False, jobs=1)
    assert built == ["gpu-machine-2"]
    assert any(p.startswith("records/gpu-machine-2-") for p in again.rendered)
    assert any(p.startswith("devices/gpu-machine-2-") for p in again.rendered)
    assert not [p for p in again.rendered if "gpu-machine-0" in p or "gpu-machine-1" in p]
    assert again.reused > 0
    build_site(results, tmp_path / "cold", charts=False, cache=False)
    assert _files(site) == _files(tmp_path / "cold")


def test_a_machines_kept_aggregates_are_its_own_and_follow_its_records(tmp_path, monkeypatch):
    """The per-machine aggregates a rebuild keeps (``Site.per_machine``: speed-ups and rank keys, summary, facts)
    are made again for the machine whose records changed and for no other; a change that reorders that machine's
    ranking (a record made the fastest of its machine) and its speed-ups still gives the site a cold build gives."""
    from normbench.site import aggregate, pages

    monkeypatch.setattr(pages, "MANY_MACHINES", 1)
    site, _, _ = sup.machines_site(tmp_path, cache=True)
    results = tmp_path / "results"

    def faster(r):   # re-timed at 97 % of its ceiling: consistent, and the best of its machine
        met = r["metrics"]
        f = 97.0 / met["pct_of_ceiling"]
        met["time_median_s"] /= f
        met["gbps"] *= f
        met["pct_of_ceiling"] = 100.0 * met["gbps"] / met["ceiling_gbps"]

    before = (site / "index.html").read_text(encoding="utf-8")
    rec = _edit(results, lambda r: r["provenance"]["hardware_id"] == "gpu-machine-1" and not r.get("flags")
                and r["config"]["backend"] != "eager" and (r["metrics"].get("pct_of_ceiling") or 0) > 10
                and r["id"][:10] not in before, faster)
    made: dict[str, list[str]] = {"derived": [], "summary": [], "hw_facts": []}
    derive, summary, facts = aggregate.derive_machine, pages.Site._machine_summary, pages.Site._hw_facts
    monkeypatch.setattr(aggregate, "derive_machine", lambda rows: made["derived"].append(rows[0]["hardware"])
                        or derive(rows))
    monkeypatch.setattr(pages.Site, "_machine_summary", lambda self, hw: made["summary"].append(hw)
                        or summary(self, hw))
    monkeypatch.setattr(pages.Site, "_hw_facts", lambda self, hw: made["hw_facts"].append(hw) or facts(self, hw))
    build_site(results, site, charts=False, jobs=1)
    assert made == {"derived": ["gpu-machine-1"], "summary": ["gpu-machine-1"], "hw_facts": ["gpu-machine-1"]}
    build_site(results, tmp_path / "cold", charts=False, cache=False)
    assert _files(site) == _files(tmp_path / "cold")
    # the edited record now leads its machine in the overview's top table
    assert rec["id"][:10] in (site / "index.html").read_text(encoding="utf-8")


def test_a_rebuild_unpickles_the_changed_machines_records_alone(tmp_path, monkeypatch):
    """A rebuild reads an unchanged machine's pages and aggregates from the site cache: of the records the read
    cache holds (``readcache.FileRecords``), it unpickles the changed machine's and, for each norm's name and
    description, the file of that norm's newest record, and no other (a reader that touches every record, as the
    methodology page's bytes models or the softmax page's families once did, turns this red). Its site is the cold
    build's, byte for byte."""
    from normbench.results import readcache
    from normbench.results.counted import records_that_count
    from normbench.site import pages

    monkeypatch.setattr(pages, "MANY_MACHINES", 1)
    site, _, _ = sup.machines_site(tmp_path, n=4, cache=True)
    results = tmp_path / "results"
    _edit(results, lambda r: r["provenance"]["hardware_id"] == "gpu-machine-2",
          lambda r: r["metrics"].update(peak_mem_bytes=123454321))
    read: list[set] = []   # per file unpickled, the (machine, id) of its records
    record = readcache.FileRecords.record

    def counted(self, pos):
        if self._recs is None:
            out = record(self, pos)
            read.append({(r["provenance"]["hardware_id"], r["id"]) for r in self._recs})
            return out
        return record(self, pos)

    monkeypatch.setattr(readcache.FileRecords, "record", counted)
    build_site(results, site, charts=False, jobs=1)
    # the newest record of each norm (ties: the one read last), from a plain read
    newest: dict[str, dict] = {}
    for rec in sorted(records_that_count(results).records, key=lambda r: r["provenance"]["timestamp"]):
        newest[rec["norm"]["name"]] = rec
    norms_newest = {(r["provenance"]["hardware_id"], r["id"]) for r in newest.values()}
    assert read, "nothing was read from the read cache: the rebuild judged every file again"
    others = [ids for ids in read if any(hw != "gpu-machine-2" for hw, _ in ids)]
    assert all(ids & norms_newest for ids in others), [sorted(ids)[:2] for ids in others if not ids & norms_newest]
    assert len(others) <= len(newest)
    build_site(results, tmp_path / "cold", charts=False, cache=False)
    assert _files(site) == _files(tmp_path / "cold")
