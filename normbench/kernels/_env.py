"""Where the Triton kernels can run (GPU, or Triton's CPU interpreter, read live), the input check, the device
guard and the launch hook (``Launcher``) every Triton backend shares. Importing this does not import Triton."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import torch
from torch.autograd.function import once_differentiable

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


class Launcher:
    """How the Triton kernels are launched, compiled and sized: the one seam through which tests and CPU benchmarks
    stub the launches (``use_launcher``). This one launches on the GPU (or in Triton's interpreter).

    ``devices``: the device types whose tensors this launcher takes (a stub that launches nothing may take CPU
    tensors without the interpreter, so the host path can be measured and counted on a machine without a GPU).
    """

    devices: tuple[str, ...] = ("cuda",)

    def launch(self, kernel, grid, args, kwargs) -> None:
        """One launch of a ``@triton.jit`` kernel over ``grid`` (a tuple), on the device of ``args[0]``."""
        dev = args[0].device
        if dev.type == "cuda" and dev.index is not None and dev.index != torch.cuda.current_device():
            with torch.cuda.device(dev):  # Triton launches on the current device, not the tensor's
                kernel[grid](*args, **kwargs)
        else:
            kernel[grid](*args, **kwargs)

    def tune(self, tuner, grid, args, kwargs):
        """Run a ``triton.autotune`` launcher once for a key it has not chosen for (it times its configurations and
        launches the best); return the chosen ``triton.Config``, which the caller then launches directly."""
        self.launch(tuner, grid, args, kwargs)
        return tuner.best_config

    def compile(self, kernel, args, kwargs):
        """The compiled kernel for ``args``/``kwargs`` without launching it (None where it cannot be compiled)."""
        try:
            compiled = kernel.warmup(*args, grid=(1,), **kwargs)
            compiled._init_handles()
            return compiled
        except Exception:  # an older Triton without warmup(): callers keep their fixed choices
            return None

    def device_properties(self, device: torch.device):
        """``torch.cuda.get_device_properties`` of ``device`` (callers cache it per device)."""
        return torch.cuda.get_device_properties(device)


_LAUNCHER = Launcher()
#: Caches of launch plans (per shape, dtype, device, ...) and device facts, emptied when the launcher changes.
_CACHES: list[dict] = []


def launcher() -> Launcher:
    return _LAUNCHER


def plan_cache() -> dict:
    """A dict for a kernel module's launch plans: emptied whenever the launcher changes (its plans came from it)."""
    cache: dict = {}
    _CACHES.append(cache)
    return cache


def clear_plans() -> None:
    for cache in _CACHES:
        cache.clear()


@contextlib.contextmanager
def use_launcher(new: Launcher):
    """Launch every Triton kernel through ``new`` inside the block (plans made before or inside it are dropped)."""
    global _LAUNCHER
    old, _LAUNCHER = _LAUNCHER, new
    clear_plans()
    try:
        yield new
    finally:
        _LAUNCHER = old
        clear_plans()


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
    if interpret or "cpu" in _LAUNCHER.devices:
        return None
    if not torch.cuda.is_available():
        return NO_GPU
    return None


def _check(*tensors: torch.Tensor) -> None:
    check = sys.modules.get("normbench.kernels._common")
    if check is None:  # first use: the kernels (and Triton) load now
        check = importlib.import_module("normbench.kernels._common")
    for t in tensors:
        check.check_tensor(t)


def _on(x: torch.Tensor):
    """Launch on the tensor's GPU, not the current one (Triton launches on the current device)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _once(backward):
    """``backward`` for a first-order gradient; under ``create_graph=True`` (grad mode on in the backward) it runs
    through ``once_differentiable``, so differentiating its result raises instead of silently giving zero.

    (``once_differentiable`` on every call costs a ``no_grad`` block and a scan of the gradients, about a tenth of
    the floor's whole backward on the host; the engine already runs a first-order backward without grad mode.)
    """
    slow = once_differentiable(backward)

    def run(ctx, *grads):
        if torch.is_grad_enabled():
            return slow(ctx, *grads)
        return backward(ctx, *grads)

    run.__doc__ = backward.__doc__
    return run
