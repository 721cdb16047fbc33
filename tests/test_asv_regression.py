"""ASV as its users run it: ``asv run`` saves results for the checked-out commit, ``asv continuous`` catches a
slowed norm. A temporary git repository holds this tree twice: as is, and with RMSNorm's forward computing its
statistics forty times (real CPU work, as the drift-normalised ``time_in_refs`` counts CPU time on a CPU: a planted
sleep would be invisible to it). A gross slow-down, not a timing test in disguise: five times the statistics read as
only 1.18x of the whole forward at this small case (24.5 -> 28.8 copies, +-8) in a CI run beside the other tests and
was not significant; ``scripts/asv_false_alarms.py`` measures how often ASV misses a 5x forward (docs/measurement.md,
"ASV")."""

from __future__ import annotations

import itertools
import json
import math
import shutil

import pytest
from asv_repo import asv_runner, git, planted_repo

import normbench

pytest.importorskip("asv")
pytest.importorskip("virtualenv")

PLANT_FROM = "        xf = upcast(x)\n        ms = xf.pow(2).mean(self.dim, keepdim=True)\n"
PLANT_TO = ("        for _ in range(40):  # planted slow-down: the statistics computed forty times\n"
            "            xf = upcast(x)\n            ms = xf.pow(2).mean(self.dim, keepdim=True)\n")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_asv_run_saves_results_and_continuous_reports_a_slowed_norm(tmp_path):
    repo, base, head = planted_repo(tmp_path, PLANT_FROM, PLANT_TO, "slow rmsnorm")
    git(repo, "checkout", "-q", "HEAD~1")
    run = asv_runner(repo, tmp_path, 600, NORMBENCH_ASV_NORMS="rmsnorm")

    # A plain `asv run`: the checked-out commit, benchmarked in a virtualenv, results saved where asv keeps them.
    r = run("run", "-b", r"time_kernel\(.*'fwd'\)", "-a", "rounds=1")  # one process: saving is what is checked
    assert r.returncode == 0, r.stdout + r.stderr
    saved = list((repo / ".asv" / "results" / "ci").glob(f"{base[:8]}-virtualenv-*.json"))
    assert len(saved) == 1, (r.stdout, sorted(p.name for p in (repo / ".asv" / "results" / "ci").iterdir()))
    data = json.loads(saved[0].read_text())
    assert data["commit_hash"] == base
    result = data["results"]["kernels.Kernel.time_kernel"]
    assert result[0][0] is not None and result[0][0] > 0  # a time, not a failure
    # the suite recorded the implementation hash of the code ASV ran, for `normbench ingest-asv`
    impl = json.loads((repo / ".asv" / "normbench" / "impl" / f"{base}-{data['env_name']}.json").read_text())
    assert impl["hashes"]["rmsnorm|eager"] == normbench.get_norm("rmsnorm").impl_hash("eager")  # same code as here

    # `normbench ingest-asv` reads the result file ASV just wrote (and the suite's side records): one kernel record
    # per parameter set with a time, ASV's own number in metrics.asv, read back through the store's reader
    _ingest_and_check(repo, tmp_path / "ingested", data)

    # `asv continuous BASE HEAD` as the README runs it (commits alternated over two rounds, the drift-normalised
    # timing; its forward case alone, for time): the slowed norm is listed and the exit status is 1.
    r = run("continuous", "--interleave-rounds", base, head, "-b", r"time_in_refs\(.*'fwd'\)")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "PERFORMANCE DECREASED" in out
    [line] = [ln for ln in out.splitlines() if "time_in_refs('rmsnorm'" in ln and ln.lstrip("| ").startswith("+")]
    assert float(line.split("|")[4]) > 1.1, line  # asv's own factor; the planted change is far larger
    # ASV ran time_in_refs as a time benchmark in two rounds: statistics over both processes' samples
    [saved] = (repo / ".asv" / "results" / "ci").glob(f"{head[:8]}-*.json")
    data = json.loads(saved.read_text())
    row = dict(zip(data["result_columns"], data["results"]["kernels.Relative.time_in_refs"]))
    assert row["stats_repeat"][0] >= 2 * 10, row  # repeat = (10, ...) per process, two processes


def _ingest_and_check(repo, out, data) -> None:
    from normbench import cli
    from normbench.measure import suite
    from normbench.records import iter_records

    row = dict(zip(data["result_columns"], data["results"]["kernels.Kernel.time_kernel"]))
    times = {tuple(p.strip("'\"") for p in combo): v
             for combo, v in zip(itertools.product(*row["params"]), row["result"])
             if v is not None and math.isfinite(v)}  # NaN: a parameter set `-b` left out
    assert times
    assert cli.main(["ingest-asv", str(repo / ".asv" / "results"), "--out", str(out)]) == 0
    recs = [r for _, r in iter_records(out, kind="kernel", errors="raise")]
    assert len(recs) == len(times)
    h = normbench.get_norm("rmsnorm").impl_hash("eager")
    for rec in recs:
        c = rec["config"]
        key = (rec["norm"]["name"], c["backend"], c["shape_label"], c["dtype"], c["pass"])
        assert c["harness"] == "asv" and c["device"] == "cpu" and key[0] == "rmsnorm" and key[4] == "fwd"
        assert rec["metrics"]["asv"]["time_median_s"] == times[key], key  # ASV's number, as ASV saved it
        assert rec["metrics"]["asv"]["commit"] == data["commit_hash"]
        if c["backend"] == "eager":
            assert rec["impl_hash"] == h  # the code ASV ran is this tree's
    assert {suite.combo_key(*k) for k in times} == {suite.combo_key(r["norm"]["name"], r["config"]["backend"],
                                                                    r["config"]["shape_label"], r["config"]["dtype"],
                                                                    r["config"]["pass"]) for r in recs}
