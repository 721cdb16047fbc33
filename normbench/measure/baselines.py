"""External baselines: Liger-Kernel's and Apex's fused LayerNorm/RMSNorm, compared as backends "liger" and "apex".

They join a sweep for ``layernorm`` and ``rmsnorm`` (tokens layout) when importable and on a CUDA device; otherwise
the case is skipped with the reason. Each baseline module shares the eager module's parameters, so gradients and
errors are comparable.
"""

from __future__ import annotations

import importlib

from torch import nn

BASELINES = ("liger", "apex")
#: norm -> baselines that implement it
SUPPORTED = {"layernorm": BASELINES, "rmsnorm": BASELINES}


def backends_for(norm: str) -> tuple[str, ...]:
    return SUPPORTED.get(norm, ())


def unavailable(backend: str, norm: str, layout: str, device: str) -> str | None:
    """``None`` if ``backend`` can run ``norm`` here, else the reason."""
    if norm not in SUPPORTED or backend not in SUPPORTED[norm]:
        return f"{backend} has no implementation of {norm}"
    if layout != "tokens":
        return f"{backend}'s {norm} normalises the last dimension only (tokens layout)"
    module = {"liger": "liger_kernel.transformers", "apex": "apex.normalization"}[backend]
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or a broken CUDA extension
        pkg = {"liger": "liger-kernel", "apex": "apex"}[backend]
        return f"{pkg} is not importable here ({type(exc).__name__}: {exc})"
    if not str(device).startswith("cuda"):
        return f"{backend} kernels need a CUDA device (this run is on {device})"
    return None


def build(backend: str, norm: str, eager: nn.Module) -> nn.Module:
    """The baseline module for ``norm``, sharing ``eager``'s weight (and bias)."""
    c = eager.num_features
    eps = float(getattr(eager, "eps", 1e-5))
    if backend == "liger":
        from liger_kernel.transformers import LigerLayerNorm, LigerRMSNorm

        mod = LigerLayerNorm(c, eps=eps) if norm == "layernorm" else LigerRMSNorm(c, eps=eps)
    elif backend == "apex":
        from apex.normalization import FusedLayerNorm, FusedRMSNorm

        mod = FusedLayerNorm(c, eps=eps) if norm == "layernorm" else FusedRMSNorm(c, eps=eps)
    else:
        raise KeyError(f"unknown baseline {backend!r}; known: {', '.join(BASELINES)}")
    mod.weight = eager.weight
    if norm == "layernorm":
        mod.bias = eager.bias
    return mod
