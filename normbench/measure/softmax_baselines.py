"""External softmax baselines: Liger-Kernel's ``LigerSoftmax`` and quack's ``softmax``, compared as backends.

They join a sweep of the ``softmax`` norm when importable and on a CUDA device; otherwise the case is skipped with
the reason. Both are called as their users call them: ``LigerSoftmax()(x)`` (liger_kernel.transformers.softmax;
softmax over the last axis of any shape) and ``quack.softmax.softmax(x)`` (a 2-D ``(M, N)`` CUDA tensor, so rows are
flattened to ``(-1, C)`` and the output viewed back, both free for a contiguous input). Neither library has a
log-softmax module; Liger's cross-entropy returns a loss, not log-probabilities, so it is not a log_softmax
backend (see docs/softmax.md).
"""

from __future__ import annotations

import importlib

from torch import nn

BASELINES = ("liger", "quack")
#: norm -> baselines that implement it
SUPPORTED = {"softmax": BASELINES}
_MODULE = {"liger": "liger_kernel.transformers.softmax", "quack": "quack.softmax"}
_PACKAGE = {"liger": "liger-kernel", "quack": "quack-kernels"}


def backends_for(norm: str) -> tuple[str, ...]:
    return SUPPORTED.get(norm, ())


def unavailable(backend: str, norm: str, layout: str, device: str) -> str | None:
    """``None`` if ``backend`` can run ``norm`` here, else the reason."""
    if backend not in SUPPORTED.get(norm, ()):
        return f"{backend} has no implementation of {norm}"
    try:
        importlib.import_module(_MODULE[backend])
    except Exception as exc:  # ImportError, or a broken CUDA/CuTe-DSL install
        return f"{_PACKAGE[backend]} is not importable here ({type(exc).__name__}: {exc})"
    if not str(device).startswith("cuda"):
        return f"{backend} kernels need a CUDA device (this run is on {device})"
    return None


class _Quack(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.num_features = num_features
        self._fn = importlib.import_module("quack.softmax").softmax

    def forward(self, x):
        shape = x.shape
        return self._fn(x.contiguous().view(-1, shape[-1])).view(shape)


def build(backend: str, norm: str, eager: nn.Module) -> nn.Module:
    """The baseline module for ``norm`` (no parameters to share)."""
    if backend not in SUPPORTED.get(norm, ()):
        raise KeyError(f"{backend} has no implementation of {norm}; known: {SUPPORTED}")
    if backend == "liger":
        return importlib.import_module("liger_kernel.transformers.softmax").LigerSoftmax()
    return _Quack(eager.num_features)


def version(backend: str) -> str | None:
    """The installed version of the baseline's package, for the record."""
    from importlib import metadata

    try:
        return metadata.version(_PACKAGE[backend])
    except metadata.PackageNotFoundError:
        return None
