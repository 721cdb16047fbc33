"""ASV as its users run it: ``asv run`` saves results for the checked-out commit, ``asv continuous`` catches a
slowed norm. A temporary git repository holds this tree twice: as is, and with RMSNorm's forward planted with a
100 ms sleep (a gross slow-down: about 9 times the norm's own cost of 11 ms measured at load 5 on this 2-core
machine, so this is not a timing test in disguise; the check gate's gradcheck and ASV's samples each pay it, so it is
not longer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import REPO

import normbench

pytest.importorskip("asv")
pytest.importorskip("virtualenv")

PLANT_FROM = "        xf = upcast(x)\n        ms = xf.pow(2).mean(self.dim, keepdim=True)\n"
PLANT_TO = "        __import__('time').sleep(0.1)  # planted slow-down\n" + PLANT_FROM


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=ci@normbench", "-c", "user.name=ci", *args],
                   check=True, capture_output=True, text=True)


def _copy_tree(dst: Path) -> None:
    """The files git would commit here (tracked and new, ignored ones left out), without the recorded results."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                         capture_output=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = Path(REPO) / rel
        if rel.startswith("results/") or not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_asv_run_saves_results_and_continuous_reports_a_slowed_norm(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_tree(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    features = repo / "normbench" / "norms" / "features.py"
    text = features.read_text()
    rms = text.index("class RMSNorm")
    assert PLANT_FROM in text[rms:], "RMSNorm.forward changed: update the planted slow-down"
    features.write_text(text[:rms] + text[rms:].replace(PLANT_FROM, PLANT_TO, 1))
    _git(repo, "commit", "-qam", "slow rmsnorm")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    _git(repo, "checkout", "-q", "HEAD~1")
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NORMBENCH_", "ASV"))}
    env.update(
        HOME=str(tmp_path / "home"),  # asv machine --yes writes ~/.asv-machine.json: a new machine, here
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        # reuse this venv's torch instead of installing it into ASV's environment (minutes)
        NORMBENCH_ASV_SITE_PACKAGES=sysconfig.get_paths()["purelib"],
        NORMBENCH_ASV_NORMS="rmsnorm", NORMBENCH_DISABLE_PLUGINS="1", OMP_NUM_THREADS="1",
    )
    (tmp_path / "home").mkdir()
    asv = [sys.executable, "-m", "asv"]

    def run(*args, timeout=600):
        return subprocess.run(asv + list(args), cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)

    r = run("machine", "--yes", "--machine", "ci")
    assert r.returncode == 0, r.stdout + r.stderr

    # A plain `asv run`: the checked-out commit, benchmarked in a virtualenv, results saved where asv keeps them.
    r = run("run", "-b", "time_kernel")
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

    # `asv continuous BASE HEAD`: both commits, compared; the slowed norm is listed and the exit status is 1.
    r = run("continuous", base, head, "-b", "time_kernel")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "PERFORMANCE DECREASED" in out
    [line] = [ln for ln in out.splitlines() if "time_kernel('rmsnorm'" in ln and ln.lstrip("| ").startswith("+")]
    assert float(line.split("|")[4]) > 1.1, line  # asv's own factor; the planted change is far larger
