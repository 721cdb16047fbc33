"""The modules a policy site calls besides a backend's own: the ``compile`` backend stepping aside inside an outer
``torch.compile`` (``_StepAside``) and Gemma's ``1 + weight`` (per call while autograd records: ``_OffsetCall``;
cached and refreshed on a weight change: ``_CachedOffset``; a pinned site's: ``_PinnedOffset``). Their owner is the
site (``dispatch.PolicyNorm``), read through its attributes: this module imports nothing of the policy's."""

from __future__ import annotations

import torch
from torch import nn


class _StepAside(nn.Module):
    """The ``compile`` backend as a policy runs it: its compiled module when called eagerly, the module it compiled
    when an outer ``torch.compile`` traces the model (a compile inside a compile fails: the outer one compiles it).
    A transformers site's compiled module is shared by every site of the same (norm, width, eps) (one compiled graph
    for all of a model's layers; Dynamo's recompile limit is per code object): its parameter slots are pointed at
    the caller's parameters on each call."""

    def __init__(self, compiled: nn.Module, inner: nn.Module, slots: dict, owner: nn.Module | None):
        super().__init__()
        self.__dict__.update(compiled=compiled, inner=inner, slots=slots, owner=owner)   # not registered children

    def forward(self, *args, **kwargs):
        owner = self.owner
        if owner is not None:
            for k, where in self.slots.items():
                p = owner._parameters[k]
                for m, name in where:
                    m._parameters[name] = p
        if torch.compiler.is_compiling():
            return self.inner(*args, **kwargs)
        return self.compiled(*args, **kwargs)


class _OffsetCall(nn.Module):
    """Gemma's ``1 + weight`` while autograd records: the scale computed in float32 (as transformers does) from the
    caller's weight for this call, in the backend's weight slots, and the backend's own placeholder put back after."""

    def __init__(self, module: nn.Module, slots: list, owner: nn.Module, point: bool = False):
        super().__init__()
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "point", point)

    def forward(self, *args, **kwargs):
        scale = 1.0 + self.owner._parameters["weight"].float()
        saved = [(m, k, m._parameters[k]) for m, k in self.slots]
        try:
            for m, k, _ in saved:
                m._parameters[k] = scale
            return self.module.forward(*args, **kwargs)
        finally:
            for m, k, p in saved:
                m._parameters[k] = p


class _CachedOffset(_OffsetCall):
    """Gemma's ``1 + weight`` without autograd: the scale computed once (float32) and held in the backend's weight
    slots, recomputed when the weight changes (its version counter); inside a compiled graph (where a version
    counter cannot be read) computed per call from the weight, as while autograd records."""

    def forward(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return super().forward(*args, **kwargs)
        owner = self.owner
        if owner._parameters["weight"]._version != owner._scale_ver:
            owner._refresh_scales()
        if self.point:   # a compiled module shared by several sites: this site's scale in its slots
            scale = owner._scale
            for m, k in self.slots:
                m._parameters[k] = scale
        return self.module.forward(*args, **kwargs)

    def inline_forward(self):
        """The backend's ``forward`` for policy/lean.py to call after its own checks (version; a pinned site's autograd
        state) where it writes this call out; None: run this module (a shared compiled module's slots are per call)."""
        return None if self.point else self.module.forward


class _PinnedOffset(_CachedOffset):
    """Gemma's ``1 + weight`` for a pinned site: the cached scale without autograd, the per-call scale (so the
    weight gets its gradient) when autograd records."""

    def forward(self, *args, **kwargs):
        owner = self.owner
        w = owner._parameters["weight"]
        if (torch.is_grad_enabled() and w.requires_grad) or torch.compiler.is_compiling():
            return _OffsetCall.forward(self, *args, **kwargs)
        if w._version != owner._scale_ver:
            owner._refresh_scales()
        if self.point:
            scale = owner._scale
            for m, k in self.slots:
                m._parameters[k] = scale
        return self.module.forward(*args, **kwargs)
