"""The house: import contracts (import-linter) that a planted cycle breaks, one reader of the records that count that
every ranking agrees with, module sizes, and the README's two commands in either order."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_site_support as sup

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / ".importlinter")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    r = _lint(REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BROKEN" not in r.stdout and r.stdout.count("KEPT") == 3, r.stdout


@pytest.mark.parametrize("module, line, broken", [
    # the storage layer reaching up to the command line: a layer violation and a cycle
    ("records/schema.py", "from normbench import cli  # planted\n", ("Layers", "No import cycle")),
    # a cycle inside one package (what tasks/__init__ <-> tasks.synthetic was)
    ("tasks/base.py", "def _planted():\n    from normbench.tasks import synthetic  # noqa\n", ("No import cycle",)),
    # a reader reaching back into the measuring code, even inside a function
    ("site/fmt.py", "def _planted():\n    from normbench.measure import timers  # noqa\n", ("Readers never",)),
])
def test_a_planted_import_breaks_the_contracts(tmp_path, module, line, broken):
    shutil.copytree(REPO / "normbench", tmp_path / "normbench",
                    ignore=shutil.ignore_patterns("__pycache__", "assets", "templates"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    assert _lint(tmp_path).returncode == 0  # the copy holds before the plant
    with open(tmp_path / "normbench" / module, "a", encoding="utf-8") as f:
        f.write("\n" + line)
    r = _lint(tmp_path)
    assert r.returncode != 0, r.stdout
    out = r.stdout.replace("\n", " ")
    for name in broken:
        assert f"{name}" in out and "BROKEN" in out, out


#: No module of normbench/ is longer than this: a longer one is a room with several jobs, to split by responsibility.
MODULE_LIMIT = 650
#: The site's pages are one ``Site`` object made of a core and one module per kind of page (``site/pages/``).
PAGES_LIMIT = 400


def _lines() -> dict[str, int]:
    return {str(p.relative_to(REPO)): sum(1 for _ in p.open(encoding="utf-8"))
            for p in (REPO / "normbench").rglob("*.py")}


def test_no_module_holds_several_jobs():
    lines = _lines()
    over = {p: n for p, n in lines.items() if n > MODULE_LIMIT}
    assert not over, f"modules over {MODULE_LIMIT} lines: {over}; split them by responsibility (docs/architecture.md)"
    pages = {p: n for p, n in lines.items() if p.startswith("normbench/site/pages/")}
    assert {"normbench/site/pages/__init__.py", "normbench/site/pages/core.py"} <= set(pages), sorted(pages)
    big = {p: n for p, n in pages.items() if n > PAGES_LIMIT}
    assert not big, f"page modules over {PAGES_LIMIT} lines: {big}; one module per kind of page"


# --- one reader of the records that count ---------------------------------------------------------------------------

def _copies(rec: dict, stamps_and_times) -> list[dict]:
    """Copies of one record (same id) with other timestamps and times, as a re-run or a merge leaves them."""
    out = []
    for stamp, t in stamps_and_times:
        c = sup.kernel(rec["norm"]["name"], rec["config"]["backend"], rec["config"]["shape"], t)
        c["id"] = rec["id"]
        c["provenance"] = {**c["provenance"], "timestamp": stamp}
        out.append(c)
    return out


def test_every_ranking_reader_stands_on_the_same_records(tmp_path):
    """Duplicated ids, newer and tied copies across files: the site, the claims, the generated docs and the
    DataFrame keep the same copy of each (newest; a tie goes to the copy read last)."""
    from normbench import claims, results
    from normbench.site.records import load_results

    a = sup.kernel("layernorm", "eager", [64, 512], 2e-5)
    b = sup.kernel("rmsnorm", "eager", [64, 512], 3e-5)
    older, newer = _copies(a, [("2026-01-01T00:00:00Z", 9e-5), ("2026-02-01T00:00:00Z", 3e-5)])
    tie1, tie2 = _copies(b, [("2026-03-01T00:00:00Z", 7e-5), ("2026-03-01T00:00:00Z", 4e-5)])
    root = tmp_path / "results"
    root.mkdir()
    import json

    # files are read in sorted path order: "a-*.json" before "b-*.json"
    (root / "a-first.json").write_text(json.dumps([newer, tie1]))
    (root / "b-second.json").write_text(json.dumps([older, tie2]))
    want = {a["id"]: 3e-5, b["id"]: 4e-5}

    counted = results.records_that_count(root)
    assert not counted.rejected
    assert {r["id"]: r["metrics"]["time_median_s"] for r in counted.records} == want
    assert len(counted.superseded) == 2
    site = load_results(root)
    assert {e.rid: e.rec["metrics"]["time_median_s"] for e in site.entries} == want
    assert {(old.rid, old.rec["metrics"]["time_median_s"]) for old, _ in site.superseded} == {
        (a["id"], 9e-5), (b["id"], 7e-5)}
    assert {r["id"]: r["metrics"]["time_median_s"] for r in claims.load_records(root)} == want
    df = results.load(root, kind="kernel")
    assert dict(zip(df["id"], df["time_median_s"])) == want
    # claims.evaluate and the generated docs take plain lists: the same rule over them in read order
    raw = [newer, tie1, older, tie2]
    assert {r["id"]: r["metrics"]["time_median_s"] for r in results.one_per_id(raw)} == want
    # records as stored: every copy (validate, compare, prune and migrate see them all)
    assert len(results.load(root, kind="kernel", as_stored=True)) == 4


def test_the_reader_flags_legacy_and_stale_records_and_changes_no_file(tmp_path):
    from normbench import results

    legacy = sup.kernel("layernorm", "eager", [64, 512], 2e-5)
    legacy["check"] = None
    stale = sup.kernel("rmsnorm", "eager", [64, 512], 2e-5)
    stale["impl_hash"] = "f" * 16
    fresh = sup.kernel("dyt", "eager", [64, 512], 2e-5)
    results.write_records([legacy, stale, fresh], tmp_path)
    before = {p: p.read_bytes() for p in results.record_files(tmp_path)}
    flags = {r["norm"]["name"]: r["flags"] for r in results.records_that_count(tmp_path).records}
    assert flags["layernorm"] == ["legacy"] and "stale" in flags["rmsnorm"]
    assert {p: p.read_bytes() for p in results.record_files(tmp_path)} == before


# --- the README's two commands in either order ----------------------------------------------------------------------

@pytest.mark.slow
def test_the_main_jobs_records_never_turn_the_suite_red(tmp_path):
    """`bash scripts/main.sh` then `bash scripts/test.sh`: the main job writes its quick kernel and training records
    into results/; the test that holds docs/ to the records must still pass, because it reads the committed ones."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--local", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone), "NORMBENCH_EXECUTOR": "inprocess"}
    nb = [sys.executable, "-m", "normbench.cli"]
    before = sum(1 for _ in (clone / "results").rglob("*.json*"))
    from normbench import results

    n0 = len(list(results.iter_records(clone / "results")))
    # the main job's record-writing steps (scripts/main.sh), narrowed to one kernel group and the quick training run
    for args in (["bench", "--quick", "--norm", "layernorm", "--backend", "eager", "--dtype", "float32", "--pass",
                  "fwd", "--threads", "1", "--out", "results", "--no-progress"],
                 ["train", "--norm", "layernorm", "--quick", "--out", "results"]):
        r = subprocess.run(nb + args, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
    assert len(list(results.iter_records(clone / "results"))) > n0, "the steps wrote no record: nothing was tested"
    assert sum(1 for _ in (clone / "results").rglob("*.json*")) >= before
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        "tests/test_claims.py::test_docs_blocks_match_the_committed_records",
                        "tests/test_softmax.py::test_docs_softmax_block_is_generated_from_the_committed_records"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
