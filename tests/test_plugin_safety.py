"""Hostile and careless plugins, installed as real distributions in a temporary path: they cannot break normbench.

Name clashes, a forward that never returns, a forward that kills its process, prints at import and in forward, NaN
outputs and a slow import. Time limits are seconds here so the tests stay short; none of them asserts a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_plugins import _SPEC_HEAD, _fake_dist

import normbench

_GOOD = """
class Good(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
"""

SLOW_IMPORT_S = 1.5   # the slow plugin sleeps this long at import; the threshold below is a third of it
# Seconds per check and per kernel group (a worker's start-up is not counted): above what the honest norms need even on
# an overloaded 2-core machine (load 18 measured while writing these), far below the defaults of 120 and 300.
CHECK_LIMIT = "15"
BENCH_LIMIT = "20"
STALL_LIMIT = "15"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    # Claims the built-in name "layernorm" (and imitates normbench's entry-point text), plus one honest norm.
    _fake_dist(root, "nb_clash", {"layernorm": "nb_clash_mod:IMPOSTOR", "clash_ok": "nb_clash_mod:OK",
                                  "rmsnorm": "normbench.norms.specs:RMSNORM"},
               {"nb_clash_mod": _SPEC_HEAD + _GOOD + """
IMPOSTOR = spec("layernorm", Good)
OK = spec("clash_ok", Good)
"""})
    # Two plugins claiming one name: neither may own it.
    for twin in ("nb_twin_a", "nb_twin_b"):
        _fake_dist(root, twin, {"shared_name": f"{twin}_mod:SPEC"},
                   {f"{twin}_mod": _SPEC_HEAD + _GOOD + "SPEC = spec('shared_name', Good)\n"})
    _fake_dist(root, "nb_hang", {"hang_norm": "nb_hang_mod:SPEC"}, {"nb_hang_mod": _SPEC_HEAD + """
import time
class Hang(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        while True:
            time.sleep(3600)
SPEC = spec("hang_norm", Hang)
"""})
    _fake_dist(root, "nb_crash", {"crash_norm": "nb_crash_mod:SPEC"}, {"nb_crash_mod": _SPEC_HEAD + """
import os
class Crash(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        os._exit(3)
SPEC = spec("crash_norm", Crash)
"""})
    _fake_dist(root, "nb_noisy", {"noisy_norm": "nb_noisy_mod:SPEC"}, {"nb_noisy_mod": _SPEC_HEAD + _GOOD + """
import os
print("NOISY: printed at import")
os.write(1, b"NOISY: written to file descriptor 1 at import\\n")
class Noisy(Good):
    def forward(self, x):
        print("NOISY: printed in forward")
        return super().forward(x)
SPEC = spec("noisy_norm", Noisy)
"""})
    _fake_dist(root, "nb_nan2", {"nan_out": "nb_nan2_mod:SPEC"}, {"nb_nan2_mod": _SPEC_HEAD + """
class NaNOut(nn.Module):
    def __init__(self, c):
        super().__init__(); self.w = nn.Parameter(torch.ones(c))
    def forward(self, x):
        return x * self.w * float("nan")
SPEC = spec("nan_out", NaNOut)
"""})
    _fake_dist(root, "nb_fine", {"fine_norm": "nb_fine_mod:SPEC"},
               {"nb_fine_mod": _SPEC_HEAD + _GOOD + "SPEC = spec('fine_norm', Good)\n"})
    return root


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> Path:
    """A plugin that sleeps at import, on its own path: only the test of the slow-import report pays its sleep (every
    process that discovers plugins would, workers included)."""
    root = tmp_path_factory.mktemp("slow")
    _fake_dist(root, "nb_slow", {"slow_norm": "nb_slow_mod:SPEC"}, {"nb_slow_mod": _SPEC_HEAD + _GOOD + f"""
import time
time.sleep({SLOW_IMPORT_S})
SPEC = spec("slow_norm", Good)
"""})
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nbcache")


def _cli(args, hostile, cache_dir, env_extra=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMBENCH_")}
    paths = hostile if isinstance(hostile, (list, tuple)) else [hostile]
    env.update({"PYTHONPATH": os.pathsep.join(map(str, paths)), "NORMBENCH_CACHE_DIR": str(cache_dir),
                "NORMBENCH_SLOW_IMPORT_S": str(SLOW_IMPORT_S / 3), "OMP_NUM_THREADS": "1"})
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "normbench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_list_json_stays_clean_builtins_win_and_slow_import_is_reported(hostile, slow, cache_dir):
    res = _cli(["list", "--json"], [hostile, slow], cache_dir)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)  # the noisy plugin's prints (Python and file descriptor) went elsewhere
    assert "NOISY" not in res.stdout and "NOISY: printed at import" in res.stderr
    norms = {n["name"]: n for n in data["norms"]}

    # the built-in stays, with normbench's version; the impostor is rejected, naming its distribution
    assert norms["layernorm"]["package"] == "normbench" and norms["layernorm"]["title"] == "LayerNorm"
    assert norms["layernorm"]["package_version"] == normbench.__version__
    errors = {(e["name"], e["package"]): e["error"] for e in data["errors"]}
    clash = errors[("layernorm", "nb_clash")]
    assert "nb_clash" in clash and "built-in" in clash and "Rename the entry point" in clash
    assert norms["clash_ok"]["package"] == "nb_clash"  # the rest of that distribution still loads
    assert ("rmsnorm", "nb_clash") in errors and norms["rmsnorm"]["package"] == "normbench"  # text proves nothing

    # a name two plugins claim belongs to neither
    assert "shared_name" not in norms
    assert {("shared_name", "nb_twin_a"), ("shared_name", "nb_twin_b")} <= set(errors)
    assert "nb_twin_b" in errors[("shared_name", "nb_twin_a")]

    # versions and sources; the loaded plugins, and only those
    assert norms["fine_norm"]["package_version"] == "0.1" and norms["fine_norm"]["source"] == "nb_fine_mod:SPEC"
    assert data["plugins"]["nb_fine"] == "0.1" and "nb_clash" in data["plugins"]
    assert "nb_twin_a" not in data["plugins"] and "nb_twin_b" not in data["plugins"]

    # the slow import is named with its time
    slow = [line for line in res.stderr.splitlines() if "'slow_norm'" in line]
    assert slow and "nb_slow" in slow[0] and "s to import" in slow[0]
    seconds = float(slow[0].split(" took ")[1].split("s ")[0])
    assert seconds >= SLOW_IMPORT_S


def test_provenance_names_loaded_plugins_and_honours_disable(hostile, monkeypatch, capfd):
    """In this process (discovery is what is tested, not a command): the hostile distributions on sys.path."""
    from normbench.discovery import REGISTRY
    from normbench.records.provenance import plugin_versions

    before = set(sys.modules)
    monkeypatch.delenv("NORMBENCH_DISABLE_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(hostile))
    try:
        REGISTRY.reload()
        on = plugin_versions()
        n = len(REGISTRY.names())
        monkeypatch.setenv("NORMBENCH_DISABLE_PLUGINS", "1")
        REGISTRY.reload()
        off = plugin_versions()
    finally:
        for name in set(sys.modules) - before:  # the hostile modules leave with their path
            if name.startswith("nb_"):
                del sys.modules[name]
        monkeypatch.undo()
        REGISTRY.reload()
    assert on["nb_fine"] == "0.1" and on["nb_hang"] == "0.1"
    assert not {"nb_twin_a", "nb_twin_b"} & set(on)   # rejected, so not in any record's provenance
    assert off == {}
    assert n > len(normbench.list_norms()) >= 29     # the plugins' norms were there, and are gone again
    assert "fine_norm" not in normbench.list_norms()
    assert "NOISY: printed at import" in capfd.readouterr().err  # its import-time prints went to stderr


def test_check_reports_hang_and_crash_by_name_and_goes_on(hostile, cache_dir):
    res = _cli(["check", "hang_norm", "crash_norm", "noisy_norm", "nan_out", "fine_norm", "layernorm",
                "--json", "--time-limit", CHECK_LIMIT], hostile, cache_dir)
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    order = [n["norm"] for n in report["norms"]]
    assert order[0] == "layernorm" and report["norms"][0]["status"] == "load_error"  # load errors first
    by = {n["norm"]: n for n in report["norms"] if n.get("status") != "load_error"}
    assert by["hang_norm"]["outcome"] == "timeout" and not by["hang_norm"]["passed"]
    assert "time limit" in by["hang_norm"]["failures"][0]["detail"]
    assert by["crash_norm"]["outcome"] == "crashed" and "exit code 3" in by["crash_norm"]["failures"][0]["detail"]
    assert by["noisy_norm"]["passed"] and by["fine_norm"]["passed"] and by["layernorm"]["passed"]
    assert not by["nan_out"]["passed"]
    assert any(f["check"].startswith("finite") for f in by["nan_out"]["failures"])
    assert "NOISY: printed in forward" in res.stderr
    cache = json.loads((cache_dir / "gate.json").read_text())  # the contract's verdict: eager, on the CPU
    assert cache["hang_norm"]["eager@cpu"]["status"] == "failed"
    assert cache["fine_norm"]["eager@cpu"]["status"] == "passed"


def _records(out: Path, kind: str = "kernel") -> list[dict]:
    from normbench.records.store import iter_records

    return [rec for _, rec in iter_records(out, kind, errors="ignore")] if out.exists() else []


GATE_FLAGS = {"unchecked", "forced", "non_finite"}


BENCH = ["bench", "--quick", "--backend", "eager", "--dtype", "float32", "--pass", "fwd",
         "--shape", "quick-8x128x512", "--no-progress", "--time-limit", BENCH_LIMIT]


def test_bench_refuses_unchecked_norms_and_force_flags_them(hostile, cache_dir, tmp_path):
    out = tmp_path / "results"
    res = _cli(BENCH + ["--norm", "nan_out", "hang_norm", "--out", str(out)], hostile, cache_dir)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "refusing to benchmark nan_out" in res.stderr and "refusing to benchmark hang_norm" in res.stderr
    assert _records(out) == []  # nothing written for a norm that has not passed its check

    # --force: measured anyway and flagged; a hang and a crash are reported by name and the sweep goes on
    res = _cli(BENCH + ["--norm", "fine_norm", "hang_norm", "crash_norm", "nan_out", "noisy_norm", "--force",
                        "--out", str(out)], hostile, cache_dir)
    assert res.returncode == 1
    assert "hang_norm hung" in res.stderr and "time limit" in res.stderr
    assert "crash_norm crashed" in res.stderr and "exit code 3" in res.stderr
    recs = _records(out)
    names = {r["norm"]["name"] for r in recs}
    assert "hang_norm" not in names and "crash_norm" not in names
    # the norm before is kept, the ones after are measured
    assert "fine_norm" in names and "noisy_norm" in names, res.stderr
    nan = [r for r in recs if r["norm"]["name"] == "nan_out"]
    assert nan and all({"forced", "non_finite"} <= set(r["flags"]) and r["check"]["status"] == "failed" for r in nan)
    for name in ("fine_norm", "noisy_norm"):  # a passed check is not forced, even under --force
        clean = [r for r in recs if r["norm"]["name"] == name]
        # (a busy machine may flag a record noisy; the gate's own flags must be absent)
        assert clean and all(r["check"]["status"] == "passed" and not GATE_FLAGS & set(r["flags"]) for r in clean)
        assert all(r["check"]["impl_hash"] == r["impl_hash"] for r in clean)
    assert recs[0]["provenance"]["plugins"]["nb_fine"] == "0.1"


@pytest.mark.slow
def test_train_watchdog_stops_a_stalled_run_and_the_next_norm_trains(hostile, cache_dir, tmp_path):
    out = tmp_path / "results"
    res = _cli(["sweep", "--norms", "hang_norm", "fine_norm", "--tasks", "synth-lm", "--seeds", "1", "--steps", "3",
                "--quick", "--no-progress", "--force", "--stall-limit", STALL_LIMIT, "--time-limit", CHECK_LIMIT,
                "--out", str(out)], hostile, cache_dir)
    assert res.returncode == 1, res.stderr
    assert "hang_norm" in res.stderr and f"no progress for {STALL_LIMIT}s" in res.stderr
    recs = _records(out, kind="accuracy")
    assert [r["norm"]["name"] for r in recs] == ["fine_norm"], res.stderr
    assert recs[0]["check"]["status"] == "passed" and not GATE_FLAGS & set(recs[0]["flags"])


def test_pytest_benchmark_suite_gates_on_check_and_runs_with_benchmark_disable(hostile, cache_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMBENCH_")}
    env.update({"PYTHONPATH": str(hostile), "NORMBENCH_CACHE_DIR": str(cache_dir), "NORMBENCH_TIME_LIMIT": CHECK_LIMIT,
                "NORMBENCH_PYTEST_NORMS": "nan_out,fine_norm", "OMP_NUM_THREADS": "1"})
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/pytest_benchmark", "--benchmark-disable", "-q",
                          "-rs", "-p", "no:randomly", "-p", "no:cacheprovider"], cwd=Path(__file__).parents[1],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    # the kernel suite and the accuracy suite (synth-lm; synth-shapes' ResNet needs an images layout neither has)
    assert "2 passed, 4 skipped" in res.stdout, res.stdout
    skipped = [line for line in res.stdout.splitlines() if line.startswith("SKIPPED")]
    refused = [line for line in skipped if "refusing to benchmark nan_out" in line and "NORMBENCH_FORCE=1" in line]
    assert {("test_kernels.py" in line, "test_accuracy.py" in line) for line in refused} == {(True, False),
                                                                                            (False, True)}
    assert all("refusing" in line or "resnet needs images" in line for line in skipped), skipped
