"""The executor interface: one reusable worker, replaced only after a hang or a crash; limits; heartbeats."""

from __future__ import annotations

import time

import pytest

from normbench.executor import InProcessExecutor, Task, WorkerExecutor, heartbeat
from normbench.executors import make_executor


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
