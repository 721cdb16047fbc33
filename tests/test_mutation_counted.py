"""Tests written against the mutants of normbench/results/counted.py (issue #52 item 2; docs/mutation-report.md): the
reader every ranking uses, on copies of committed records (results/, read through the store's reader) written to a
temporary folder and read back. Each expectation comes from how the files were written (which copy is newest, which
file is read last, which record was broken or made stale), not from the reader's code."""

from __future__ import annotations

import copy
import json
import sys
import types
import warnings
from pathlib import Path

import pytest

from normbench import processes
from normbench.records import iter_records
from normbench.records.schema import add_flag
from normbench.records.store import InvalidRecordError, Problem, describe, dump_compact
from normbench.results import counted, readcache, staleness
from normbench.results.readcache import ReadCache, file_digest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "results" / "kernel" / "cpu-amd-epyc-2c" / "rmsnorm.json.gz"


@pytest.fixture(scope="module")
def current() -> list[dict]:
    """Three committed kernel records of distinct ids, of today's code, checked and unflagged."""
    out: dict[str, dict] = {}
    for _, rec in iter_records(SOURCE, kind="kernel", errors="raise"):
        if (rec.get("check") is not None and not rec.get("flags") and rec["id"] not in out
                and staleness.stale_reason(rec) == (None, None)):
            out[rec["id"]] = rec
        if len(out) == 3:
            break
    assert len(out) == 3
    return list(out.values())


def _copy(rec: dict, ts: str | None = None) -> dict:
    out = copy.deepcopy(rec)
    if ts is not None:
        out["provenance"]["timestamp"] = ts
    return out


