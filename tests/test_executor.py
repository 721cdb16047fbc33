"""The executor interface: one reusable worker, replaced only after a hang or a crash; limits; heartbeats."""

from __future__ import annotations

import os
import time

import pytest

from normbench.executor import InProcessExecutor, Task, WorkerExecutor, heartbeat
from normbench.executor_choice import make_executor


def beating(seconds: float, interval: float) -> str:
    """Works for ``seconds``, calling heartbeat every ``interval`` (a training loop's steps)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        heartbeat()
        time.sleep(interval)
    return "finished"


def beat_then_stall(seconds: float) -> None:
    heartbeat()
    time.sleep(seconds)


def fails() -> None:
    raise ValueError("a broken norm")


def test_worker_is_reused_and_replaced_only_after_a_crash_or_hang():
    with WorkerExecutor() as ex:
        first = ex.submit(Task("os:getpid", label="a")).result()
        again = ex.submit(Task("os:getpid", label="b")).result()
        assert first.ok and again.ok and first.value == again.value  # one process, reused

        err = ex.submit(Task(fails, label="raises")).result()
        assert err.status == "error" and err.exc_type == "ValueError" and "a broken norm" in err.error
        assert ex.submit(Task("os:getpid")).result().value == first.value  # an exception does not cost the worker

        crash = ex.submit(Task("os:_exit", (3,), label="crasher")).result()
        assert crash.status == "crashed" and crash.label == "crasher" and "exit code 3" in crash.error
        after_crash = ex.submit(Task("os:getpid")).result()
        assert after_crash.ok and after_crash.value != first.value

        hang = ex.submit(Task("time:sleep", (3600,), label="hanger", timeout=1.0)).result()
        assert hang.status == "timeout" and "time limit of 1s" in hang.error
        after_hang = ex.submit(Task("os:getpid")).result()
        assert after_hang.ok and after_hang.value != after_crash.value


def test_stall_limit_spares_progressing_work_and_stops_stalled_work():
    with WorkerExecutor() as ex:
        # runs twice as long as the stall limit, but beats: it lives
        ok = ex.submit(Task(beating, (6.0, 0.1), label="long run", stall_timeout=3.0)).result()
        assert ok.ok and ok.value == "finished"
        stalled = ex.submit(Task(beat_then_stall, (3600,), label="stuck run", stall_timeout=3.0)).result()
        assert stalled.status == "stalled" and "no progress for 3s" in stalled.error


def test_in_process_executor_turns_exceptions_into_outcomes():
    ex = make_executor("inprocess")
    assert isinstance(ex, InProcessExecutor) and not ex.enforces_limits
    assert [o.value for o in ex.map([Task("builtins:len", ([1, 2],)), Task("builtins:abs", (-3,))])] == [2, 3]
    bad = ex.submit(Task(fails, label="x")).result()
    assert not bad.ok and bad.exc_type == "ValueError"
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("nonesuch")


def beating_in(pid_file: str, seconds: float) -> str:
    """``beating`` that first writes the pid of the process running it to ``pid_file``."""
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    return beating(seconds, 0.05)


_ORPHAN_PARENT = """
import sys
sys.path.insert(0, {tests!r})
from normbench.executor import Task, WorkerExecutor
WorkerExecutor().submit(Task("test_executor:beating_in", ({pid_file!r}, 120.0), label="long")).result()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see whether the worker still runs")
def test_a_worker_whose_sweep_was_killed_stops_instead_of_timing_on(tmp_path):
    """SIGKILL of the process that owns a worker (no Ctrl-C path can run) while a task runs: the worker notices at
    its next heartbeat that nobody listens and exits, rather than keep loading the machine (an orphan once halved
    the next run's copy ceiling)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    pid_file = tmp_path / "worker.pid"
    code = _ORPHAN_PARENT.format(tests=str(Path(__file__).parent), pid_file=str(pid_file))
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pid_file.read_text())
        assert _alive(worker) and worker != parent.pid  # the task runs in the worker, mid-task now
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 20
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "the orphaned worker kept running"
    finally:
        parent.kill()


def test_sigterm_takes_the_interrupt_path_and_the_handler_is_restored(monkeypatch, capsys):
    import signal

    from normbench import cli

    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def long_command(args):
        seen.append(signal.getsignal(signal.SIGTERM))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted long before this ends
        return 0

    parser = cli.build_parser()
    real_parse = parser.parse_args
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: _with_func(real_parse(["list"]), long_command))
    assert cli.main(["list"]) == 130  # the default SIGTERM action would have killed this process instead
    from normbench.processes import _on_signal

    assert seen == [_on_signal]
    assert "results already written are kept" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def _with_func(args, func):
    args.func = func
    return args


def deaf_sleep(pid_file: str) -> None:
    """A task that ignores Ctrl-C (C code that does not return to the interpreter, a handler that swallows it): it
    writes its pid, then sleeps."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(120)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see whether the worker still runs")
