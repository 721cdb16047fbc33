"""The Triton kernels compile for the H100/H200 (sm_90) without a GPU, at the launchers' default block sizes, unspilled.

Triton's CPU interpreter (tests/test_triton_kernels.py) checks the arithmetic but builds no GPU code, so compile
errors and register spills would otherwise only show on a GPU. This runs ``python -m normbench.kernels.aot
--quick`` in a fresh process: Triton must not be in interpreter mode there, and this pytest process may have
imported it in that mode.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.triton


def _ptxas() -> str | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia", "bin", "ptxas")
    return path if os.path.exists(path) else None


def test_kernels_compile_for_sm90_without_spills():
    if _ptxas() is None:
        pytest.skip("triton with its NVIDIA backend (bundled ptxas) is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "normbench.kernels.aot", "--quick", "--arch", "90"],
                         capture_output=True, text=True, env=env, timeout=600)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report[-4000:]
    lines = [ln for ln in out.stdout.splitlines() if "warps=" in ln]
    assert len(lines) >= 20, report[-4000:]
    spilled = [ln for ln in lines if "SPILLS" in ln]
    assert not spilled, "\n".join(spilled)
