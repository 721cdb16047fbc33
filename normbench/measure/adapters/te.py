"""``te`` (Transformer Engine): ``transformer_engine.pytorch.RMSNorm(C, eps=eps)`` / ``LayerNorm(C, eps=eps)``."""

from __future__ import annotations

from normbench.measure.adapters._base import _Adapter, _eps, _share


def build(kind: str):
    def build(eager):
        import transformer_engine.pytorch as te

        cls = te.RMSNorm if kind == "rmsnorm" else te.LayerNorm
        lib = cls(eager.num_features, eps=_eps(eager))
        _share(lib, eager, {"weight": "weight"} if kind == "rmsnorm" else {"weight": "weight", "bias": "bias"})
        return _Adapter(eager, lambda m, x: m.library(x), lib)
    return build
