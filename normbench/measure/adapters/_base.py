"""What every baseline adapter shares: a module holding the eager norm's parameters that calls the library."""

from __future__ import annotations

from typing import Callable

from torch import nn


class _Adapter(nn.Module):
    """Shares the eager module's parameters (same names, same tensors) and calls the library in ``forward``."""

    def __init__(self, eager: nn.Module, call: Callable, library: nn.Module | None = None):
        super().__init__()
        from normbench.registry import adopt_state

        adopt_state(self, eager)
        self.num_features = eager.num_features
        self.eps = float(getattr(eager, "eps", 1e-5))
        object.__setattr__(self, "_call", call)
        # Outside _modules, so the state_dict keys stay exactly the eager module's; its parameters are the eager
        # ones (shared), so .to() reaches them through this module.
        object.__setattr__(self, "library", library)

    def forward(self, *args):
        return self._call(self, *args)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.library is not None:
            self.library.train(mode)
        return self


def _share(library: nn.Module, eager: nn.Module, names: dict[str, str]) -> nn.Module:
    """Point ``library``'s parameters (``names``: library name -> eager name) at the eager module's tensors."""
    for lib_name, eager_name in names.items():
        setattr(library, lib_name, getattr(eager, eager_name))
    return library


def _eps(eager, default=1e-5) -> float:
    return float(getattr(eager, "eps", default))