def test_an_interrupted_worker_is_ended_though_its_forkserver_is_gone(tmp_path, monkeypatch):
    """``interrupt()`` from another thread (the suites' lanes) passes a Ctrl-C on and stops the forkserver. A worker
    forked from it is not this process's child: multiprocessing then reported it dead (exit 255, its forkserver
    gone) and its terminate() and kill() sent nothing, so the lane returned while its worker lived on (#36). The
    worker must be ended (SIGTERM after the grace period) and the waiting thread return."""
    import threading

    from normbench import executor

    if executor.WorkerExecutor()._ctx.get_start_method() != "forkserver":
        pytest.skip("no forkserver on this platform")
    monkeypatch.setattr(executor, "INTERRUPT_GRACE_S", 0.5)
    pid_file = tmp_path / "worker.pid"
    ex, got = WorkerExecutor(), []
    lane = threading.Thread(target=lambda: got.append(ex.submit(Task(deaf_sleep, (str(pid_file),),
                                                                     label="deaf")).result()))
    lane.start()
    worker = None
    try:
        deadline = time.monotonic() + 300
        while not pid_file.exists() and time.monotonic() < deadline and lane.is_alive():
            time.sleep(0.05)
        worker = int(pid_file.read_text())
        ex.interrupt()
        lane.join(30)
        assert not lane.is_alive(), "the thread waiting on the interrupted worker did not return"
        deadline = time.monotonic() + 5
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), f"the interrupted worker lives on; the thread was told: {got[0].error}"
        assert got[0].status == "crashed" and "interrupted" in got[0].error, got[0]
    finally:
        ex.close()
        if worker is not None and _alive(worker):
            os.kill(worker, 9)


def _worker_with_a_ctrl_c_waiting(conn) -> None:
    """A worker as a forkserver forks it, with a Ctrl-C already on its way (SIGINT pending behind the mask)."""
    import signal

    from normbench import executor

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    os.kill(os.getpid(), signal.SIGINT)
    executor._worker_main(conn, dict(os.environ))


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="POSIX signal masks")
def test_a_worker_interrupted_as_it_starts_ends_quietly(capfd):
    """A Ctrl-C passed on to a worker in its first lines (a lane interrupted as it forked its worker) ends it with no
    traceback: it printed "Process normbench-worker: Traceback ... KeyboardInterrupt" (full interruption test)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker_with_a_ctrl_c_waiting, args=(child,), name="normbench-worker")
    proc.start()
    proc.join(60)
    err = capfd.readouterr().err
    assert proc.exitcode == 0 and "Traceback" not in err, err


def write_atomically(path: str) -> None:
    from normbench.records.store import atomic_write_text

    atomic_write_text(path, "{}\n")


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_worker_signalled_mid_write_leaves_no_temporary_file(tmp_path, monkeypatch, signame):
    """A worker stopped (the group's SIGTERM or Ctrl-C) while it writes a file atomically, its temporary file
    written and not yet in place: it stops, and neither the temporary file nor a half-written target is left.
    With SIGTERM's default action the worker died there and left ``.gate.json.<random>.tmp`` behind (CI, the
    suites' interrupted lanes)."""
    import signal
    import threading

    from normbench import processes

    mark = tmp_path / "phase"
    monkeypatch.setenv(processes.PHASE_ENV, "write")
    monkeypatch.setenv(processes.PHASE_FILE_ENV, str(mark))
    target = tmp_path / "out" / "gate.json"
    ex = WorkerExecutor()
    got = []
    try:
        t = threading.Thread(target=lambda: got.append(ex.submit(Task(write_atomically, (str(target),))).result()))
        t.start()
        deadline = time.monotonic() + 120
        while not (mark.exists() and mark.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        name, pid = mark.read_text().split()
        assert name == "write" and int(pid) != os.getpid()
        assert [p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")], "paused before its tmp file"
        os.kill(int(pid), getattr(signal, signame))
        t.join(30)
        assert not t.is_alive()
    finally:
        ex.close()
    assert not got[0].ok
    assert sorted(p.name for p in target.parent.iterdir()) == []
