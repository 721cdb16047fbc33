"""The Ray executor against a real local Ray head (``ray start --head``) reached by ``--address``.

One head serves the whole module (Ray takes a while to start): 2 CPUs, no GPU, no dashboard, usage statistics off,
token authentication with a token of the test's own, its own temporary directory; it is stopped through the process
id of its ``ray start --block`` command (which stops the processes it started), never with a machine-wide
``ray stop``. The drivers run in this process (``normbench.cli.main``), except the one a test watches from outside
while it kills a worker and the one that fails to join, whose exit status and message are what is tested.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'normbench[ray]'): the Ray executor is untested")

pytestmark = pytest.mark.slow

RAY = Path(sys.executable).with_name("ray")
NORMBENCH = Path(sys.executable).with_name("normbench")
# A small sweep: three norms x two quick shapes, one dtype, one pass: six groups, each a Ray task.
BENCH = ["bench", "--norm", "layernorm", "rmsnorm", "dyt", "--quick", "--backend", "eager", "--dtype", "float32",
         "--pass", "fwd", "--threads", "1", "--no-progress"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(pid: int, token: str) -> bool:
    """Whether process ``pid`` belongs to this test's head (its environment holds the head's token)."""
    try:
        return f"RAY_AUTH_TOKEN={token}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _head_processes(token: str) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ours(int(p.name), token)]


@pytest.fixture(scope="module")
def head():
    """``(address, env)`` of a local Ray head started for this module."""
    if not RAY.exists():
        pytest.skip(f"no `ray` command next to {sys.executable}")
    token = secrets.token_hex(32)
    temp = tempfile.mkdtemp(prefix="nbray")  # short: Ray's socket paths live below it (107-byte limit)
    port = _free_port()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
               NORMBENCH_CACHE=os.path.join(temp, "cache"), NORMBENCH_CACHE_DIR=os.path.join(temp, "cache"))
    env.pop("RAY_ADDRESS", None)
    address = f"127.0.0.1:{port}"
    proc = log = None
    for _ in range(2):  # an overloaded machine can make Ray's own start-up time out: one more try
        log = open(os.path.join(temp, "head.log"), "w")
        proc = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                                 f"--port={port}", "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false",
                                 "--disable-usage-stats", f"--temp-dir={temp}"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in Path(temp, "head.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        else:
            break
        _stop_head(proc, log, token)
        proc = None
    if proc is None:
        tail = Path(temp, "head.log").read_text()[-1500:]
        shutil.rmtree(temp, ignore_errors=True)
        pytest.skip(f"the Ray head could not start on this machine (twice; Ray's start-up timed out): {tail}")
    try:
        yield address, env, token
    finally:
        _stop_head(proc, log, token)
        shutil.rmtree(temp, ignore_errors=True)


def _stop_head(proc, log, token) -> None:
    proc.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    log.close()
    for pid in _head_processes(token):  # anything of this head that outlived it, by process id
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _normbench(args, env, **kw):
    return subprocess.run([str(NORMBENCH), *args], env=env, capture_output=True, text=True, timeout=300, **kw)


def _records(root) -> dict:
    from normbench.results import iter_records

    return {rec["id"]: rec for _, rec in iter_records(root, "kernel")}


@contextlib.contextmanager
def _here(env):
    """Run normbench's CLI in this process with the head's cache directories; restores what it changes."""
    import torch

    saved = {k: os.environ.get(k) for k in ("NORMBENCH_CACHE", "NORMBENCH_CACHE_DIR")}
    threads = torch.get_num_threads()
    os.environ.update({k: env[k] for k in saved})
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _driver_here(env, args):
    """Be the Ray driver in this process (``normbench.cli.main``; a driver process's start-up — Python, torch, Ray,
    the norms — costs seconds and is not what these tests are about): the head's token in the environment, Ray made to
    read it again (it read its configuration when this module imported it, as a fresh driver process would now), and
    ``sys.argv`` the command line the records' provenance names."""
    from ray._raylet import Config

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    argv = sys.argv
    os.environ.update({k: env[k] for k in saved})
    sys.argv = [str(NORMBENCH), *args]
    try:
        Config.initialize("")
        with _here(env):
            yield
    finally:
        sys.argv = argv
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        Config.initialize("")