def _put(path: Path, recs: list[dict]) -> Path:
    """``recs`` as a compact record file at ``path`` (as the store writes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dump_compact(recs))
    return path


def _where(entry) -> tuple[str, int]:
    return entry.path.name, entry.index


def _seen(c: counted.Counted) -> tuple:
    """Everything a reader gives, as plain data (the records whole, with their flags)."""
    return ([(str(e.path), e.index, e.rid, e.digest, json.dumps(e.rec, sort_keys=True)) for e in c.entries],
            [(str(r.path), r.index, r.label, r.problems) for r in c.rejected],
            [(_where(a), _where(b)) for a, b in c.superseded], c.files)


def _mixed(root: Path, current: list[dict]) -> dict:
    """A results folder with duplicated ids across and within files, a stale, a legacy and an invalid record and an
    unreadable file; returns what was written, by role."""
    a, b, c = current
    stale = _copy(c, "2024-06-01T00:00:00Z")
    stale["impl_hash"] = "0" * 16
    legacy = _copy(b, "2024-06-01T00:00:00Z")
    legacy["check"] = None
    kdir = root / "kernel" / "m"
    _put(kdir / "1.json.gz", [_copy(a, "2030-01-01T00:00:00Z"), legacy])
    _put(kdir / "2.json.gz", [_copy(a, "2020-01-01T00:00:00Z"), stale])
    bad = _copy(a)
    bad["metrics"] = "not an object"
    (kdir / "3.json").write_text(json.dumps([bad, _copy(b, "2000-01-01T00:00:00Z")]))   # a valid record after it
    (kdir / "4.json").write_text("{not json")
    return {"stale": stale, "legacy": legacy, "bad": bad}


# --- one record per id ---------------------------------------------------------------------------------------------

def test_the_newest_copy_of_an_id_counts_and_a_tie_goes_to_the_copy_read_last(tmp_path, current):
    a, b, c = current
    kdir = tmp_path / "kernel" / "m"
    _put(kdir / "1.json.gz", [_copy(a, "2030-01-01T00:00:00Z"), _copy(b, "2025-01-01T00:00:00Z")])
    _put(kdir / "2.json.gz", [_copy(a, "2020-01-01T00:00:00Z"), _copy(b, "2025-01-01T00:00:00Z")])
    _put(kdir / "3.json.gz", [_copy(c, "2025-01-01T00:00:00Z"), _copy(c, "2025-01-01T00:00:00Z")])
    got = counted.records_that_count(tmp_path, kind="kernel", judge=False)
    # a: the newest (read first); b: a tie across files (the later file); c: a tie in one file (the later record)
    assert [(e.rid, _where(e)) for e in got.entries] == [
        (a["id"], ("1.json.gz", 0)), (b["id"], ("2.json.gz", 1)), (c["id"], ("3.json.gz", 1))]
    assert sorted((_where(old), _where(kept)) for old, kept in got.superseded) == [
        (("1.json.gz", 1), ("2.json.gz", 1)), (("2.json.gz", 0), ("1.json.gz", 0)),
        (("3.json.gz", 0), ("3.json.gz", 1))]
    assert got.files == 3
    assert [r["provenance"]["timestamp"] for r in got.records] == [
        "2030-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z"]
    assert got.records[0] is got.entries[0].rec


def test_one_per_id_keeps_the_newest_or_the_last_given(current):
    a, b, _ = current
    new_a, old_a = _copy(a, "2030-01-01T00:00:00Z"), _copy(a, "2020-01-01T00:00:00Z")
    b1, b2 = _copy(b, "2025-01-01T00:00:00Z"), _copy(b, "2025-01-01T00:00:00Z")
    kept = counted.one_per_id([b1, new_a, old_a, b2])
    assert len(kept) == 2 and kept[0] is b2 and kept[1] is new_a


def test_a_legacy_record_is_an_unchecked_kernel_record(current):
    rec = _copy(current[0])
    assert not counted.is_legacy(rec)
    rec["check"] = None
    assert counted.is_legacy(rec)
    del rec["check"]
    assert counted.is_legacy(rec)
    assert not counted.is_legacy({"kind": "accuracy", "check": None})
    assert not counted.is_legacy({"kind": "endtoend"})


# --- flags ---------------------------------------------------------------------------------------------------------

def test_only_the_copies_that_count_are_flagged_stale_or_legacy(tmp_path, current):
    a, b, c = current
    stale = _copy(a, "2024-01-01T00:00:00Z")
    stale["impl_hash"] = "0" * 16
    older_stale = _copy(stale, "2000-01-01T00:00:00Z")
    legacy = _copy(b)
    legacy["check"] = None
    both = _copy(c)
    both["impl_hash"], both["check"] = "0" * 16, None
    _put(tmp_path / "kernel" / "m" / "1.json.gz", [older_stale, legacy])
    _put(tmp_path / "kernel" / "m" / "2.json.gz", [stale, both])
    got = {e.rid: e.rec for e in counted.records_that_count(tmp_path).entries}
    assert got[a["id"]]["flags"] == ["stale"]
    assert got[a["id"]]["flag_reasons"] == {"stale": staleness.stale_flag_reason(stale)}
    assert got[b["id"]]["flags"] == ["legacy"]
    assert got[b["id"]]["flag_reasons"] == {"legacy": counted.LEGACY_REASON}
    assert "check: null" in counted.LEGACY_REASON and "never ranked" in counted.LEGACY_REASON
    assert got[c["id"]]["flags"] == ["legacy", "stale"]
    assert got[c["id"]]["flag_reasons"]["stale"] == staleness.stale_flag_reason(both)
    [(old, kept)] = counted.records_that_count(tmp_path).superseded
    assert _where(old) == ("1.json.gz", 0) and not old.rec.get("flags") and kept.rec["flags"] == ["stale"]
    # judge=False: nothing is judged, nothing flagged
    assert all(not e.rec.get("flags") for e in counted.records_that_count(tmp_path, judge=False).entries)


def test_a_record_stored_as_legacy_keeps_its_own_reason(tmp_path, current):
    legacy = _copy(current[0])
    legacy["check"] = None
    add_flag(legacy, "legacy", "migrated by hand from a v1 file")
    _put(tmp_path / "kernel.json.gz", [legacy])
    [e] = counted.records_that_count(tmp_path / "kernel.json.gz").entries
    assert e.rec["flags"] == ["legacy"] and e.rec["flag_reasons"] == {"legacy": "migrated by hand from a v1 file"}


# --- what is not a record ------------------------------------------------------------------------------------------

def test_invalid_records_and_unreadable_files_are_rejected_with_their_reasons(tmp_path, current):
    written = _mixed(tmp_path, current)
    kdir = tmp_path / "kernel" / "m"
    (kdir / "5.json.gz").symlink_to(kdir / "no-such-file")   # listed, then unreadable
    got = counted.records_that_count(tmp_path)
    assert [(r.path.name, r.index, r.label) for r in got.rejected] == [
        ("3.json", 0, describe(written["bad"], 0)), ("4.json", None, "file"), ("5.json.gz", None, "file")]
    assert all(r.problems for r in got.rejected)
    assert any("metrics" in p for p in got.rejected[0].problems)
    assert got.problems() == [Problem(str(r.path), None if r.index is None else r.label, p)
                              for r in got.rejected for p in r.problems]
    assert got.problems()[0].record == describe(written["bad"], 0) and got.problems()[-1].record is None
    # the valid record after the invalid one is read
    assert [_where(old) for old, _ in got.superseded if old.rid == current[1]["id"]] == [("3.json", 1)]
    # every file with an item counts, an unreadable one too
    assert got.files == 5
    assert {e.rid for e in got.entries} == {r["id"] for r in current}
    # a kind that none of them is: no entries, only the unreadable files
    other = counted.records_that_count(tmp_path, kind="accuracy")
    assert other.entries == [] and other.files == 2 and [r.index for r in other.rejected] == [None, None]


def test_a_plain_file_whose_compact_twin_holds_a_record_is_read_without_it(tmp_path, current):
    a, b, _ = current
    kdir = tmp_path / "kernel"
    _put(kdir / "x.json.gz", [_copy(a)])
    (kdir / "x.json").write_text(json.dumps([_copy(a), _copy(b)]))   # a merge cut short: a is in both
    got = counted.records_that_count(tmp_path)
    assert sorted((e.rid, e.path.name) for e in got.entries) == sorted([(a["id"], "x.json.gz"), (b["id"], "x.json")])
    assert got.superseded == []
    plain = next(e for e in got.entries if e.path.name == "x.json")
    assert plain.digest == file_digest((kdir / "x.json").read_bytes(), (kdir / "x.json.gz").read_bytes())
    compact = next(e for e in got.entries if e.path.name == "x.json.gz")
    assert compact.digest == file_digest((kdir / "x.json.gz").read_bytes(), None)
    assert _seen(counted.records_that_count(tmp_path, jobs=2)) == _seen(got)   # judged in processes: the same
    counted.records_that_count(tmp_path, cache=ReadCache(tmp_path / "rc"))
    for p in (tmp_path / "rc").iterdir():
        p.write_bytes(b"not a pickle")   # damaged entries: judged again, from the bytes read
    assert _seen(counted.records_that_count(tmp_path, cache=ReadCache(tmp_path / "rc"))) == _seen(got)
    # the twin unreadable: the plain file's records are all read
    (kdir / "x.json.gz").unlink()
    (kdir / "x.json.gz").symlink_to(kdir / "no-such-file")
    got = counted.records_that_count(tmp_path)
    assert sorted(e.rid for e in got.entries) == sorted([a["id"], b["id"]])
    assert [(r.path.name, r.index) for r in got.rejected] == [("x.json.gz", None)]


def test_no_results_folder_says_how_to_make_one(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError) as missing:
        counted.records_that_count(tmp_path / "none")
    assert str(missing.value) == (f"no results at {tmp_path / 'none'}: run `normbench bench --quick` (or `normbench "
                                  "train --quick`) first, or pass the results directory")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no results at results"):
        counted.records_that_count()


def test_the_default_folder_is_results_here(tmp_path, monkeypatch, current):
    _put(tmp_path / "results" / "kernel" / "k.json.gz", [_copy(current[0])])
    monkeypatch.chdir(tmp_path)
    assert [e.rid for e in counted.records_that_count().entries] == [current[0]["id"]]
    assert list(counted.load()["id"]) == [current[0]["id"]]


def test_an_entry_needs_a_record_or_a_source():
    with pytest.raises(ValueError) as bare:
        counted.Entry(None, Path("x.json"), 0)
    assert str(bare.value) == "an entry needs its record or where to read it (src)"
    e = counted.Entry({"id": "k1", "kind": "kernel"}, Path("d/x.json"), 3)
    assert repr(e) == "Entry('k1', 'd/x.json', 3)" and e.rid == "k1" and e.kind == "kernel" and e.digest == ""


# --- the read cache and the judging processes ----------------------------------------------------------------------

def test_a_read_through_the_cache_is_a_plain_read(tmp_path, current, monkeypatch):
    root = tmp_path / "results"
    _mixed(root, current)
    (root / "kernel" / "m" / "5.json.gz").symlink_to(root / "no-such-file")   # unreadable: never cached
    want = _seen(counted.records_that_count(root))
    first = ReadCache(tmp_path / "rc")
    assert _seen(counted.records_that_count(root, cache=first)) == want
    assert first.hits == 0 and ReadCache(tmp_path / "rc").hashes()   # the stale judgement's hashes are kept
    entries = {p.name for p in (tmp_path / "rc").iterdir()}
    assert len(entries) == 4 + 1   # a judged entry per record file, and the hashes
    unpickled: list[int] = []
    record = readcache.FileRecords.record

    def spy(self, pos):
        unpickled.append(pos)
        return record(self, pos)

    monkeypatch.setattr(readcache.FileRecords, "record", spy)
    again = ReadCache(tmp_path / "rc")
    got = counted.records_that_count(root, cache=again)
    assert again.hits == 4 and unpickled == []   # read from the cache, no record unpickled yet
    assert _seen(got) == want                      # read on use, with the flags of the plain read
    assert unpickled and {p.name for p in (tmp_path / "rc").iterdir()} == entries
    # nothing new judged: the kept hashes are not written again
    hashes = tmp_path / "rc" / again._name(("stale judgement hashes",))
    inode = hashes.stat().st_ino
    assert _seen(counted.records_that_count(root, cache=ReadCache(tmp_path / "rc"))) == want
    assert hashes.stat().st_ino == inode
    # by kind: kept and found under it
    kernel = ReadCache(tmp_path / "rc-kernel")
    want_kernel = _seen(counted.records_that_count(root, kind="kernel", cache=kernel))
    assert want_kernel == _seen(counted.records_that_count(root, kind="kernel"))
    warm = ReadCache(tmp_path / "rc-kernel")
    assert _seen(counted.records_that_count(root, kind="kernel", cache=warm)) == want_kernel and warm.hits == 4
    # damaged entries are judged again, never trusted (of the kind asked for)
    counted.records_that_count(root, kind="accuracy", cache=ReadCache(tmp_path / "rc"))
    for p in (tmp_path / "rc").iterdir():
        p.write_bytes(b"not a pickle")
    assert _seen(counted.records_that_count(root, cache=ReadCache(tmp_path / "rc"))) == want
    assert counted.records_that_count(root, kind="accuracy", cache=ReadCache(tmp_path / "rc")).entries == []
    # judge=False reads past the cache, in processes too: what it did not judge is never kept
    for jobs in (1, 2):
        assert _seen(counted.records_that_count(root, judge=False, cache=ReadCache(tmp_path / "rc2"), jobs=jobs)) \
            == _seen(counted.records_that_count(root, judge=False))
        assert not (tmp_path / "rc2").exists()


def test_a_rebuild_judges_by_the_hashes_the_cache_kept(tmp_path, current):
    """The stale judgement's hashes of today's code, kept by the cache, are what a later read judges changed files by
    (planted here: a kept hash that no code has, so a record of today's code reads stale against it)."""
    a, b, _ = current
    root = tmp_path / "results"
    _put(root / "kernel" / "1.json.gz", [_copy(a)])
    counted.records_that_count(root, cache=ReadCache(tmp_path / "rc"))
    cache = ReadCache(tmp_path / "rc")
    kept = cache.hashes()
    assert kept
    cache.keep_hashes({k: "f" * 16 for k in kept})
    _put(root / "kernel" / "2.json.gz", [_copy(b)])   # a new file: judged now, by the kept hashes
    got = {e.rid: e.rec for e in counted.records_that_count(root, cache=ReadCache(tmp_path / "rc")).entries}
    assert got[b["id"]]["flags"] == ["stale"] and "-> " + "f" * 16 in got[b["id"]]["flag_reasons"]["stale"]
    assert not got[a["id"]].get("flags")   # kept judged before the plant
    # a damaged entry is judged again, by the kept hashes too
    hashes = tmp_path / "rc" / cache._name(("stale judgement hashes",))
    for p in (tmp_path / "rc").iterdir():
        if p != hashes:
            p.write_bytes(b"not a pickle")
    got = {e.rid: e.rec for e in counted.records_that_count(root, cache=ReadCache(tmp_path / "rc")).entries}
    assert got[a["id"]]["flags"] == ["stale"] and "-> " + "f" * 16 in got[a["id"]]["flag_reasons"]["stale"]


@pytest.mark.parametrize("jobs,damaged", [(1, False), (2, False), (1, True)])
def test_what_is_judged_is_the_bytes_that_were_hashed(tmp_path, current, monkeypatch, jobs, damaged):
    """A file rewritten between the reader's read and its judgement (another writer): the records judged are those
    of the bytes read (and hashed for the cache), not of the file as it is afterwards; also where the read cache's
    entry for those bytes is damaged."""
    a, b, c = current
    root = tmp_path / "results"
    _put(root / "kernel" / "1.json.gz", [_copy(a)])
    _put(root / "kernel" / "2.json.gz", [_copy(b)])
    cache = None
    if damaged:
        counted.records_that_count(root, cache=ReadCache(tmp_path / "rc"))
        for p in (tmp_path / "rc").iterdir():
            p.write_bytes(b"not a pickle")
        cache = ReadCache(tmp_path / "rc")
    real = counted._read

    def read_then_rewritten(path):
        got = real(path)
        _put(path, [_copy(c)])
        return got

    monkeypatch.setattr(counted, "_read", read_then_rewritten)
    entries = counted.records_that_count(root, jobs=jobs, cache=cache).entries
    assert sorted(e.rid for e in entries) == sorted([a["id"], b["id"]])


def test_judging_in_processes_reads_what_one_process_reads(tmp_path, current, monkeypatch):
    if "vl_convert" in sys.modules:   # another test drew a chart in this process: judging stays in one process
        pytest.skip("vl_convert is loaded in this test process (its threads do not survive a fork)")
    root = tmp_path / "results"
    _mixed(root, current)
    want = _seen(counted.records_that_count(root))
    pools: list[int] = []
    real_pool = processes.Pool

    names: list[str] = []

    class Spy(real_pool):
        def __init__(self, fn, jobs, what="pool"):
            pools.append(jobs)
            names.append(what)
            super().__init__(fn, jobs, what)

    monkeypatch.setattr(processes, "Pool", Spy)
    assert _seen(counted.records_that_count(root, jobs=2)) == want and pools == [2]
    assert _seen(counted.records_that_count(root, jobs=8)) == want and pools == [2, 4]   # no more than files
    assert _seen(counted.records_that_count(root, jobs=1)) == want and pools == [2, 4]
    assert _seen(counted.records_that_count(root)) == want and pools == [2, 4]           # one job by default
    # one file to judge: no pool
    assert _seen(counted.records_that_count(root / "kernel" / "m" / "1.json.gz", jobs=2))[0] and pools == [2, 4]
    # through a cache: the workers write what they judged, this process keeps it and the stale hashes
    cache = ReadCache(tmp_path / "rc")
    puts: list = []
    real_put = ReadCache.put
    monkeypatch.setattr(ReadCache, "put", lambda self, *a: (puts.append(a[0]), real_put(self, *a))[1])
    assert _seen(counted.records_that_count(root, cache=cache, jobs=2)) == want and pools == [2, 4, 2]
    assert puts == []   # the workers kept what they judged (puts in this process would pickle it all again)
    assert len(list((tmp_path / "rc").iterdir())) == 4 + 1 and ReadCache(tmp_path / "rc").hashes()
    assert cache.prune() == 0   # every entry counted as used by this process
    again = ReadCache(tmp_path / "rc")
    assert _seen(counted.records_that_count(root, cache=again, jobs=2)) == want
    assert again.hits == 4 and pools == [2, 4, 2]   # nothing left to judge
    assert set(names) == {"judging pool"}   # what its messages call it
    # two files to judge: a pool of two
    assert _seen(counted.records_that_count(root / "kernel" / "m", kind="kernel", jobs=2))[0] and pools[-1] == 2
    assert len(pools) == 4
    # not with vl_convert loaded (its threads do not survive a fork): one process
    monkeypatch.setitem(sys.modules, "vl_convert", types.ModuleType("vl_convert"))
    assert _seen(counted.records_that_count(root, jobs=2)) == want and len(pools) == 4


def test_two_files_are_judged_by_two_processes(tmp_path, current, monkeypatch):
    if "vl_convert" in sys.modules:   # another test drew a chart in this process: judging stays in one process
        pytest.skip("vl_convert is loaded in this test process (its threads do not survive a fork)")
    pools: list[int] = []
    real_pool = processes.Pool

    class Spy(real_pool):
        def __init__(self, fn, jobs, what="pool"):
            pools.append(jobs)
            super().__init__(fn, jobs, what)

    monkeypatch.setattr(processes, "Pool", Spy)
    _put(tmp_path / "kernel" / "1.json.gz", [_copy(current[0])])
    _put(tmp_path / "kernel" / "2.json.gz", [_copy(current[1])])
    assert len(counted.records_that_count(tmp_path, jobs=2).entries) == 2 and pools == [2]
    assert counted.records_that_count(tmp_path, kind="accuracy", jobs=2).entries == [] and pools == [2, 2]
    # judged in processes through a cache, by kind: kept under it
    cold = ReadCache(tmp_path / "rc")
    counted.records_that_count(tmp_path, kind="kernel", cache=cold, jobs=2)
    assert cold.prune() == 0   # every entry the workers wrote counted as used here
    warm = ReadCache(tmp_path / "rc")
    assert len(counted.records_that_count(tmp_path, kind="kernel", cache=warm, jobs=2).entries) == 2
    assert warm.hits == 2 and pools == [2, 2, 2]


def test_the_reader_marks_its_phases(tmp_path, current, monkeypatch):
    _put(tmp_path / "kernel" / "k.json.gz", [_copy(current[0])])
    seen: list[str] = []
    monkeypatch.setattr(processes, "phase", lambda name, until=None: seen.append(name))
    counted.records_that_count(tmp_path)
    assert seen == ["read", "judge"]


# --- the pandas loader ---------------------------------------------------------------------------------------------

def test_the_loader_warns_raises_or_ignores_invalid_records(tmp_path, current):
    written = _mixed(tmp_path, current)
    with pytest.raises(ValueError, match="errors must be 'warn', 'raise' or 'ignore', not 'loud'"):
        counted.load(tmp_path, errors="loud")
    with pytest.raises(InvalidRecordError) as raised:
        counted.load(tmp_path, errors="raise")
    assert len(raised.value.problems) == 1 and "3.json" in str(raised.value.problems[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = counted.load(tmp_path)
    texts = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    problems = counted.records_that_count(tmp_path).problems()
    assert texts == [f"skipping invalid result: {p}" for p in problems] and len(problems) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(counted.load(tmp_path, errors="ignore")) == len(df) == len(current)
    assert not [w for w in caught if "skipping" in str(w.message)]
    flags = df.set_index("id")["flags"]
    assert flags[written["stale"]["id"]] == ("stale",) and flags[written["legacy"]["id"]] == ("legacy",)
    assert len(counted.load(tmp_path, kind="accuracy", errors="ignore")) == 0
    stored = counted.load(tmp_path, errors="ignore", as_stored=True)
    assert len(stored) == 5 and all(f == () for f in stored["flags"])
    assert len(counted.load(tmp_path, kind="accuracy", errors="ignore", as_stored=True)) == 0
    with pytest.raises(InvalidRecordError):
        counted.load(tmp_path, errors="raise", as_stored=True)


@pytest.mark.skipif(hasattr(counted, "x_load__mutmut_orig"),
                    reason="under mutmut the function is called through its trampoline: two more frames")
def test_the_loaders_warnings_point_at_its_caller(tmp_path, current):
    _mixed(tmp_path, current)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counted.load(tmp_path)
    assert [w.filename for w in caught if "skipping invalid result" in str(w.message)] == [__file__] * 2
