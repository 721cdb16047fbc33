"""Norms with statistics over channel groups of each image: GroupNorm, InstanceNorm, EvoNorm-S0 and EvoNorm-B0.

All four take images ``[N, C, H, W]`` only. Statistics are computed in float32 (or float64 for float64 inputs) and
the output is cast back to the input dtype, so bfloat16 and float16 inputs keep accurate statistics.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ._base import check_input, check_layout

MAX_GROUPS = 32


def default_num_groups(num_features: int, max_groups: int = MAX_GROUPS, min_group_size: int = 1) -> int:
    """The largest divisor G of C with G ≤ ``max_groups`` and C/G ≥ ``min_group_size`` (1 if none).

    Wu & He use G = 32; channel counts that 32 does not divide (or that are below 32) get the nearest
    group count that does divide them, e.g. C=48 → 24, C=20 → 20, C=96 → 32.
    """
    if num_features < 1:
        raise ValueError(f"num_features must be >= 1, got {num_features}")
    best = 1
    for g in range(1, min(num_features, max_groups) + 1):
        if num_features % g == 0 and num_features // g >= min_group_size:
            best = g
    return best


def check_num_groups(num_features: int, num_groups: int | None, **default_kw) -> int:
    if num_groups is None:
        return default_num_groups(num_features, **default_kw)
    num_groups = int(num_groups)
    if num_groups < 1 or num_features % num_groups:
        raise ValueError(f"num_groups={num_groups} must be a positive divisor of num_features={num_features}; "
                         f"leave it unset to use {default_num_groups(num_features, **default_kw)}")
    return num_groups


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """Statistics dtype: float32 for 16-bit inputs, the input's own dtype otherwise."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _c(p: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return p.to(dtype).view(1, -1, 1, 1)


class _ImageNorm(nn.Module):
    """Base: images only, per-channel γ (init 1) and β (init 0)."""

    def __init__(self, num_features: int, layout: str = "images", eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.layout = check_layout(layout, ("images",))
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def _affine(self, y: torch.Tensor) -> torch.Tensor:
        return y * _c(self.weight, y.dtype) + _c(self.bias, y.dtype)

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}, eps={self.eps}"