def _normbench_here(args, env, capsys) -> subprocess.CompletedProcess:
    """``normbench ARGS`` as the Ray driver in this process; its exit status and output, as from a subprocess."""
    from normbench.cli import main

    capsys.readouterr()
    with _driver_here(env, args):
        code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


@pytest.fixture(scope="module")
def inprocess(head, tmp_path_factory):
    """The reference: the same sweep with ``--executor inprocess`` (in this process: no second interpreter)."""
    from normbench.cli import main

    _, env, _ = head
    out = tmp_path_factory.mktemp("inprocess")
    with _here(env):
        assert main(BENCH + ["--executor", "inprocess", "--out", str(out)]) == 0
    recs = _records(out)
    assert len(recs) == 6
    return recs


def _same_measurement(a: dict, b: dict) -> None:
    """Everything but the timings and when/where: the same case, inputs, code, check and exactness."""
    assert a["config"] == b["config"] and a["norm"] == b["norm"] and a["impl_hash"] == b["impl_hash"]
    assert a["check"] == b["check"]
    for key in ("bytes_moved", "err", "saved_bytes"):
        assert a["metrics"][key] == b["metrics"][key], key
    assert a["provenance"]["hardware_id"] == b["provenance"]["hardware_id"]


def test_sweep_through_a_ray_head_gives_the_same_record_ids(head, inprocess, tmp_path, capsys):
    address, env, _ = head
    out = tmp_path / "ray"
    r = _normbench_here(BENCH + ["--executor", "ray", "--address", address, "--out", str(out)], env, capsys)
    assert r.returncode == 0, r.stderr
    assert "6 records written" in r.stdout
    recs = _records(out)
    assert set(recs) == set(inprocess)
    for rid, rec in recs.items():
        _same_measurement(rec, inprocess[rid])
        assert rec["provenance"]["node"] == platform.node()  # the node that measured (this machine's head)
        assert "--executor ray" in rec["provenance"]["command"]  # the driver's command line, not the worker's
    # Timings are not asserted (a shared machine), only reported: the two runs measured the same thing.
    ratios = sorted(recs[i]["metrics"]["time_median_s"] / inprocess[i]["metrics"]["time_median_s"] for i in recs)
    print("ray / in-process median time ratios:", [round(x, 2) for x in ratios])


