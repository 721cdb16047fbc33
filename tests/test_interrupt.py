"""Interrupting normbench commands at named phases (issue #36): each interruption lands mid-run through the test-only
hook (``normbench.processes.phase``: the command pauses at the phase and says where), and is checked: the command
exits within 10 s with no traceback, no process of its group is left, nothing is partial (records valid, no
temporary file, the site the old one or the new one), and a re-run completes with the uninterrupted run's outcome.

The schedule is seeded (``NORMBENCH_INTERRUPT_SEED``, printed on failure): which signal goes where at each phase.
``NORMBENCH_INTERRUPT_FULL=1`` runs the larger variant (every signal at every phase, a re-run after each
interruption); the default keeps the suite's budget. The 10 s bound is the issue's hang bound, not a timing
measurement: a command that hangs never meets it, whatever the machine's load.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from normbench import processes

FULL = os.environ.get("NORMBENCH_INTERRUPT_FULL") == "1"
SEED = int(os.environ.get("NORMBENCH_INTERRUPT_SEED", "36"))
BOUND_S = 10.0
REPO = Path(__file__).resolve().parents[1]

# What reaches each process: (target, signal, repeated). "worker" is SIGKILL of the process paused at the phase.
PARENT_INT, PARENT_TERM = ("parent", signal.SIGINT, False), ("parent", signal.SIGTERM, False)
GROUP_INT, GROUP_TERM = ("group", signal.SIGINT, False), ("group", signal.SIGTERM, False)
REPEAT_INT, REPEAT_TERM = ("parent", signal.SIGINT, True), ("group", signal.SIGTERM, True)
KILL_WORKER = ("worker", signal.SIGKILL, False)
SIGNALS = (PARENT_INT, PARENT_TERM, GROUP_INT, GROUP_TERM, REPEAT_INT, REPEAT_TERM)


def _schedule(command: str, phases: dict) -> list[tuple[str, tuple]]:
    """(phase, delivery) pairs for ``command``: ``phases`` maps a phase to how many deliveries it gets (the full
    variant: every one) and whether it runs in a worker (then SIGKILL of that worker is one of them)."""
    rng = random.Random(f"{SEED}-{command}")
    out = []
    for name, (n, in_worker) in phases.items():
        pool = list(SIGNALS) + ([KILL_WORKER] if in_worker else [])
        rng.shuffle(pool)
        if in_worker and KILL_WORKER in pool[n:] and not FULL:
            pool.remove(KILL_WORKER)
            pool.insert(0, KILL_WORKER)   # a worker's death is always among a worker phase's cases
        out += [(name, d) for d in (pool if FULL else pool[:n])]
    return out


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.update({"NORMBENCH_CACHE": str(tmp / "cache"), "NORMBENCH_CACHE_DIR": str(tmp / "cache"),
                "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "NORMBENCH_TIME_LIMIT": "120"})
    env.pop(processes.PHASE_ENV, None)
    return env


class Zygote:
    """The commands' launcher (``tests/interrupt_zygote.py``): normbench imported once, each command a fork of it in
    a session of its own, as a shell starts it; the ``normbench`` console script itself runs in
    :func:`test_a_successful_build_prints_no_traceback` and in the real-process interruption cases."""

    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("interrupt_zygote.py"))],
                                     env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.exited: dict[int, int] = {}
        msg = self._read(600)
        assert msg and "ready" in msg, "the launcher did not start"

    def _read(self, timeout: float):
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
        if not ready:
            return None
        line = self.proc.stdout.readline()
        assert line, "the launcher died"
        msg = json.loads(line)
        if "exited" in msg:
            self.exited[msg["exited"]] = msg["rc"]
        return msg

    def start(self, args: list[str], env: dict, cwd: Path, stdout: Path, stderr: Path) -> int:
        self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd), "stdout": str(stdout),
                                          "stderr": str(stderr)}) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = self._read(60)
            assert msg is not None, "the launcher did not answer"
            if "started" in msg:
                return msg["started"]

    def wait(self, pid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while pid not in self.exited:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._read(left)
        return self.exited.pop(pid)

    def close(self) -> None:
        self.proc.kill()   # only a launcher: its commands have all ended
        self.proc.wait(30)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    z = Zygote(_env(tmp_path_factory.mktemp("launcher")))
    yield z
    z.close()


#: ``python -m normbench.cli ARGS`` with two marks on the way out, under ``$NORMBENCH_TEST_EXIT_MARK``: ``.atexit`` (its
#: atexit handlers ran) and ``.teardown`` (the interpreter tore down ``__main__``: a normal exit, which an interrupted
#: command skips, ``processes.exit_stopped``).
_REAL_MAIN = """
import atexit, os, runpy, sys

