"""External baselines a kernel engineer compares against, each behind an adapter that calls the library as its users do.

* ``native``: rmsnorm via ``torch.nn.functional.rms_norm(x, (C,), weight, eps)`` (torch >= 2.4; CPU and CUDA).
* ``liger`` (``liger_kernel.transformers``): ``LigerLayerNorm``, ``LigerRMSNorm(in_place=False)``,
  ``LigerFusedAddRMSNorm(in_place=False)`` (add_rmsnorm), ``LigerDyT``, ``LigerGroupNorm`` (images layout).
* ``quack``: ``quack.rmsnorm(x, weight, eps=eps)`` and ``quack.layernorm.layernorm(x, weight, eps)`` over the input
  viewed as ``(-1, C)``, with a float32 weight.
* ``te`` (Transformer Engine): ``transformer_engine.pytorch.RMSNorm(C, eps=eps)`` / ``LayerNorm(C, eps=eps)``.
* ``flashinfer``: ``flashinfer.norm.rmsnorm(x, weight, eps)`` and ``fused_add_rmsnorm(x, residual, weight, eps)``
  (add_rmsnorm; in place, forward only).
* ``apex``: ``apex.normalization.FusedLayerNorm(C, eps=eps)`` / ``FusedRMSNorm(C, eps=eps)``.
* softmax (``liger``, ``quack``): ``normbench.measure.softmax_baselines``.

Every adapter shares the eager module's parameters (so gradients and errors are comparable) and never changes what
the library computes. Two choices are about the harness, not the kernel: Liger's RMSNorm backward defaults to
writing dx into the upstream gradient's storage (``in_place=True``), which would corrupt the gradient the error check
reuses, so it is built with ``in_place=False`` (the same kernel writing into a fresh buffer); FlashInfer's
``fused_add_rmsnorm`` overwrites its inputs, so the core restores them untimed before each repetition and times
it forward only (it has no backward). The library's name and version go in the record (``config.baseline_version``
and ``provenance.baseline``), so a new release is a new measurement.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Baseline:
    """One library's implementation of one norm."""

    backend: str
    norm: str
    module: str                      # what must import for it to run
    dist: str                        # the distribution whose version is recorded
    call: str                        # how it is called, for the record
    build: Callable[[nn.Module], nn.Module]
    layouts: tuple[str, ...] = ("tokens",)
    requires_cuda: bool = True
    inplace_inputs: bool = False     # overwrites its inputs (forward only)
    forward_only: bool = False       # no autograd: fwd cases only
    notes: str = ""
    dtypes: tuple[str, ...] = field(default=("float32", "bfloat16", "float16"))

    def version(self) -> str | None:
        if self.dist == "torch":
            return torch.__version__
        return _version(self.dist)

    def provenance(self) -> dict:
        return {"backend": self.backend, "package": self.dist, "version": self.version(), "call": self.call,
                "notes": self.notes}

    def unavailable(self, layout: str, device: str) -> str | None:
        if layout not in self.layouts:
            return f"{self.backend}'s {self.norm} supports the {'/'.join(self.layouts)} layout only"
        try:
            importlib.import_module(self.module)
        except Exception as exc:  # ImportError, or a broken CUDA extension
            return f"{self.dist} is not importable here ({type(exc).__name__}: {exc})"
        if self.requires_cuda and not str(device).startswith("cuda"):
            return f"{self.backend} kernels need a CUDA device (this run is on {device})"
        return None


class _Adapter(nn.Module):
    """Shares the eager module's parameters (same names, same tensors) and calls the library in ``forward``."""

    def __init__(self, eager: nn.Module, call: Callable, library: nn.Module | None = None):
        super().__init__()
        from normbench.registry import adopt_state

        adopt_state(self, eager)
        self.num_features = eager.num_features
        self.eps = float(getattr(eager, "eps", 1e-5))
        object.__setattr__(self, "_call", call)
        # Outside _modules, so the state_dict keys stay exactly the eager module's; its parameters are the eager
        # ones (shared), so .to() reaches them through this module.
        object.__setattr__(self, "library", library)

    def forward(self, *args):
        return self._call(self, *args)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.library is not None:
            self.library.train(mode)
        return self


def _share(library: nn.Module, eager: nn.Module, names: dict[str, str]) -> nn.Module:
    """Point ``library``'s parameters (``names``: library name -> eager name) at the eager module's tensors."""
    for lib_name, eager_name in names.items():
        setattr(library, lib_name, getattr(eager, eager_name))
    return library


def _eps(eager, default=1e-5) -> float:
    return float(getattr(eager, "eps", default))


# --- native -----------------------------------------------------------------------------------------------------

def _native_rmsnorm(eager):
    f = torch.nn.functional.rms_norm
    return _Adapter(eager, lambda m, x: f(x, (m.num_features,), m.weight, m.eps))


