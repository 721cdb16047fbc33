"""``liger`` (``liger_kernel.transformers``): LigerLayerNorm, LigerRMSNorm(in_place=False),
LigerFusedAddRMSNorm(in_place=False), LigerDyT, LigerGroupNorm and LigerSoftmax, as their users call them."""

from __future__ import annotations

import importlib

from normbench.measure.adapters._base import _Adapter, _eps, _share


def rmsnorm(eager):
    from liger_kernel.transformers import LigerRMSNorm

    lib = LigerRMSNorm(eager.num_features, eps=_eps(eager), in_place=False)
    _share(lib, eager, {"weight": "weight"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def layernorm(eager):
    from liger_kernel.transformers import LigerLayerNorm

    lib = _share(LigerLayerNorm(eager.num_features, eps=_eps(eager)), eager, {"weight": "weight", "bias": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def add_rmsnorm(eager):
    from liger_kernel.transformers import LigerFusedAddRMSNorm

    lib = _share(LigerFusedAddRMSNorm(eager.num_features, eps=_eps(eager), in_place=False), eager,
                 {"weight": "weight"})
    return _Adapter(eager, lambda m, x, r: m.library(x, r), lib)


def dyt(eager):
    from liger_kernel.transformers import LigerDyT

    lib = _share(LigerDyT(eager.num_features, beta=True, init_alpha=float(eager.alpha.detach())), eager,
                 {"alpha": "alpha", "gamma": "weight", "beta": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def groupnorm(eager):
    from liger_kernel.transformers import LigerGroupNorm

    lib = _share(LigerGroupNorm(eager.num_features, eager.num_groups, eps=_eps(eager)), eager,
                 {"weight": "weight", "bias": "bias"})
    return _Adapter(eager, lambda m, x: m.library(x), lib)




def softmax(eager):
    lib = importlib.import_module("liger_kernel.transformers.softmax").LigerSoftmax()
    return _Adapter(eager, lambda m, x: m.library(x), lib)
