"""``quack``: ``quack.rmsnorm``, ``quack.layernorm.layernorm`` and ``quack.softmax.softmax`` over the input viewed
as ``(-1, C)`` (its kernels take 2-D inputs), with a float32 weight."""

from __future__ import annotations

import importlib

from normbench.measure.adapters._base import _Adapter


def _rows(fn):
    """Call ``fn`` on the input viewed as ``(-1, C)`` (quack's kernels take 2-D inputs) and view the result back."""
    def call(m, x):
        y = fn(m, x.reshape(-1, x.shape[-1]))
        return y.view(x.shape)
    return call


def rmsnorm(eager):
    import quack

    # quack keeps its weights in float32 (its kernels require it for some dtypes); the values are the eager ones.
    return _Adapter(eager, _rows(lambda m, x: quack.rmsnorm(x, m.weight.float(), eps=m.eps)))


def layernorm(eager):
    from quack.layernorm import layernorm

    # quack's layernorm has no bias: the eager bias (zeros at init) is left out, and with it its gradient.
    return _Adapter(eager, _rows(lambda m, x: layernorm(x, m.weight.float(), m.eps)))




def softmax(eager):
    softmax = importlib.import_module("quack.softmax").softmax
    return _Adapter(eager, lambda m, x: softmax(x.contiguous().view(-1, x.shape[-1])).view(x.shape))
