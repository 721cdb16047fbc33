"""The check gate's cache holds verdicts about norms, never errors of the harness that ran the check."""

from __future__ import annotations

import json

from normbench import check
from normbench.executor import Outcome


class _Done:
    def __init__(self, outcome):
        self._outcome = outcome

    def result(self):
        return self._outcome


class _Executor:
    """Returns a fixed outcome for every task, as an executor whose worker ended that way would."""

    def __init__(self, outcome):
        self.outcome = outcome

    def submit(self, task):
        return _Done(self.outcome)


def test_a_harness_error_is_a_failed_verdict_for_this_run_but_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path))
    broken = Outcome("layernorm", "error", error="ImportError: cannot import name 'x' from 'normbench.check'",
                     exc_type="ImportError")
    logs = []
    status = check.ensure_checked(["layernorm"], executor=_Executor(broken), log=logs.append)["layernorm"]
    assert not status.passed and "harness itself failed" in status.detail and "ImportError" in status.detail
    assert not check.cache_path().exists() or "layernorm" not in json.loads(check.cache_path().read_text())
    assert check.cached_status(check.REGISTRY.get("layernorm")) is None

    # A hang is the norm's own verdict: cached, so the next command does not hang again.
    hung = Outcome("layernorm", "timeout", error="no result after 1 s")
    status = check.ensure_checked(["layernorm"], executor=_Executor(hung), log=logs.append)["layernorm"]
    assert not status.passed
    cached = check.cached_status(check.REGISTRY.get("layernorm"))
    assert cached is not None and not cached.passed and "hung" in cached.detail

    # ... and the gate then answers from the cache without running anything.
    again = check.ensure_checked(["layernorm"], executor=None, log=logs.append)["layernorm"]
    assert again.cached and not again.passed
