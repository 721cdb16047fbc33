"""The Triton backends of softmax and log-softmax (``triton_three_pass``, ``triton_online``, ``triton_two_pass``).

``build_<algo>(eager, spec)`` returns a module running ``normbench.kernels._softmax`` with that forward algorithm;
the backward is the same for all three. Importing this module never imports Triton (see ``triton_backend``).
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from normbench.kernels._env import _once, unavailable  # noqa: F401  (unavailable: the probe)
from normbench.kernels._softmax_module import AlgorithmSoftmax

_K: list = []


def _k():
    """The kernel module, imported on first use (importing this module never imports Triton) and kept."""
    if not _K:
        _K.append(importlib.import_module("normbench.kernels._softmax"))
    return _K[0]


class _SoftmaxFn(torch.autograd.Function):
    # The kernel module checks the input (device, dtype) when it first plans a launch for its shape, dtype and
    # device, and launches through the launcher (on the tensor's device): no per-call check or guard here. The
    # settings (algo, log, limit, block) come as one tuple: autograd's apply costs per argument.
    @staticmethod
    def forward(ctx, x, cfg):
        algo, log, limit, block = cfg
        y = (_K[0] if _K else _k()).forward(x.contiguous(), algo, log, limit, block)
        ctx.save_for_backward(y)
        ctx.cfg = cfg
        return y

    @staticmethod
    @_once
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        _, log, limit, block = ctx.cfg
        return _K[0].backward(y, dy.contiguous(), log, limit=limit, block=block), None


def softmax(x, algo: str = "online", log: bool = False, *, limit: int | None = None, block: int | None = None):
    """Softmax (``log``: log-softmax) over the last axis with the forward ``algo`` (three_pass, online or two_pass).

    ``limit`` (widest row held on chip) and ``block`` (chunk of the looped kernels) are for tests.
    """
    if algo not in ("three_pass", "online", "two_pass"):
        raise ValueError(f"algo must be three_pass, online or two_pass, got {algo!r}")
    return _SoftmaxFn.apply(x, (algo, bool(log), limit, block))


class TritonSoftmax(AlgorithmSoftmax):
    """Softmax or log-softmax over ``[..., C]`` by the Triton kernels with one forward algorithm."""

    def _run(self, x):
        # the module's algo is one of the builders' (no per-call check, unlike ``softmax()``)
        return _SoftmaxFn.apply(x, (self.algo, bool(self.log), None, None))

    def row_passes(self, pass_: str) -> int:
        """Reads of each row for ``pass_`` (fwd, bwd or fwd+bwd) at this width."""
        k = _k()
        fwd = k.row_passes(self.algo, self.num_features)
        bwd = k.row_passes(self.algo, self.num_features, backward=True)
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[pass_]


def build_three_pass(eager: nn.Module, spec=None) -> nn.Module:
    """Three-pass forward (max; Σ exp; normalize) for rows that do not fit on chip."""
    return TritonSoftmax(eager, "three_pass")


def build_online(eager: nn.Module, spec=None) -> nn.Module:
    """Online two-pass forward (running max and rescaled sum; normalize)."""
    return TritonSoftmax(eager, "online")


def build_two_pass(eager: nn.Module, spec=None) -> nn.Module:
    """Dukhan & Ablavatski's two-pass forward (extended-range sum, no max pass; normalize)."""
    return TritonSoftmax(eager, "two_pass")
