"""Where the Triton kernels can run (GPU, or Triton's CPU interpreter, read live), the input check and the device
guard every Triton backend shares. Importing this does not import Triton."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import torch

INTERPRET_ENV = "TRITON_INTERPRET"


def interpret_requested() -> bool:
    """Whether Triton would build kernels for its CPU interpreter if they were decorated now."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):  # Triton < 3.4 reads the variable directly
        return os.environ.get(INTERPRET_ENV, "0").strip().lower() in ("1", "true", "on", "yes")


def language_mode() -> str | None:
    """How the already-imported ``triton.language`` was built: "interpreter", "compiler", or None if not imported.

    Triton decorates its own standard library (``tl.sum``, ...) when ``triton.language`` is first imported, so the
    interpreter works only if ``TRITON_INTERPRET=1`` was set before anything imported Triton.
    """
    lang = sys.modules.get("triton.language")
    if lang is None:
        return None
    return "interpreter" if type(getattr(lang, "sum", None)).__name__ == "InterpretedFunction" else "compiler"


NO_TRITON = "triton is not installed: pip install normbench[triton]"
NO_GPU = "no CUDA GPU (set TRITON_INTERPRET=1 to run the kernels slowly on the CPU in Triton's interpreter)"


def unavailable() -> str | None:
    """``None`` when the kernels can run here (a CUDA GPU, or ``TRITON_INTERPRET=1``), else the reason."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return NO_TRITON
    except Exception as exc:  # a broken install must read as unavailable, not crash the caller
        return f"triton failed to import ({type(exc).__name__}: {exc})"
    interpret = interpret_requested()
    if interpret != (language_mode() == "interpreter"):
        if interpret:
            return ("triton was imported before TRITON_INTERPRET=1 was set; set it before anything imports triton "
                    "(in the shell, or first thing in the process)")
        return "triton was imported with TRITON_INTERPRET=1, which is no longer set; set it again or restart"
    # Kernels are built for the interpreter or the GPU when first imported; a later switch cannot take effect.
    common = sys.modules.get("normbench.kernels._common")
    if common is not None and interpret != common.INTERPRET:
        return (f"TRITON_INTERPRET changed after the kernels were built for "
                f"{'the interpreter' if common.INTERPRET else 'the GPU'}; set it before their first use")
    if interpret:
        return None
    if not torch.cuda.is_available():
        return NO_GPU
    return None


def _check(*tensors: torch.Tensor) -> None:
    common = importlib.import_module("normbench.kernels._common")
    for t in tensors:
        common.check_tensor(t)


def _on(x: torch.Tensor):
    """Launch on the tensor's GPU, not the current one (Triton launches on the current device)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
