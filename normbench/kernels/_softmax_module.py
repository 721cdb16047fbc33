"""The module shape every algorithm backend of softmax/log-softmax shares (compiled formulations, Triton kernels)."""

from __future__ import annotations

from torch import nn

from normbench.norms._base import check_input


class AlgorithmSoftmax(nn.Module):
    """Softmax or log-softmax over ``[..., C]`` by one forward ``algo``, with the eager module's width and ``log``.

    Subclasses implement ``_run(x)`` (the algorithm on a checked input) and ``row_passes(pass_)`` (reads of each row
    for fwd, bwd or fwd+bwd).
    """

    def __init__(self, eager: nn.Module, algo: str):
        super().__init__()
        self.num_features, self.layout, self.log, self.algo = eager.num_features, eager.layout, eager.log, algo
        self.train(eager.training)

    def forward(self, x):
        check_input(x, self.num_features, "tokens", "Softmax")
        return self._run(x)

    def _run(self, x):
        raise NotImplementedError

    def row_passes(self, pass_: str) -> int:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"{self.num_features}, algo={self.algo}, log={self.log}"
