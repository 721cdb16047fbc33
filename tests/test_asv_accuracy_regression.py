"""``asv continuous`` catches a commit that leaves a norm as fast as before but breaks how models train with it.

A temporary git repository holds this tree twice: as is, and with RMSNorm's output silently scaled down a
thousandfold (one multiplication more: its speed is unchanged; ``normbench check`` still passes it, since its output
stays finite, of the right shape and dtype, and gradients still reach every parameter). ASV trains the GPT on
synth-lm with each commit's RMSNorm (quick budget, seed 0: deterministic) and must list
``track_perplexity('rmsnorm', 'synth-lm')`` as worse. Not a timing test: perplexity is exact on the CPU, and the
planted damage takes it from about 5 to near the vocabulary size (64).
"""

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

pytest.importorskip("asv")
pytest.importorskip("virtualenv")

PLANT_FROM = "        y = (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)\n        return self._affine(y)\n"
PLANT_TO = ("        y = (xf * torch.rsqrt(ms + self.eps) * 1e-3).to(x.dtype)  # planted damage\n"
            "        return self._affine(y)\n")
BENCH = "track_perplexity('rmsnorm', 'synth-lm')"


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=ci@normbench", "-c", "user.name=ci", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


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


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_asv_continuous_reports_a_norm_that_trains_worse(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_tree(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    features = repo / "normbench" / "norms" / "features.py"
    text = features.read_text()
    rms = text.index("class RMSNorm")
    end = text.index("\nclass ", rms + 1)
    assert PLANT_FROM in text[rms:end], "RMSNorm.forward changed: update the planted damage"
    features.write_text(text[:rms] + text[rms:end].replace(PLANT_FROM, PLANT_TO, 1) + text[end:])
    _git(repo, "commit", "-qam", "damage rmsnorm's output")
    head = _git(repo, "rev-parse", "HEAD")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NORMBENCH_", "ASV"))}
    env.update(
        HOME=str(tmp_path / "home"),  # asv machine --yes writes ~/.asv-machine.json: a new machine, here
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        # reuse this venv's torch instead of installing it into ASV's environment (minutes)
        NORMBENCH_ASV_SITE_PACKAGES=sysconfig.get_paths()["purelib"],
        NORMBENCH_ASV_NORMS="rmsnorm", NORMBENCH_ASV_TASKS="synth-lm", NORMBENCH_DISABLE_PLUGINS="1",
        NORMBENCH_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="1",
    )
    (tmp_path / "home").mkdir()
    asv = [sys.executable, "-m", "asv"]

    def run(*args, timeout=900):
        return subprocess.run(asv + list(args), cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)

    r = run("machine", "--yes", "--machine", "ci")
    assert r.returncode == 0, r.stdout + r.stderr

    # Both commits trained, compared: the damaged norm's perplexity is listed as worse and the exit status is 1.
    r = run("continuous", base, head, "-b", "track_perplexity")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "PERFORMANCE DECREASED" in out
    [line] = [ln for ln in out.splitlines() if BENCH in ln and ln.lstrip("| ").startswith("+")]
    print(line)  # shown with -s: the two perplexities and their ratio
    before, after, ratio = (float(line.split("|")[i]) for i in (2, 3, 4))
    assert after > 2 * before and ratio > 2, line

    # the records each run trained are where `normbench ingest-asv` finds them, one per commit
    results = repo / ".asv" / "results" / "ci"
    for commit in (base, head):
        [saved] = results.glob(f"{commit[:8]}-*.json")
        env_name = json.loads(saved.read_text())["env_name"]
        index = json.loads((repo / ".asv" / "normbench" / "accuracy" / f"{commit}-{env_name}" / "index.json")
                           .read_text())
        assert list(index["cells"]) == ["rmsnorm|synth-lm"]
