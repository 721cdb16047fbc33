"""Running Triton kernel tests without a GPU, in Triton's CPU interpreter (shared by the Triton test modules).

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, its own ``tl.sum`` & co. included, so
the variable must be set before anything imports Triton. A test module calls :func:`prepare` while pytest collects
it (before any test runs): it imports Triton and the module's kernels for the interpreter and puts the variable
back. :func:`backend` sets it again only while the module's tests run, so other test modules still see the backend as
unavailable. If Triton was already imported for the compiler, the module's tests rerun in a fresh process instead
(:func:`rerun_in_fresh_process`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys

import pytest
import torch


@contextlib.contextmanager
def _interpret(on: bool = True):
    old = os.environ.get("TRITON_INTERPRET")
    if on:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def prepare(*kernel_modules: str) -> str:
    """'gpu', 'interpreter' (Triton and ``normbench.kernels.<kernel_modules>`` now imported for it), 'late' (Triton
    was imported for the compiler first) or 'missing'."""
    if torch.cuda.is_available():
        return "gpu"
    from normbench.kernels._env import language_mode

    if language_mode() == "compiler":
        return "late"
    with _interpret():
        try:
            import triton  # noqa: F401
        except ImportError:
            return "missing"
        for name in kernel_modules:
            importlib.import_module(f"normbench.kernels.{name}")
        return "interpreter"


def backend(mode: str, module: str):
    """Generator for a module-scoped fixture: ``normbench.kernels.<module>`` with the interpreter on when there is no
    GPU; skips (with the reason) where the kernels cannot run in this process."""
    if mode == "missing":
        pytest.skip("triton is not installed")
    if mode == "late":
        pytest.skip("triton was imported before TRITON_INTERPRET could be set; these cases run in a fresh process")
    with _interpret(mode == "interpreter"):
        mod = importlib.import_module(f"normbench.kernels.{module}")
        reason = mod.unavailable()
        if reason:
            pytest.skip(reason)
        yield mod


def device(mode: str) -> str:
    return "cpu" if mode == "interpreter" else "cuda"


def rerun_in_fresh_process(mode: str, path: str, *pytest_args: str, timeout: int = 900) -> None:
    """Where Triton was imported too late for the interpreter (``mode == "late"``), run the test file ``path``
    (``pytest_args`` select its cases) in a fresh process with ``TRITON_INTERPRET=1``; it must pass."""
    if mode != "late":
        pytest.skip(f"the cases ran in this process ({mode})")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", path,
                          *pytest_args], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