# --- Liger --------------------------------------------------------------------------------------------------------

def _liger_rmsnorm(eager):
    from liger_kernel.transformers import LigerRMSNorm

    lib = LigerRMSNorm(eager.num_features, eps=_eps(eager), in_place=False)
    _share(lib, eager, {"weight": "weight"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def _liger_layernorm(eager):
    from liger_kernel.transformers import LigerLayerNorm

    lib = _share(LigerLayerNorm(eager.num_features, eps=_eps(eager)), eager, {"weight": "weight", "bias": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def _liger_add_rmsnorm(eager):
    from liger_kernel.transformers import LigerFusedAddRMSNorm

    lib = _share(LigerFusedAddRMSNorm(eager.num_features, eps=_eps(eager), in_place=False), eager,
                 {"weight": "weight"})
    return _Adapter(eager, lambda m, x, r: m.library(x, r), lib)


def _liger_dyt(eager):
    from liger_kernel.transformers import LigerDyT

    lib = _share(LigerDyT(eager.num_features, beta=True, init_alpha=float(eager.alpha.detach())), eager,
                 {"alpha": "alpha", "gamma": "weight", "beta": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def _liger_groupnorm(eager):
    from liger_kernel.transformers import LigerGroupNorm

    lib = _share(LigerGroupNorm(eager.num_features, eager.num_groups, eps=_eps(eager)), eager,
                 {"weight": "weight", "bias": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


# --- quack --------------------------------------------------------------------------------------------------------

def _rows(fn):
    """Call ``fn`` on the input viewed as ``(-1, C)`` (quack's kernels take 2-D inputs) and view the result back."""
    def call(m, x):
        y = fn(m, x.reshape(-1, x.shape[-1]))
        return y.view(x.shape)
    return call


def _quack_rmsnorm(eager):
    import quack

    # quack keeps its weights in float32 (its kernels require it for some dtypes); the values are the eager ones.
    return _Adapter(eager, _rows(lambda m, x: quack.rmsnorm(x, m.weight.float(), eps=m.eps)))


def _quack_layernorm(eager):
    from quack.layernorm import layernorm

    # quack's layernorm has no bias: the eager bias (zeros at init) is left out, and with it its gradient.
    return _Adapter(eager, _rows(lambda m, x: layernorm(x, m.weight.float(), m.eps)))


# --- Transformer Engine -------------------------------------------------------------------------------------------

def _te(kind: str):
    def build(eager):
        import transformer_engine.pytorch as te

        cls = te.RMSNorm if kind == "rmsnorm" else te.LayerNorm
        lib = cls(eager.num_features, eps=_eps(eager))
        _share(lib, eager, {"weight": "weight"} if kind == "rmsnorm" else {"weight": "weight", "bias": "bias"})
        return _Adapter(eager, lambda m, x: m.library(x), lib)
    return build


# --- FlashInfer (forward only) ------------------------------------------------------------------------------------

def _flashinfer_rmsnorm(eager):
    from flashinfer.norm import rmsnorm

    def call(m, x):
        with torch.no_grad():  # an inference kernel: no autograd
            return rmsnorm(x.reshape(-1, x.shape[-1]), m.weight, m.eps).view(x.shape)

    return _Adapter(eager, call)


def _flashinfer_add_rmsnorm(eager):
    from flashinfer.norm import fused_add_rmsnorm

    def call(m, x, r):
        # In place: r <- x + r, x <- rmsnorm(r) * weight. The core hands it inputs it restores between calls.
        with torch.no_grad():
            x2, r2 = x.view(-1, x.shape[-1]), r.view(-1, r.shape[-1])
            fused_add_rmsnorm(x2, r2, m.weight, m.eps)
        return x, r

    return _Adapter(eager, call)


# --- Apex ---------------------------------------------------------------------------------------------------------

def _apex(kind: str):
    def build(eager):
        from apex.normalization import FusedLayerNorm, FusedRMSNorm

        if kind == "rmsnorm":
            lib = _share(FusedRMSNorm(eager.num_features, eps=_eps(eager)), eager, {"weight": "weight"})
        else:
            lib = _share(FusedLayerNorm(eager.num_features, eps=_eps(eager)), eager,
                         {"weight": "weight", "bias": "bias"})
        return _Adapter(eager, lambda m, x: m.library(x), lib)
    return build


_LIGER = "liger_kernel.transformers"
REGISTRY: dict[tuple[str, str], Baseline] = {
    (b.backend, b.norm): b for b in (
        Baseline("native", "rmsnorm", "torch", "torch", "torch.nn.functional.rms_norm(x, (C,), weight, eps)",
                 _native_rmsnorm, requires_cuda=False),
        Baseline("liger", "rmsnorm", _LIGER, "liger-kernel", "LigerRMSNorm(C, eps=eps, in_place=False)",
                 _liger_rmsnorm, notes="in_place=False: the default in-place backward would overwrite the "
                                       "upstream gradient the error check reuses; same kernel, fresh dx buffer"),
        Baseline("liger", "layernorm", _LIGER, "liger-kernel", "LigerLayerNorm(C, eps=eps)", _liger_layernorm),
        Baseline("liger", "add_rmsnorm", _LIGER, "liger-kernel", "LigerFusedAddRMSNorm(C, eps=eps, in_place=False)",
                 _liger_add_rmsnorm),
        Baseline("liger", "dyt", _LIGER, "liger-kernel", "LigerDyT(C, beta=True, init_alpha=alpha)", _liger_dyt),
        Baseline("liger", "groupnorm", _LIGER, "liger-kernel", "LigerGroupNorm(C, G, eps=eps)", _liger_groupnorm,
                 layouts=("images",)),
        Baseline("quack", "rmsnorm", "quack", "quack-kernels", "quack.rmsnorm(x2d, weight.float(), eps=eps)",
                 _quack_rmsnorm),
        Baseline("quack", "layernorm", "quack.layernorm", "quack-kernels",
                 "quack.layernorm.layernorm(x2d, weight.float(), eps)", _quack_layernorm,
                 notes="no bias term in quack's layernorm (the eager bias is zero at init; its gradient is not "
                       "computed)"),
        Baseline("te", "rmsnorm", "transformer_engine.pytorch", "transformer-engine",
                 "transformer_engine.pytorch.RMSNorm(C, eps=eps)", _te("rmsnorm")),
        Baseline("te", "layernorm", "transformer_engine.pytorch", "transformer-engine",
                 "transformer_engine.pytorch.LayerNorm(C, eps=eps)", _te("layernorm")),
        Baseline("flashinfer", "rmsnorm", "flashinfer.norm", "flashinfer-python",
                 "flashinfer.norm.rmsnorm(x2d, weight, eps) under no_grad", _flashinfer_rmsnorm,
                 notes="inference kernel: forward only", dtypes=("bfloat16", "float16"), forward_only=True),
        Baseline("flashinfer", "add_rmsnorm", "flashinfer.norm", "flashinfer-python",
                 "flashinfer.norm.fused_add_rmsnorm(x2d, r2d, weight, eps) under no_grad", _flashinfer_add_rmsnorm,
                 inplace_inputs=True, forward_only=True, dtypes=("bfloat16", "float16"),
                 notes="in place on x and residual; inputs restored untimed between repetitions; forward only"),
        Baseline("apex", "layernorm", "apex.normalization", "apex", "apex.normalization.FusedLayerNorm(C, eps=eps)",
                 _apex("layernorm")),
        Baseline("apex", "rmsnorm", "apex.normalization", "apex", "apex.normalization.FusedRMSNorm(C, eps=eps)",
                 _apex("rmsnorm")),
    )
}
BASELINES = tuple(dict.fromkeys(b for b, _ in REGISTRY))
#: norm -> baselines that implement it
SUPPORTED: dict[str, tuple[str, ...]] = {}
for _b, _n in REGISTRY:
    SUPPORTED[_n] = SUPPORTED.get(_n, ()) + (_b,)


def backends_for(norm: str) -> tuple[str, ...]:
    return SUPPORTED.get(norm, ())


def get(backend: str, norm: str) -> Baseline:
    try:
        return REGISTRY[(backend, norm)]
    except KeyError:
        raise KeyError(f"{backend} has no implementation of {norm}; baselines: "
                       f"{', '.join(f'{b}/{n}' for b, n in REGISTRY)}") from None


def layouts(backend: str, norm: str) -> tuple[str, ...]:
    return get(backend, norm).layouts


def unavailable(backend: str, norm: str, layout: str, device: str, dtype: str | None = None) -> str | None:
    """``None`` if ``backend`` can run ``norm`` here, else the reason."""
    if (backend, norm) not in REGISTRY:
        return f"{backend} has no implementation of {norm}"
    b = REGISTRY[(backend, norm)]
    if dtype is not None and dtype not in b.dtypes:
        return f"{backend}'s {norm} supports {', '.join(b.dtypes)}, not {dtype}"
    return b.unavailable(layout, device)


def build(backend: str, norm: str, eager: nn.Module) -> nn.Module:
    """The baseline module for ``norm``, sharing ``eager``'s parameters."""
    return get(backend, norm).build(eager)


def _register(extra) -> None:
    """Entries kept in their own modules (the softmax baselines) join the registry."""
    for b in extra:
        REGISTRY[(b.backend, b.norm)] = b
        SUPPORTED[b.norm] = SUPPORTED.get(b.norm, ()) + (b.backend,)


from normbench.measure.softmax_baselines import entries as _softmax_entries  # noqa: E402

_register(_softmax_entries())
BASELINES = tuple(dict.fromkeys(b for b, _ in REGISTRY))