class GroupNorm(_ImageNorm):
    """Wu & He 2018: per sample and group g, y = γ·(x − μ_g)/√(σ_g² + ε) + β over (C/G, H, W).

    μ_g, σ_g² (biased) are taken over the C/G channels of group g and all pixels of one sample.
    G defaults to 32 as in the paper; when 32 does not divide C, G is the largest divisor of C that is ≤ 32
    (see ``default_num_groups``). Pass ``num_groups`` to choose G; it must divide C.
    Batch-independent. A group holding a single value (C/G·H·W = 1) raises ``ValueError``: its output would be β
    whatever the input.
    """

    def __init__(self, num_features: int, layout: str = "images", num_groups: int | None = None, eps: float = 1e-5):
        super().__init__(num_features, layout, eps)
        self.num_groups = check_num_groups(num_features, num_groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "GroupNorm")
        if (self.num_features // self.num_groups) * x.shape[2] * x.shape[3] < 2:
            raise ValueError(f"GroupNorm with {self.num_groups} groups needs more than one value per group, got input "
                             f"{tuple(x.shape)}; use fewer groups or a larger spatial size")
        dt = compute_dtype(x)
        y = F.group_norm(x.to(dt), self.num_groups, self.weight.to(dt), self.bias.to(dt), self.eps)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", num_groups={self.num_groups}"


class InstanceNorm(_ImageNorm):
    """Ulyanov et al. 2016: per (n, c), y = γ·(x − μ)/√(σ² + ε) + β with μ, σ² (biased) over (H, W).

    Learned per-channel γ, β; no running statistics (train and eval are the same function).
    An image with a single pixel (H·W = 1) raises ``ValueError``, as torch's InstanceNorm does in training.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "InstanceNorm")
        if x.shape[2] * x.shape[3] < 2:
            raise ValueError(f"InstanceNorm needs more than one pixel per channel, got input {tuple(x.shape)}")
        dt = compute_dtype(x)
        y = F.instance_norm(x.to(dt), weight=self.weight.to(dt), bias=self.bias.to(dt), use_input_stats=True,
                            eps=self.eps)
        return y.to(x.dtype)


class EvoNormS0(_ImageNorm):
    """Liu et al. 2020, EvoNorm-S0: y = x·sigmoid(v·x) / √(s²_g + ε) · γ + β.

    A normalization-activation layer (``norm_act = True``): it replaces a norm *and* the activation after it.
    Where a network has a norm without an activation (the last norm of a residual branch, the shortcut's norm),
    the authors' code uses ``apply_act=False``: only the affine γ·x + β, without v and without normalizing
    (``evonorm(..., nonlinearity=False)`` in tensorflow/tpu models/official/resnet/resnet_model.py; timm's
    ``EvoNorm2dS0(apply_act=False)`` is the same).

    s²_g is the biased variance of x over (C/G, H, W) of group g of one sample (no centring of the numerator).
    v (per channel) is initialised to 1, γ to 1, β to 0; ε = 1e-5 and G = 32 (the largest divisor of C ≤ 32 when
    32 does not divide C), following the authors' TensorFlow code and timm's ``EvoNorm2dS0``.
    Batch-independent; works at any batch size. A group holding one value gives s² = 0 (no error).
    """

    norm_act = True

    def __init__(self, num_features: int, layout: str = "images", num_groups: int | None = None, eps: float = 1e-5,
                 apply_act: bool = True):
        super().__init__(num_features, layout, eps)
        self.num_groups = check_num_groups(num_features, num_groups)
        self.apply_act = bool(apply_act)
        self.v = nn.Parameter(torch.ones(num_features)) if self.apply_act else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "EvoNormS0")
        if not self.apply_act:
            return self._affine(x.to(compute_dtype(x))).to(x.dtype)
        n, c, h, w = x.shape
        xf = x.to(compute_dtype(x))
        xg = xf.reshape(n, self.num_groups, -1)
        std = (xg.var(dim=2, unbiased=False, keepdim=True) + self.eps).sqrt()
        num = xf * torch.sigmoid(_c(self.v, xf.dtype) * xf)
        y = (num.reshape(n, self.num_groups, -1) / std).reshape(n, c, h, w)
        return self._affine(y).to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", num_groups={self.num_groups}, apply_act={self.apply_act}"


class EvoNormB0(_ImageNorm):
    """Liu et al. 2020, EvoNorm-B0: y = x / max(√(s²_B + ε), v·x + √(s²_I + ε)) · γ + β.

    s²_B: biased variance over (N, H, W) per channel in training (gradients flow through it); in eval the running
    variance, updated in training as r ← (1 − m)·r + m·s²_B with m = 0.1 (initial r = 1).
    s²_I: biased variance over (H, W) per sample and channel. v initialised to 1, γ to 1, β to 0, ε = 1e-5.
    The running variance is the biased s²_B, as in the authors' TensorFlow code (timm's port rescales it by
    n/(n−1) and uses ε = 1e-3). Batch size 1 works in training when H·W > 1; with a single value per channel
    (N·H·W = 1) training raises ``ValueError``, like torch's BatchNorm.
    A normalization-activation layer like EvoNorm-S0; ``apply_act=False`` is the affine γ·x + β only (see there).
    """

    norm_act = True

    def __init__(self, num_features: int, layout: str = "images", eps: float = 1e-5, momentum: float = 0.1,
                 apply_act: bool = True):
        super().__init__(num_features, layout, eps)
        self.momentum = momentum
        self.apply_act = bool(apply_act)
        self.v = nn.Parameter(torch.ones(num_features)) if self.apply_act else None
        if self.apply_act:
            self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_input(x, self.num_features, self.layout, "EvoNormB0")
        if not self.apply_act:
            return self._affine(x.to(compute_dtype(x))).to(x.dtype)
        xf = x.to(compute_dtype(x))
        if self.training:
            if x.numel() // self.num_features < 2:
                raise ValueError(f"EvoNormB0 needs more than one value per channel in training, got input "
                                 f"{tuple(x.shape)}; use a larger batch or image, or eval mode")
            batch_var = xf.var(dim=(0, 2, 3), unbiased=False)
            with torch.no_grad():
                self.running_var.copy_(self.running_var + self.momentum * (batch_var - self.running_var))
        else:
            batch_var = self.running_var.to(xf.dtype)
        left = (batch_var + self.eps).sqrt().view(1, -1, 1, 1)
        inst_std = (xf.var(dim=(2, 3), unbiased=False, keepdim=True) + self.eps).sqrt()
        right = _c(self.v, xf.dtype) * xf + inst_std
        return self._affine(xf / torch.maximum(left, right)).to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", momentum={self.momentum}, apply_act={self.apply_act}"
