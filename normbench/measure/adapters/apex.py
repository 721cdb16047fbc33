"""``apex``: ``apex.normalization.FusedLayerNorm(C, eps=eps)`` / ``FusedRMSNorm(C, eps=eps)``."""

from __future__ import annotations

from normbench.measure.adapters._base import _Adapter, _eps, _share


def build(kind: str):
    def build(eager):
        from apex.normalization import FusedLayerNorm, FusedRMSNorm

        if kind == "rmsnorm":
            lib = _share(FusedRMSNorm(eager.num_features, eps=_eps(eager)), eager, {"weight": "weight"})
        else:
            lib = _share(FusedLayerNorm(eager.num_features, eps=_eps(eager)), eager,
                         {"weight": "weight", "bias": "bias"})
        return _Adapter(eager, lambda m, x: m.library(x), lib)
    return build
