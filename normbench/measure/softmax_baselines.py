"""External softmax baselines: Liger-Kernel's ``LigerSoftmax`` and quack's ``softmax``, as backends of ``softmax``.

Entries of ``normbench.measure.baselines.REGISTRY`` (which imports them), so the core treats them like every other
baseline: skipped with the reason where the library does not import or there is no CUDA device; name, version and
call in the record. Both are called as their users call them: ``LigerSoftmax()(x)``
(``liger_kernel.transformers.softmax``; the last axis of any shape) and ``quack.softmax.softmax(x)`` (a 2-D
``(M, N)`` CUDA tensor: rows are viewed as ``(-1, C)`` and the output viewed back, free for a contiguous input).
Neither library has a log-softmax; Liger's cross-entropy returns a loss, not log-probabilities, so it is no
``log_softmax`` backend (docs/softmax.md).
"""

from __future__ import annotations

import importlib


def _liger_softmax(eager):
    from normbench.measure.baselines import _Adapter

    lib = importlib.import_module("liger_kernel.transformers.softmax").LigerSoftmax()
    return _Adapter(eager, lambda m, x: m.library(x), lib)


def _quack_softmax(eager):
    from normbench.measure.baselines import _Adapter

    softmax = importlib.import_module("quack.softmax").softmax
    return _Adapter(eager, lambda m, x: softmax(x.contiguous().view(-1, x.shape[-1])).view(x.shape))


def entries():
    """The softmax ``Baseline`` entries (built on demand: ``baselines`` imports this module while it loads)."""
    from normbench.measure.baselines import Baseline

    return (
        Baseline("liger", "softmax", "liger_kernel.transformers.softmax", "liger-kernel", "LigerSoftmax()(x)",
                 _liger_softmax),
        Baseline("quack", "softmax", "quack.softmax", "quack-kernels", "quack.softmax.softmax(x2d)",
                 _quack_softmax),
    )