def test_killing_a_worker_mid_sweep_loses_nothing_and_a_rerun_completes(head, inprocess, tmp_path, capsys):
    address, env, token = head
    out = tmp_path / "ray"
    args = BENCH + ["--executor", "ray", "--address", address, "--out", str(out)]
    driver = subprocess.Popen([str(NORMBENCH), *args, "--retries", "0"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    # Kill the first worker seen at work (the six groups are one task each, two at a time, so the others finish
    # after it, or finished before it, and are written): waiting for a written record first lost the race on a
    # quiet machine, where the warm workers finish the whole sweep in a couple of seconds.
    killed = None
    deadline = time.monotonic() + 240
    while killed is None and driver.poll() is None and time.monotonic() < deadline:
        for pid in _head_processes(token):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if title.startswith(b"ray::_run_task"):
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.01)
    stdout, stderr = driver.communicate(timeout=300)
    if killed is None:
        pytest.skip("the sweep finished before a worker could be killed mid-task (machine too fast for this plan)")
    assert driver.returncode == 1, stderr  # a failure, reported
    assert "crashed in" in stderr and "worker process running it died" in stderr, stderr
    failed = [line for line in stderr.splitlines() if line.startswith("  failed ")]
    assert failed and all("/eager/quick-" in line for line in failed)  # reported by name (norm/backend/shape)
    kept = _records(out)
    assert kept and set(kept) < set(inprocess)  # what finished is kept, nothing else pretends to be
    stamps = {rid: rec["provenance"]["timestamp"] for rid, rec in kept.items()}

    again = _normbench_here(args, env, capsys)
    assert again.returncode == 0, again.stderr
    assert f"{len(kept)} already in" in again.stdout
    final = _records(out)
    # the re-run completed exactly the rest (on failure its output says which case is missing and why; a case the
    # sweep refused, e.g. far above the copy ceiling it measured, is listed there with its reason)
    assert set(final) == set(inprocess), again.stdout + again.stderr
    assert all(final[rid]["provenance"]["timestamp"] == ts for rid, ts in stamps.items())  # not measured twice
    for rid, rec in final.items():
        _same_measurement(rec, inprocess[rid])


def test_training_sweep_through_a_ray_head_matches_in_process(head, tmp_path, capsys):
    from normbench.cli import main
    from normbench.results import iter_records

    address, env, _ = head
    common = ["sweep", "--norms", "rmsnorm", "--tasks", "synth-lm", "--seeds", "1", "--steps", "3", "--no-progress",
              "--checkpoint-dir", str(tmp_path / "ck")]
    a, b = tmp_path / "inprocess", tmp_path / "ray"
    with _here(env):
        assert main(common + ["--executor", "inprocess", "--out", str(a)]) == 0
    r = _normbench_here(common + ["--executor", "ray", "--address", address, "--out", str(b)], env, capsys)
    assert r.returncode == 0, r.stderr
    ra = {rec["id"]: rec for _, rec in iter_records(a, "accuracy")}
    rb = {rec["id"]: rec for _, rec in iter_records(b, "accuracy")}
    assert len(ra) == 1 and set(ra) == set(rb)
    for rid in ra:  # CPU training with a fixed thread count is deterministic: the same numbers, not just close
        assert ra[rid]["metrics"]["curve"] == rb[rid]["metrics"]["curve"]
        assert ra[rid]["metrics"]["final"] == rb[rid]["metrics"]["final"]
        assert rb[rid]["provenance"]["node"]


def test_bad_address_is_a_clear_error(head):
    _, env, _ = head
    r = _normbench(BENCH + ["--executor", "ray", "--address", f"127.0.0.1:{_free_port()}", "--out", "unused"],
                   dict(env, RAY_AUTH_MODE=""), cwd=tempfile.gettempdir())
    assert r.returncode == 2 and "could not join the Ray cluster" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _stall_then_sleep(seconds: float) -> str:
    """A task that makes progress (heartbeats) for a while, then stops making any."""
    from normbench.executor import heartbeat

    for _ in range(int(seconds * 10)):
        heartbeat()
        time.sleep(0.1)
    time.sleep(600)
    return "unreachable"


def _beating(seconds: float) -> str:
    from normbench.executor import heartbeat

    for _ in range(int(seconds * 10)):
        heartbeat()
        time.sleep(0.1)
    return "done"


def test_executor_outcomes_on_the_head(head):
    """Every way a task can end, through the Executor interface: value, error, death, time-out, stall, cancel."""
    import ray.cloudpickle

    from normbench.executor import CRASHED, ERROR, OK, STALLED, TIMEOUT, Task
    from normbench.executor_choice import make_executor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    address, env, _ = head
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update({k: env[k] for k in saved})
    try:
        # Ray read its configuration (auth mode) when this module imported it, before the head's token was set:
        # have it read the environment again, as a fresh driver process would.
        from ray._raylet import Config

        Config.initialize("")
        with make_executor("ray", address=address, retries=0) as ex:
            futs = {
                "ok": ex.submit(Task("math:factorial", (5,), label="ok")),
                "error": ex.submit(Task("math:sqrt", (-1,), label="error")),
                "dies": ex.submit(Task("os:_exit", (3,), label="dies")),
                "hangs": ex.submit(Task("time:sleep", (600,), label="hangs", timeout=5)),
                "stalls": ex.submit(Task(_stall_then_sleep, (3,), label="stalls", stall_timeout=4)),
                "beats": ex.submit(Task(_beating, (6,), label="beats", stall_timeout=4)),
                "cancelled": ex.submit(Task("time:sleep", (600,), label="cancelled")),
            }
            assert futs["cancelled"].cancel()
            out = {k: f.result(timeout=300) for k, f in futs.items() if k != "cancelled"}
            import concurrent.futures as cf

            done, _ = cf.wait([futs["cancelled"]], timeout=60)  # a cancelled task wakes its waiters
            assert futs["cancelled"] in done
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert out["ok"].status == OK and out["ok"].value == 120
    assert out["error"].status == ERROR and out["error"].exc_type == "ValueError"
    assert "math domain error" in out["error"].error
    assert out["dies"].status == CRASHED and "died" in out["dies"].error
    assert out["hangs"].status == TIMEOUT and "time limit of 5s" in out["hangs"].error
    assert out["stalls"].status == STALLED and out["stalls"].wall_s >= 3 + 4 - 1  # lived while it progressed
    assert out["beats"].status == OK and out["beats"].value == "done"  # 6 s > the 4 s stall limit, but progressing
