"""A forked pool worker killed while it writes a cache entry (``results.readcache.PickleDir.put``) leaves no
temporary file behind: the worker cannot clean up (SIGTERM's default action, SIGKILL), so ``site build``, which ran
the pools, sweeps what dead writers left once their workers are joined. Seen in CI: an interrupted ``site build`` left
``cache/machines/.tmp-*`` (tests/test_interrupt.py's ``no_partial``), one run in several."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import test_site_support as sup

from normbench.results.readcache import PickleDir, sweep_orphans

# Run in a fresh interpreter: the pools fork only where vl_convert is not loaded (another test may have loaded it).
# A worker that writes into a PickleDir directory named ``DIR`` is killed mid-write: its value pickles an object
# whose pickling SIGKILLs the worker, after ``put`` opened its temporary file.
KILLED_MID_PUT = textwrap.dedent("""
    import json, os, signal, sys
    from pathlib import Path
    from normbench.results import readcache

    DIR, root = sys.argv[1], Path(sys.argv[2])
    parent = os.getpid()

    class Die:
        def __reduce__(self):
            os.kill(os.getpid(), signal.SIGKILL)

    put = readcache.PickleDir.put

    def dying_put(self, key, value):
        if os.getpid() != parent and self.dir.name == DIR:
            value = (value, Die())
        put(self, key, value)

    readcache.PickleDir.put = dying_put
    try:
        from normbench.site import build_site, pages
        pages.MANY_MACHINES = 1   # as a public leaderboard: a machine's aggregates kept (``per_machine``)
        build_site(root / "results", root / "site", charts=False, jobs=2, cache=root / "cache", docs=root / "docs")
        error = None
    except Exception as exc:
        error = type(exc).__name__
    assert "vl_convert" not in sys.modules
    print(json.dumps({"error": error, "left": sorted(str(p.relative_to(root)) for p in root.rglob(".tmp-*"))}))
""")


def _run(root, directory: str) -> dict:
    out = subprocess.run([sys.executable, "-c", KILLED_MID_PUT, directory, str(root)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_judging_worker_killed_mid_write_leaves_no_temporary_file(tmp_path):
    sup.write_demo(tmp_path / "results")
    (tmp_path / "docs").mkdir()
    got = _run(tmp_path, "records")   # the site build's reading of the records (``records_that_count``)
    assert got == {"error": "WorkerDied", "left": []}


def test_a_page_worker_killed_mid_write_leaves_no_temporary_file(tmp_path):
    sup.machines_site(tmp_path, cache=False)   # records on several machines: the page workers keep their aggregates
    (tmp_path / "docs").mkdir()
    # the records judged first (their cache warm), so the worker that dies is a page worker writing ``machines/``
    assert _run(tmp_path, "no such directory") == {"error": None, "left": []}
    for p in (tmp_path / "cache").iterdir():
        if p.name != "records":
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    got = _run(tmp_path, "machines")
    assert got == {"error": "WorkerDied", "left": []}


def test_sweep_removes_only_what_dead_writers_left(tmp_path):
    store = PickleDir(tmp_path / "store", "test")
    store.put("k", 1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (dead, os.getpid(), live.pid):
            (store.dir / f".tmp-{pid}-0a1b2c3d").write_bytes(b"half a pickle")
        (store.dir / ".tmp-x-0a1b2c3d").write_bytes(b"not a writer's name")
        assert sweep_orphans() == 1
        assert sorted(p.name for p in store.dir.glob(".tmp-*")) == sorted(
            [f".tmp-{os.getpid()}-0a1b2c3d", f".tmp-{live.pid}-0a1b2c3d", ".tmp-x-0a1b2c3d"])
        # a store opened on a directory removes what a dead writer left there in an earlier run
        (store.dir / f".tmp-{dead}-0a1b2c3d").write_bytes(b"half a pickle")
        assert PickleDir(store.dir, "test").get("k") == 1
        assert not (store.dir / f".tmp-{dead}-0a1b2c3d").exists()
    finally:
        live.kill()
        live.wait()
