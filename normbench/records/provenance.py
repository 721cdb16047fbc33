"""Environment capture for result records: hardware, software versions, git commit and a hardware id slug."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

from normbench.versions import __version__, timm_version, triton_version
from normbench.versions import dist_version as _version

_REPO = Path(__file__).resolve().parents[2]

#: Packages whose norms join the comparison as external baselines; their versions are recorded when present.
BASELINE_PACKAGES = ("liger-kernel", "quack-kernels", "transformer-engine", "flashinfer-python", "apex")


def utc_now() -> str:
    """The current time as ISO-8601 UTC with a ``Z`` suffix, to the second."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS, ``platform`` otherwise)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def _cpu_slug(model: str) -> str:
    # Drop trademark marks, clock speeds and filler words so the slug names the part, not its marketing line.
    text = re.sub(r"\((r|tm|c)\)", " ", model, flags=re.I)
    text = re.sub(r"@\s*[\d.]+\s*[gm]hz", " ", text, flags=re.I)
    text = re.sub(r"\b(cpu|processor|\d+-core|with radeon graphics)\b", " ", text, flags=re.I)
    return _slug(text) or "unknown"


def _gpu_slug(name: str) -> str:
    return _slug(name) or "unknown"


def _nvidia_smi(query: str) -> str | None:
    from normbench import device as seam

    return seam.get().nvidia_smi(query)


def hardware(device: str | None = None) -> dict:
    """CPU model, cores and torch threads; GPU name, memory, driver and CUDA version when a GPU is used."""
    import torch

    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 1,
        "threads": torch.get_num_threads(),
        "gpu": None,
        "gpu_memory_gb": None,
        "driver": None,
        "cuda": None,
    }
    from normbench import device as seam

    if device != "cpu" and seam.available():  # the real GPU, or a rehearsal's simulated one (named so)
        info.update(seam.get().hardware(device or "cuda"))
    return info


def hardware_id(hw: dict) -> str:
    """A short, stable slug naming the hardware a record was measured on, e.g. ``gpu-nvidia-h200``."""
    if hw.get("gpu"):
        return f"gpu-{_gpu_slug(hw['gpu'])}"
    return f"cpu-{_cpu_slug(hw.get('cpu') or 'unknown')}-{hw.get('cores') or 0}c"


#: Names the commit when the tree carries no .git (a copy sent to a GPU machine); dirtiness is then unknown.
GIT_COMMIT_ENV = "NORMBENCH_GIT_COMMIT"


@functools.lru_cache(maxsize=1)
def git_commit() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the normbench checkout this code runs from; (None, None) outside a git checkout.

    Dirty means the code differs from the commit: changes under results/ (which every sweep writes) and docs/ do
    not count, so a record's commit still names the code that produced it.
    """
    given = os.environ.get(GIT_COMMIT_ENV, "").strip()
    if given:  # a copied tree without .git (the GPU campaign): the caller names the commit it copied
        return given, None
    if not (_REPO / ".git").exists():
        return None, None
    try:
        head = subprocess.run(["git", "-C", str(_REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None, None
        status = subprocess.run(["git", "-C", str(_REPO), "status", "--porcelain", "--untracked-files=no", "--",
                                 ".", ":(exclude)results", ":(exclude)docs"],
                                capture_output=True, text=True, timeout=20)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
        return head.stdout.strip(), dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def plugin_versions() -> dict[str, str]:
    """{distribution: version} of the plugin packages whose norms this process loaded (none when
    ``NORMBENCH_DISABLE_PLUGINS`` is set; a plugin that failed to load or was rejected is not among them)."""
    from normbench.discovery import REGISTRY

    return REGISTRY.loaded_plugins()


def provenance(command: str | list[str] | None = None, device: str | None = None) -> dict:
    """Everything a record needs to say where and with what it was measured.

    ``command`` is the command line (a string or argv list; default: this process's argv).
    ``device`` "cpu" leaves the GPU fields null even on a GPU machine (a CPU measurement).
    """
    import torch

    if command is None:
        command = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]
    if not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    hw = hardware(device)
    commit, dirty = git_commit()
    baselines = {d: v for d in BASELINE_PACKAGES if (v := _version(d))}
    out = {
        "timestamp": utc_now(),
        "normbench_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version(),
        "timm": timm_version(),
        "platform": platform.platform(),
        "node": platform.node() or None,
        "hardware": hw,
        "hardware_id": hardware_id(hw),
        "plugins": plugin_versions(),
        "baselines": baselines,
        "command": command,
    }
    from normbench import device as seam

    if device != "cpu" and seam.get().simulated:  # a rehearsal: the GPU is simulated and the record says so
        out["simulated"] = seam.rehearsal_reason()
    return out
