"""What the ASV regression tests share: a temporary git repository of this tree with one planted change to a norm,
and ASV run in it as a user runs it (its own HOME and machine, this venv's torch reused)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=ci@normbench", "-c", "user.name=ci", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def copy_tree(dst: Path) -> None:
    """The files git would commit here (tracked and new, ignored ones left out), without the recorded results."""
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                         capture_output=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = Path(REPO) / rel
        if rel.startswith("results/") or not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def planted_repo(tmp_path: Path, plant_from: str, plant_to: str, message: str) -> tuple[Path, str, str]:
    """(repo, base commit, planted commit): this tree committed, then RMSNorm's forward changed from ``plant_from``
    to ``plant_to`` (which must be found inside ``class RMSNorm``) in a second commit, which stays checked out."""
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_tree(repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    features = repo / "normbench" / "norms" / "features.py"
    text = features.read_text()
    rms = text.index("class RMSNorm")
    end = text.index("\nclass ", rms + 1)
    assert plant_from in text[rms:end], "RMSNorm.forward changed: update the planted change"
    features.write_text(text[:rms] + text[rms:end].replace(plant_from, plant_to, 1) + text[end:])
    git(repo, "commit", "-qam", message)
    return repo, base, git(repo, "rev-parse", "HEAD")


def asv_runner(repo: Path, tmp_path: Path, timeout: float, **env_vars):
    """``run(*args)``: ``python -m asv ARGS`` in ``repo`` with its own HOME (``asv machine --yes`` writes there), no
    NORMBENCH_/ASV variables of this process, this venv's torch reused (``NORMBENCH_ASV_SITE_PACKAGES``), plugins off,
    one thread, and ``env_vars``; the machine "ci" is registered first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NORMBENCH_", "ASV"))}
    env.update(HOME=str(tmp_path / "home"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               NORMBENCH_ASV_SITE_PACKAGES=sysconfig.get_paths()["purelib"], NORMBENCH_DISABLE_PLUGINS="1",
               OMP_NUM_THREADS="1", **env_vars)
    (tmp_path / "home").mkdir(exist_ok=True)

    def run(*args, timeout=timeout):
        return subprocess.run([sys.executable, "-m", "asv", *args], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=timeout)

    r = run("machine", "--yes", "--machine", "ci")
    assert r.returncode == 0, r.stdout + r.stderr
    return run
