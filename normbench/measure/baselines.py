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
* softmax: ``LigerSoftmax()(x)`` (``liger_kernel.transformers.softmax``, the last axis of any shape) and
  ``quack.softmax.softmax(x2d)`` (a 2-D CUDA tensor: rows viewed as ``(-1, C)``, the output viewed back).

The adapters live in ``normbench.measure.adapters``, one module per library, so a baseline's implementation hash
(:func:`impl_hash` below, which every record's ``impl_hash`` comes from) covers its own adapter and not the other
libraries'.

Every adapter shares the eager module's parameters (so gradients and errors are comparable) and never changes what
the library computes. Two choices are about the harness, not the kernel: Liger's RMSNorm backward defaults to
writing dx into the upstream gradient's storage (``in_place=True``), which would corrupt the gradient the error check
reuses, so it is built with ``in_place=False`` (the same kernel writing into a fresh buffer); FlashInfer's
``fused_add_rmsnorm`` overwrites its inputs, so the core restores them untimed before each repetition and times
it forward only (it has no backward). The library's name and version go in the record (``config.baseline_version``
and ``provenance.baseline``), so a new release is a new measurement.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from normbench.measure.adapters import apex, flashinfer, liger, native, quack, te
from normbench.measure.adapters._base import _Adapter, _share  # noqa: F401  (the adapters' shared base)


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

    def sources(self) -> tuple[str, ...]:
        """The modules whose source makes this baseline's numbers: the adapters' shared base and its own adapter."""
        return ("normbench.measure.adapters._base", self.build.__module__)

    def declared(self) -> str:
        """What the core reads from this entry to run it (how it is called, layouts, dtypes, in place, forward only);
        part of the implementation hash. ``notes`` are prose and left out."""
        return (f"{self.backend} {self.norm} module={self.module} dist={self.dist} call={self.call} "
                f"layouts={','.join(self.layouts)} cuda={self.requires_cuda} inplace={self.inplace_inputs} "
                f"forward_only={self.forward_only} dtypes={','.join(self.dtypes)}")

    @property
    def devices(self) -> tuple[str, ...]:
        """The device kinds it runs on, where the check gate compares it with eager: CUDA for a GPU library, every
        kind for a CPU-capable one. Read from ``requires_cuda`` here, outside the adapters and ``declared()``, so
        that the hash of no committed record changes for it."""
        from normbench.registry import DEVICE_KINDS

        return ("cuda",) if self.requires_cuda else DEVICE_KINDS

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


