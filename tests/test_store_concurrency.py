"""Concurrent writers: several processes merging records into one norm's file lose none of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from normbench import results
from normbench.records import store

TESTS = os.path.dirname(os.path.abspath(__file__))

# Each writer waits for the go file, then merges its records one at a time (one read-merge-replace per record), so
# the writers' read-modify-write cycles interleave as tightly as they can.
WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from test_results import kernel_record
    from normbench.results import write_records

    root, go, worker, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        rec = kernel_record()
        rec["config"]["shape_label"] = f"w{{worker}}-r{{i}}"   # a distinct case, hence a distinct id
        del rec["id"]
        write_records([rec], root)
    # and one record every writer writes: the same id, merged rather than duplicated
    write_records([kernel_record()], root)
""")


@pytest.mark.skipif(store.fcntl is None, reason="no fcntl (flock) on this platform")
def test_concurrent_processes_writing_one_norm_file_lose_no_record(tmp_path):
    writers, per_writer = 4, 20
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=TESTS))
    root, go = tmp_path / "results", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(TESTS), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(script), str(root), str(go), str(w), str(per_writer)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(writers)]
    time.sleep(1.0)  # let every writer import and reach its wait
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err

    files = store.record_files(root)
    assert len(files) == 1, files  # one norm, one hardware: every writer merged into the same file
    data, problem = store.read_record_file(files[0])
    assert problem is None, problem
    labels = [r["config"].get("shape_label") for r in data]
    ids = [r["id"] for r in data]
    assert len(ids) == len(set(ids)), "a record id appears twice"
    wanted = {f"w{w}-r{i}" for w in range(writers) for i in range(per_writer)}
    assert wanted <= set(labels), f"lost {len(wanted - set(labels))} record(s)"
    assert len(data) == writers * per_writer + 1  # plus the one record every writer wrote
    # No temporary file left behind, and the file reads back as valid records.
    assert not [p for p in files[0].parent.iterdir() if p.name.startswith(".")]
    assert results.load_report(root) == []
