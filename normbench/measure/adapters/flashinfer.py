"""``flashinfer``: ``flashinfer.norm.rmsnorm`` and ``fused_add_rmsnorm`` (in place, forward only, no autograd)."""

from __future__ import annotations

import torch

from normbench.measure.adapters._base import _Adapter


def rmsnorm(eager):
    from flashinfer.norm import rmsnorm

    def call(m, x):
        with torch.no_grad():  # an inference kernel: no autograd
            return rmsnorm(x.reshape(-1, x.shape[-1]), m.weight, m.eps).view(x.shape)

    return _Adapter(eager, call)


def add_rmsnorm(eager):
    from flashinfer.norm import fused_add_rmsnorm

    def call(m, x, r):
        # In place: r <- x + r, x <- rmsnorm(r) * weight. The core hands it inputs it restores between calls.
        with torch.no_grad():
            x2, r2 = x.view(-1, x.shape[-1]), r.view(-1, r.shape[-1])
            fused_add_rmsnorm(x2, r2, m.weight, m.eps)
        return x, r

    return _Adapter(eager, call)