_LIGER = "liger_kernel.transformers"
REGISTRY: dict[tuple[str, str], Baseline] = {
    (b.backend, b.norm): b for b in (
        Baseline("native", "rmsnorm", "torch", "torch", "torch.nn.functional.rms_norm(x, (C,), weight, eps)",
                 native.rmsnorm, requires_cuda=False),
        Baseline("liger", "rmsnorm", _LIGER, "liger-kernel", "LigerRMSNorm(C, eps=eps, in_place=False)",
                 liger.rmsnorm, notes="in_place=False: the default in-place backward would overwrite the "
                                       "upstream gradient the error check reuses; same kernel, fresh dx buffer"),
        Baseline("liger", "layernorm", _LIGER, "liger-kernel", "LigerLayerNorm(C, eps=eps)", liger.layernorm),
        Baseline("liger", "add_rmsnorm", _LIGER, "liger-kernel", "LigerFusedAddRMSNorm(C, eps=eps, in_place=False)",
                 liger.add_rmsnorm),
        Baseline("liger", "dyt", _LIGER, "liger-kernel", "LigerDyT(C, beta=True, init_alpha=alpha)", liger.dyt),
        Baseline("liger", "groupnorm", _LIGER, "liger-kernel", "LigerGroupNorm(C, G, eps=eps)", liger.groupnorm,
                 layouts=("images",)),
        Baseline("quack", "rmsnorm", "quack", "quack-kernels", "quack.rmsnorm(x2d, weight.float(), eps=eps)",
                 quack.rmsnorm),
        Baseline("quack", "layernorm", "quack.layernorm", "quack-kernels",
                 "quack.layernorm.layernorm(x2d, weight.float(), eps)", quack.layernorm,
                 notes="no bias term in quack's layernorm (the eager bias is zero at init; its gradient is not "
                       "computed)"),
        Baseline("te", "rmsnorm", "transformer_engine.pytorch", "transformer-engine",
                 "transformer_engine.pytorch.RMSNorm(C, eps=eps)", te.build("rmsnorm")),
        Baseline("te", "layernorm", "transformer_engine.pytorch", "transformer-engine",
                 "transformer_engine.pytorch.LayerNorm(C, eps=eps)", te.build("layernorm")),
        Baseline("flashinfer", "rmsnorm", "flashinfer.norm", "flashinfer-python",
                 "flashinfer.norm.rmsnorm(x2d, weight, eps) under no_grad", flashinfer.rmsnorm,
                 notes="inference kernel: forward only", dtypes=("bfloat16", "float16"), forward_only=True),
        Baseline("flashinfer", "add_rmsnorm", "flashinfer.norm", "flashinfer-python",
                 "flashinfer.norm.fused_add_rmsnorm(x2d, r2d, weight, eps) under no_grad", flashinfer.add_rmsnorm,
                 inplace_inputs=True, forward_only=True, dtypes=("bfloat16", "float16"),
                 notes="in place on x and residual; inputs restored untimed between repetitions; forward only"),
        Baseline("apex", "layernorm", "apex.normalization", "apex", "apex.normalization.FusedLayerNorm(C, eps=eps)",
                 apex.build("layernorm")),
        Baseline("apex", "rmsnorm", "apex.normalization", "apex", "apex.normalization.FusedRMSNorm(C, eps=eps)",
                 apex.build("rmsnorm")),
        # Softmax: neither library has a log-softmax; Liger's cross-entropy returns a loss, not log-probabilities,
        # so it is no ``log_softmax`` backend (docs/softmax.md).
        Baseline("liger", "softmax", "liger_kernel.transformers.softmax", "liger-kernel", "LigerSoftmax()(x)",
                 liger.softmax),
        Baseline("quack", "softmax", "quack.softmax", "quack-kernels", "quack.softmax.softmax(x2d)", quack.softmax),
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


# --- the check gate ----------------------------------------------------------------------------------------------

#: The provider the commands give the check gate (``normbench.check``) so it checks the baselines too.
GATE = "normbench.measure.baselines:gate_candidates"


def gate_candidates(spec) -> list:
    """The baselines of ``spec`` as the check gate checks them (``normbench.check.Candidate``): against eager on each
    device kind they run on, in float32 (bfloat16 for a library without it), outputs only when forward-only."""
    from normbench.check import Candidate

    out = []
    for (backend, norm), b in REGISTRY.items():
        if norm != spec.name:
            continue
        out.append(Candidate(
            backend, b.devices, lambda backend=backend: impl_hash(spec, backend), b.build,
            lambda layout, device, b=b: b.unavailable(layout, device), layouts=b.layouts,
            dtype=torch.float32 if "float32" in b.dtypes else torch.bfloat16, forward_only=b.forward_only,
            inplace_inputs=b.inplace_inputs))
    return out


# --- implementation hashing -------------------------------------------------------------------------------------------

def impl_hash(spec, backend: str, cache: dict | None = None, libraries: dict | None = None) -> str:
    """The implementation hash of ``spec`` run by ``backend`` (``NormSpec.impl_hash``); for an external baseline
    (Liger, quack, TE, FlashInfer, Apex, native) the eager norm's hash (its sources, torch and Triton versions)
    combined with the baseline's adapter sources (the adapters' shared base and its library's adapter module), what
    its registry entry tells the core, and the library's version.

    ``libraries`` (``{"torch": ..., "triton": ..., "baseline": ...}``, from a record) replaces this process's
    versions: the hash today's code would have had where the record was made (``results.staleness.stale_reason``)."""
    key = (spec.name, spec.package, spec.package_version, backend, repr(sorted((libraries or {}).items())))
    if cache is not None and key in cache:
        return cache[key]
    if backend in spec.backends:
        h = spec.impl_hash(backend, libraries)
    else:
        from normbench.registry import source_lines

        b = REGISTRY.get((backend, spec.name))
        lines = [f"eager {spec.impl_hash('eager', libraries)}", f"baseline {backend}"]
        if b is not None:
            lines += [b.declared(), *source_lines(b.sources())]
            pkg, version = b.dist, (libraries["baseline"] if libraries and "baseline" in libraries else b.version())
        else:
            pkg, version = backend, _version(backend)
        lines.append(f"{pkg}={version}")
        h = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    if cache is not None:
        cache[key] = h
    return h

