"""A bare ``import timm`` works in the venv ``scripts/setup.sh`` makes, on the CPU build of torch with PyPI's (CUDA)
torchvision: the start-up hook ``normbench/_tvhook.py`` that setup.sh installs as a ``.pth`` file defines the compiled
ops' schemas at the first ``import torchvision``, and steps aside where torch and torchvision match."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_setup_installs_the_hook_and_a_bare_import_timm_works():
    pth = Path(sysconfig.get_paths()["purelib"]) / "normbench-torchvision.pth"
    assert pth.exists(), f"{pth} is missing: run `bash scripts/setup.sh` (it installs the start-up hook)"
    assert "normbench/_tvhook.py" in pth.read_text()
    r = subprocess.run([sys.executable, "-c", "import timm, torchvision; print(timm.__version__)"],
                       capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("torch_v,vision_v,want", [
    ("2.13.0+cpu", "0.28.0", True),         # this machine: CPU torch, PyPI's CUDA torchvision
    ("2.13.0+cpu", "0.28.0+cpu", False),    # a matching CPU torchvision loads its own ops
    ("2.13.0", "0.28.0", False),            # a GPU machine: CUDA torch and torchvision
])
def test_the_hook_acts_only_on_a_cpu_torch_with_a_cuda_torchvision(monkeypatch, torch_v, vision_v, want):
    import importlib.metadata as md
    import runpy

    ns = runpy.run_path(str(REPO / "normbench" / "_tvhook.py"))
    monkeypatch.setattr(md, "version", lambda name: {"torch": torch_v, "torchvision": vision_v}[name])
    assert ns["_needs_schemas"]() is want
