"""Where a command is stuck: how long a wait may go without progress before it says what it waits on."""

from __future__ import annotations

import contextlib
import os
import sys

#: Seconds a pool (or the executor) may wait with no progress before it says where it is stuck; 0: never.
STUCK_ENV = "NORMBENCH_STUCK_S"
DEFAULT_STUCK_S = 300.0


def env_seconds(env: str, default: float) -> float | None:
    """Seconds from the environment variable ``env`` (``default`` when unset; 0 or less: none, i.e. no limit)."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{env} must be a number of seconds, got {raw!r}") from None
    return None if value <= 0 else value


def stuck_after() -> float | None:
    """Seconds without progress after which a wait says where it is stuck (``$NORMBENCH_STUCK_S``; 0: never)."""
    return env_seconds(STUCK_ENV, DEFAULT_STUCK_S)


def say_stuck(what: str) -> None:
    """One line on stderr: what this command has waited on, and for how long."""
    with contextlib.suppress(Exception):
        print(f"normbench: still waiting: {what}", file=sys.stderr, flush=True)