MARK = os.environ.get("NORMBENCH_TEST_EXIT_MARK")

class Teardown:
    def __del__(self, _open=open, _mark=MARK):   # (builtins may be cleared by then)
        _open(_mark + ".teardown", "w").close()

if MARK:
    keep = Teardown()
    atexit.register(lambda: open(MARK + ".atexit", "w").close())
sys.argv = ["normbench", *sys.argv[1:]]
runpy.run_module("normbench.cli", run_name="__main__", alter_sys=True)
"""


class _Real:
    """Runs commands as real ``normbench`` processes (``python -m normbench.cli``, with the exit marks of
    ``_REAL_MAIN``), with the launcher's interface."""

    def __init__(self):
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, args, env, cwd, stdout, stderr) -> int:
        with open(stdout, "w") as out, open(stderr, "w") as err:
            p = subprocess.Popen([sys.executable, "-c", _REAL_MAIN, *args], env=env, cwd=cwd, stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[p.pid] = p
        return p.pid

    def wait(self, pid, timeout):
        try:
            return self.procs[pid].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def _group(pgid: int) -> list[str]:
    """The live processes of group ``pgid``, and of the session it leads (Ray puts each of its workers in a process
    group of its own: a group's SIGINT does not reach them, nor would a check of the group alone); a zombie whose
    parent is gone is dead (an init that does not reap it is this container's, not the command's)."""
    left = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if pgid in (int(fields[2]), int(fields[3])) and fields[0] != "Z":
                try:
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
                except OSError:
                    cmd = ""
                left.append(f"{stat[:stat.rindex(')') + 1]} state {fields[0]} ppid {fields[1]}: {cmd}")
    return left


def _left_after(pgid: int, wait_s: float = 3.0) -> list[str]:
    """What of group ``pgid`` still lives ``wait_s`` after its command exited (as last seen: empty when gone)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = _group(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def run_clean(run, args: list[str], env: dict, cwd: Path) -> tuple[str, str]:
    """A run to completion: it succeeds and its stderr holds no traceback. (stdout, stderr)."""
    out, err = cwd / ".clean.out", cwd / ".clean.err"
    t0 = time.monotonic()
    pid = run.start(args, env, cwd, out, err)
    rc = run.wait(pid, 600)
    _log({"command": args[0], "clean": True, "rc": rc, "wall_s": round(time.monotonic() - t0, 2),
          "executor": env.get("NORMBENCH_EXECUTOR", "worker")})
    stdout, stderr = out.read_text(), err.read_text()
    out.unlink()
    err.unlink()
    assert rc == 0, f"{args}: exit {rc}\n{stderr[-3000:]}"
    assert "Traceback" not in stderr, f"{args}: a successful run printed a traceback:\n{stderr[-3000:]}"
    return stdout, stderr


def interrupt(run, args: list[str], env: dict, cwd: Path, phase: str, delivery: tuple, *,
              pool: bool = False, pool_worker: bool = True) -> dict:
    """Run ``args``, pause it at ``phase``, deliver ``delivery``; check the bound, the group and the traceback.
    ``pool``: the phase runs in a worker (a process other than the command's); ``pool_worker``: one of a pool
    (whose death stops the command) rather than the executor's (whose death fails one task)."""
    target, sig, repeated = delivery
    mark = cwd / f".phase-{time.monotonic_ns()}"
    env = {**env, processes.PHASE_ENV: phase, processes.PHASE_FILE_ENV: str(mark)}
    err_path, out_path = mark.with_suffix(".err"), mark.with_suffix(".out")
    t_start = time.monotonic()
    pid = run.start(args, env, cwd, out_path, err_path)
    where = f"seed {SEED}: {args[0]} at {phase}, {target} {sig.name}{' twice' if repeated else ''}"
    rc = None
    try:
        deadline = time.monotonic() + 300
        while not (mark.exists() and mark.read_text().strip()):
            done = run.wait(pid, 0.02)
            assert done is None, f"{where}: exited ({done}) before the phase\n{err_path.read_text()}"
            assert time.monotonic() < deadline, f"{where}: the phase was never reached"
        time.sleep(0.05)   # every process pausing at the phase has said so
        paused = [int(line.split()[1]) for line in mark.read_text().split("\n") if line.strip()]
        if pool:
            assert paused[0] != pid, f"{where}: the phase ran in the command's process, not a worker"
        t0 = time.monotonic()
        reached = t0 - t_start
        if target == "worker":
            os.kill(paused[0], signal.SIGKILL)
        elif target == "parent":
            os.kill(pid, sig)
        else:
            os.killpg(pid, sig)
        if repeated:
            rc = run.wait(pid, 0.1)
            if rc is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig) if target == "parent" else os.killpg(pid, sig)
        if rc is None:
            # A killed executor worker is a crashed task: the command reports it and goes on with the rest.
            rc = run.wait(pid, (300 if target == "worker" and not pool_worker else BOUND_S) - (time.monotonic() - t0))
        stopped = time.monotonic() - t0
        assert rc is not None, f"{where}: still running {BOUND_S:g}s after the signal\n{err_path.read_text()}"
        left = _left_after(pid)
        assert not left, f"{where}: processes of its group are left (paused there: {paused}): {left}"
    finally:
        if rc is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            run.wait(pid, 30)
    err_text = err_path.read_text()
    assert "Traceback" not in err_text, f"{where}: printed a traceback\n{err_text[-3000:]}"
    # Stopped by itself, not forced by its stop deadline (which exits 130 too, within the bound: a stop that hangs
    # would pass the checks above without this one).
    assert "did not stop within" not in err_text, f"{where}: forced by the stop deadline\n{err_text[-3000:]}"
    if target != "worker":
        assert rc == 130, f"{where}: exit {rc}, not the interrupted exit 130\n{err_text[-2000:]}"
    for p in (mark, err_path, out_path, Path(f"{mark}.taken")):
        p.unlink()
    _log({"command": args[0], "phase": phase, "target": target, "signal": sig.name, "repeated": repeated, "rc": rc,
          "reached_s": round(reached, 2), "stopped_s": round(stopped, 2),
          "wall_s": round(time.monotonic() - t_start, 2)})
    return {"rc": rc, "stderr": err_text}


def _log(entry: dict) -> None:
    """One line of ``$NORMBENCH_INTERRUPT_LOG``: the tally by command and phase (the issue's closing note), and where
    the test's time goes (each run to completion too)."""
    log = os.environ.get("NORMBENCH_INTERRUPT_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def no_partial(root: Path, site: Path | None = None, site_files: set | None = None) -> None:
    """No temporary file, no half-swapped site; every record file under ``root`` valid."""
    from normbench.records.store import iter_records, record_files

    left = [p for p in root.rglob("*") if ".tmp" in p.name or p.name.startswith((".site.build-", ".site.old-",
                                                                               ".manifest-"))]
    assert not left, f"left behind: {left}"
    results = root / "results"
    if results.exists() and record_files(results):
        from normbench.records.schema import validate_record

        for path, rec in iter_records(results):
            assert validate_record(rec) == [], path
    if site is not None:
        assert site.is_dir(), "no site left"
        assert _files(site) == site_files, "the site is neither the old one nor the new one"


def _files(d: Path) -> set:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


def _ids(results: Path) -> set:
    from normbench.records.store import iter_records

    return {r["id"] for _, r in iter_records(results)} if results.exists() else set()


# --- fixtures ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """One results directory for the reading commands (the demo records), and its site built once."""
    import test_site_support as sup

    from normbench.records.store import write_records

    root = tmp_path_factory.mktemp("interrupt")
    # two norms of the demo (several record files, both machines, kernels and accuracy): a small but whole site
    write_records([r for r in sup.demo_records() if r["norm"]["name"] in ("rmsnorm", "dyt")], root / "results")
    return root


def _work(prepared: Path, tmp_path: Path) -> Path:
    shutil.copytree(prepared / "results", tmp_path / "results")
    (tmp_path / "docs").mkdir()
    return tmp_path


# --- the pool ----------------------------------------------------------------------------------------------------

def _dispositions(i: int) -> tuple:
    status = Path(f"/proc/{os.getpid()}/status").read_text()
    masks = {k: int(v, 16) for k, v in (line.split(":\t") for line in status.splitlines()
                                        if line.startswith(("SigIgn", "SigCgt", "SigBlk")))}
    return (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), masks)


@pytest.mark.skipif(not processes.can_fork() or not Path("/proc/self/status").exists(), reason="fork and /proc")
def test_pool_workers_take_sigterm_by_default_and_ignore_sigint_under_the_commands_handlers():
    # what cli.main installs: SIGTERM and SIGINT raise KeyboardInterrupt in the command's process
    with processes.interruptible():
        assert signal.getsignal(signal.SIGTERM) is processes._on_signal
        with processes.Pool(_dispositions, 2, what="test pool") as pool:
            got = dict(pool.results(range(2)))
    for term, intr, masks in got.values():
        assert term == signal.SIG_DFL and intr == signal.SIG_IGN
        bit = lambda s: 1 << (s - 1)   # noqa: E731
        # the kernel's view: SIGTERM not caught (its default action kills), SIGINT ignored, neither blocked
        assert not masks["SigCgt"] & bit(signal.SIGTERM) and not masks["SigIgn"] & bit(signal.SIGTERM)
        assert masks["SigIgn"] & bit(signal.SIGINT)
        assert not masks["SigBlk"] & (bit(signal.SIGTERM) | bit(signal.SIGINT))


def _slow(i: int) -> int:
    if i == 0:
        time.sleep(60)
    return i * i


def _idle_then_die(i: int) -> int:
    return i


@pytest.mark.skipif(not processes.can_fork(), reason="fork")
def test_pool_teardown_never_blocks_whatever_worker_dies_when():
    # a worker killed mid-task: WorkerDied (naming it), the others stopped
    with pytest.raises(processes.WorkerDied, match="killed by SIGKILL"):
        with processes.Pool(_slow, 2, what="test pool") as pool:
            results = pool.results(range(4))
            time.sleep(0.2)
            os.kill(pool.pids[0], signal.SIGKILL)
            list(results)
    # the mechanism, for every pool cycle: workers killed while idle (a group SIGTERM, the OOM killer)
    # between tasks and at the end; teardown returns and leaves no process
    for cycle in range(20):
        with processes.Pool(_idle_then_die, 2, what="test pool") as pool:
            pids = list(pool.pids)
            assert sorted(i for i, _ in pool.results(range(6))) == list(range(6))
            os.kill(pids[cycle % 2], signal.SIGTERM if cycle % 3 else signal.SIGKILL)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    # an exception in a task is raised in the caller as itself
    with pytest.raises(ZeroDivisionError):
        with processes.Pool(lambda i: 1 // i, 2) as pool:
            list(pool.results(range(3)))


def _nap(i: int) -> int:
    time.sleep(1.5 if i == 1 else 0)
    return i


@pytest.mark.skipif(not processes.can_fork(), reason="fork")
def test_a_stuck_pool_says_which_worker_on_which_task_and_where(monkeypatch, capfd):
    monkeypatch.setenv(processes.STUCK_ENV, "0.4")
    with processes.Pool(_nap, 2, what="test pool") as pool:
        assert sorted(i for i, _ in pool.results(range(3))) == [0, 1, 2]
        pid = pool.pids
    err = capfd.readouterr().err
    assert "normbench: still waiting: test pool: no result for" in err
    line = next(x for x in err.splitlines() if "still waiting" in x)
    assert "on task 1 for" in line and any(f"worker pid {p} " in line for p in pid)
    assert "in _nap" in err   # the worker's own stack (faulthandler at SIGUSR1)


def test_exit_stopped_leaves_the_normal_exit_when_nothing_stopped_or_a_thread_works(monkeypatch):
    """``processes.exit_stopped`` (an interrupted program's prompt exit, checked on real processes below) does
    nothing when the command was not interrupted, nor while another non-daemon thread may still be finishing a file
    (a failure here ends this test's process)."""
    processes.exit_stopped(3)
    busy = threading.Thread(target=time.sleep, args=(0.3,))
    busy.start()
    monkeypatch.setattr(processes._State, "stopping", True)
    try:
        processes.exit_stopped(3)
    finally:
        busy.join()


# --- the commands ------------------------------------------------------------------------------------------------

SITE_PHASES = {"read": (2, False), "judge": (5, True), "pool-end": (2, False), "render": (5, True), "swap": (3, False)}


def _site_args(n) -> list[str]:
    # a fresh cache every time: the judging pool judges every file
    return ["site", "build", "--results", "results", "--out", "site", "--jobs", "2", "--no-charts",
            "--cache", f"cache-{n}", "--docs", "docs"]


def test_a_successful_build_prints_no_traceback_and_real_processes_stop(prepared, tmp_path):
    """The console script itself (no launcher): a plain build with a pool prints no traceback (it printed
    ``ForkPoolWorker`` ``KeyboardInterrupt`` tracebacks on every build) and exits normally; interrupted at a pool
    phase, it stops, and leaves after its atexit handlers without the interpreter's teardown."""
    root = _work(prepared, tmp_path)
    mark = tmp_path / "exit"
    env, run = {**_env(root), "NORMBENCH_TEST_EXIT_MARK": str(mark)}, _Real()
    run_clean(run, _site_args(0), env, root)
    files = _files(root / "site")
    # a successful command: the interpreter's normal exit
    assert {p.name for p in tmp_path.glob("exit.*")} == {"exit.atexit", "exit.teardown"}
    for n, (ph, delivery) in enumerate([("judge", GROUP_TERM)], 1):
        for p in tmp_path.glob("exit.*"):
            p.unlink()
        interrupt(run, _site_args(n), env, root, ph, delivery, pool=True)
        no_partial(root, root / "site", files)
        # interrupted: out at once after its atexit handlers (processes.exit_stopped), not through the
        # interpreter's seconds of tearing torch down
        assert {p.name for p in tmp_path.glob("exit.*")} == {"exit.atexit"}, "not the interrupted program's exit"


def test_site_build_interrupted_at_each_phase(prepared, tmp_path, launcher):
    root = _work(prepared, tmp_path)
    env = _env(root)
    site = root / "site"
    run_clean(launcher, _site_args(0), env, root)
    files = _files(site)
    for n, (ph, delivery) in enumerate(_schedule("site", SITE_PHASES), 1):
        interrupt(launcher, _site_args(n), env, root, ph, delivery, pool=SITE_PHASES[ph][1])
        no_partial(root, site, files)
        if FULL:
            run_clean(launcher, _site_args(f"r{n}"), env, root)
    run_clean(launcher, _site_args("last"), env, root)
    assert _files(site) == files


READ_PHASES = {"read": (3, False), "judge": (4, False)}


@pytest.mark.parametrize("command", ["claims", "best", "docs"])
def test_reading_commands_interrupted(prepared, tmp_path, launcher, command):
    root = _work(prepared, tmp_path)
    env = _env(root)
    phases = dict(READ_PHASES)
    if command == "claims":
        args = ["claims", "--results", "results"]
    elif command == "best":
        args = ["best", "--model", "llama-3.1-8b", "--results", "results"]
    else:
        shutil.copy(REPO / "docs" / "accuracy.md", root / "accuracy.md")
        args = ["docs", "--results", "results", "--doc", "accuracy.md"]
        phases["write"] = (2, False)
        shutil.copy(root / "accuracy.md", root / "accuracy.orig")
    for ph, delivery in _schedule(command, phases):
        if command == "docs":
            shutil.copy(root / "accuracy.orig", root / "accuracy.md")  # so that the run has a block to write
        interrupt(launcher, args, env, root, ph, delivery)
        no_partial(root)
        if command == "docs":
            assert (root / "accuracy.md").read_bytes() == (root / "accuracy.orig").read_bytes()
        elif FULL:
            run_clean(launcher, args, env, root)
    if command == "docs":
        shutil.copy(root / "accuracy.orig", root / "accuracy.md")
    out, _ = run_clean(launcher, args, env, root)
    if command == "docs":
        assert (root / "accuracy.md").read_bytes() != (root / "accuracy.orig").read_bytes()
    else:
        assert out == run_clean(launcher, args, env, root)[0]


def _bench_args(out: str) -> list[str]:
    return ["bench", "--quick", "--norm", "rmsnorm", "--backend", "eager", "--dtype", "float32", "--pass", "fwd",
            "--layout", "tokens", "--out", out, "--no-progress"]


def _train_args(out: str) -> list[str]:
    return ["train", "--norm", "rmsnorm", "--task", "synth-lm", "--quick", "--steps", "2", "--out", out,
            "--no-progress", "--checkpoint-dir", "ck"]


def _sweep_args(out: str) -> list[str]:
    return ["sweep", "--norms", "rmsnorm", "--tasks", "synth-lm", "--seeds", "1", "--steps", "2",
            "--out", out, "--no-progress", "--checkpoint-dir", "ck"]


# SIGKILL of the executor's worker in bench (a crashed task, reported); a signal passed on to it in all three.
WRITING = {"bench": (_bench_args, {"task": (2, True), "write": (1, False)}),
           "train": (_train_args, {"task": (1, False), "write": (1, False)}),
           "sweep": (_sweep_args, {"task": (1, False), "write": (1, False)})}


def _training_ids(norms, steps: int | None = None) -> set:
    """The record ids ``train`` and the suites' lanes give quick synth-lm runs of ``norms`` (seed 0, one
    thread, ``steps`` if given) on this machine: ``record_id_for``, what they skip finished runs by. The resumed
    runs' records must carry them (the same id as an uninterrupted run's, checked by hand: a ``train --norm
    layernorm --quick`` record)."""
    import torch

    from normbench.train.loop import record_id_for
    from normbench.train.runner import RunSettings

    threads = torch.get_num_threads()
    try:
        settings = RunSettings(quick=True, steps=steps, device="cpu", threads=1)
        return {record_id_for(settings.runs(n, "synth-lm", "gpt", "default", None, [0])[0]) for n in norms}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("command", sorted(WRITING))
def test_writing_commands_interrupted_then_resumed(tmp_path, launcher, command):
    make, phases = WRITING[command]
    # The executor's worker (a forkserver that imports torch: seconds each time) where the phase is in it; the
    # other runs in the command's process, the same records (the executor is not part of a record's identity).
    env = _env(tmp_path)
    inproc = {**env, "NORMBENCH_EXECUTOR": "inprocess"}
    if command == "train":   # the id an uninterrupted run gets (what train skips by), without a run of its own
        want = _training_ids(["rmsnorm"], steps=2)
    else:   # (a sweep's runs are other cells: its own settings)
        run_clean(launcher, make("whole"), inproc, tmp_path)
        want = _ids(tmp_path / "whole")
    assert want
    for ph, delivery in _schedule(command, phases):
        interrupt(launcher, make("results"), env if ph == "task" else inproc, tmp_path, ph, delivery,
                  pool=ph == "task", pool_worker=False)
        no_partial(tmp_path)
        if FULL:
            run_clean(launcher, make("results"), env, tmp_path)
            assert _ids(tmp_path / "results") == want
            shutil.rmtree(tmp_path / "results")
    run_clean(launcher, make("results"), inproc, tmp_path)
    assert _ids(tmp_path / "results") == want


def test_ingest_asv_interrupted_then_resumed(tmp_path, launcher, committed_results):

    from test_suites_accuracy import _a_committed_record, _asv_result_file

    from normbench import results, suites

    rec = _a_committed_record("synth-lm", committed_results)
    norm = rec["norm"]["name"]
    asv_dir, sidecar = tmp_path / ".asv" / "results", tmp_path / ".asv" / "normbench"
    run_dir = sidecar / "accuracy" / "abc-virtualenv-py3.11"
    results.write_records([rec], run_dir)
    (run_dir / "index.json").write_text(json.dumps({"cells": {f"{norm}|synth-lm": suites.summary(rec)}}))
    params = [[norm], ["synth-lm"]]
    _asv_result_file(asv_dir / "testbox" / "abc-virtualenv-py3.11.json", {
        "accuracy.TextTasks.track_perplexity": (params, [rec["metrics"]["final"]]),
        "accuracy.TextTasks.time_step": (params, [0.03])}, commit="abc")
    (asv_dir / "testbox" / "machine.json").write_text("{}")
    env = _env(tmp_path)
    args = ["ingest-asv", str(asv_dir), "--out"]
    run_clean(launcher, args + ["whole"], env, tmp_path)
    want = _ids(tmp_path / "whole")
    assert want == {rec["id"]}
    for ph, delivery in _schedule("ingest-asv", {"write": (5, False)}):
        interrupt(launcher, args + ["results"], env, tmp_path, ph, delivery)
        no_partial(tmp_path)
        assert not _ids(tmp_path / "results")   # stopped before its one file was in place: nothing, not a part
    run_clean(launcher, args + ["results"], env, tmp_path)
    assert _ids(tmp_path / "results") == want


# --- the Ray executor (an embedded instance) and the suites' training lanes -----------------------------------------

# Every signal, to the parent and to the group, lands in the Ray worker running a measurement; each run starts an
# embedded Ray instance (GCS, raylet, agents: the command's children; workers: the raylet's, each in a group of its
# own), the costly part (~10-30 s a run here), so the default schedule takes the group's SIGTERM (it reaches GCS and
# raylet too: the case that overran the deadline) and one seeded other; the full variant takes every signal.
RAY_DELIVERIES = (GROUP_TERM, PARENT_INT, PARENT_TERM, GROUP_INT, REPEAT_INT, REPEAT_TERM)


@pytest.mark.slow
def test_ray_executor_interrupted_then_resumed(tmp_path, launcher):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'normbench[ray]')")
    import tempfile

    env = _env(tmp_path)
    inproc = {**env, "NORMBENCH_EXECUTOR": "inprocess"}
    # The reference, in the command's process; it also leaves the gate's verdict in the cache, so that every Ray
    # task below is a measurement (a check's task would be interrupted instead).
    run_clean(launcher, _bench_args("whole"), inproc, tmp_path)
    want = _ids(tmp_path / "whole")
    assert want
    ray_tmp = tempfile.mkdtemp(prefix="nbri")   # Ray's sockets live below it: a short path (107-byte limit)
    ray_env = {**env, "RAY_TMPDIR": ray_tmp}
    ray_env.pop("RAY_ADDRESS", None)   # an embedded instance: never a cluster this machine runs
    args = _bench_args("results") + ["--executor", "ray"]
    rng = random.Random(f"{SEED}-ray")
    deliveries = RAY_DELIVERIES if FULL else (RAY_DELIVERIES[0], rng.choice(RAY_DELIVERIES[1:]))
    try:
        for delivery in deliveries:
            interrupt(launcher, args, ray_env, tmp_path, "task", delivery, pool=True)
            no_partial(tmp_path)
            assert _ids(tmp_path / "results") <= want
        run_clean(launcher, args, ray_env, tmp_path)   # a re-run through Ray completes: the same records
        assert _ids(tmp_path / "results") == want
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


LANE_PHASES = {"lane": (2, False), "task": (1, True)}   # a "task" case costs a worker start
# The lanes run as a library call (ASV's set-up) with the interpreter's own handlers; a repeated signal's second
# arrival after the call returned is the host program's to handle, not the lanes'.
LANE_SIGNALS = (PARENT_INT, PARENT_TERM, GROUP_INT, GROUP_TERM)


def test_suites_training_lanes_interrupted_then_resumed(tmp_path, launcher):
    """``suites.train_cells`` (two lanes, threads of the parent, each driving a worker process) interrupted between
    runs (``lane``) and in a run (``task``, in a lane's worker): prompt stop, nothing left, nothing half-written, and
    a resumed call trains exactly what an uninterrupted one did."""
    env = _env(tmp_path)
    norms = ("rmsnorm", "layernorm")
    lanes = lambda out: ["@lanes", out, ",".join(norms), "synth-lm"]   # noqa: E731
    # What an uninterrupted call writes: the ids train gives these quick runs, not a second full training.
    want = _training_ids(norms)
    assert len(want) == 2
    rng = random.Random(f"{SEED}-lanes")
    for ph, (n, in_worker) in LANE_PHASES.items():
        picks = list(LANE_SIGNALS) if FULL else rng.sample(LANE_SIGNALS, n)
        for delivery in picks:
            interrupt(launcher, lanes("results"), env, tmp_path, ph, delivery, pool=in_worker)
            no_partial(tmp_path)
            assert _ids(tmp_path / "results") <= want
    run_clean(launcher, lanes("results"), env, tmp_path)
    assert _ids(tmp_path / "results") == want
