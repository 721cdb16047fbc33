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
import shutil

import pytest
from asv_repo import asv_runner, planted_repo

pytest.importorskip("asv")
pytest.importorskip("virtualenv")

PLANT_FROM = "        y = (xf * torch.rsqrt(ms + self.eps)).to(x.dtype)\n        return self._affine(y)\n"
PLANT_TO = ("        y = (xf * torch.rsqrt(ms + self.eps) * 1e-3).to(x.dtype)  # planted damage\n"
            "        return self._affine(y)\n")
BENCH = "track_perplexity('rmsnorm', 'synth-lm')"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_asv_continuous_reports_a_norm_that_trains_worse(tmp_path):
    repo, base, head = planted_repo(tmp_path, PLANT_FROM, PLANT_TO, "damage rmsnorm's output")
    run = asv_runner(repo, tmp_path, 900, NORMBENCH_ASV_NORMS="rmsnorm", NORMBENCH_ASV_TASKS="synth-lm",
                     NORMBENCH_CACHE_DIR=str(tmp_path / "cache"))

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
