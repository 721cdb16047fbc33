"""normbench: benchmarks and a leaderboard for neural-network normalization layers."""

from __future__ import annotations

from normbench.discovery import get_norm, list_norms, plugin_errors
from normbench.registry import ENTRY_POINT_GROUP, Backend, BackendUnavailable, NormSpec, Paper
from normbench.versions import __version__

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendUnavailable",
    "NormSpec",
    "Paper",
    "get_norm",
    "list_norms",
    "plugin_errors",
    "results",
    "__version__",
    "apply_policy",
    "restore",
]


def __getattr__(name):
    # Subpackages load on first use so `import normbench` stays light.
    if name in ("results", "measure", "kernels", "tasks", "models", "train", "site"):
        import importlib

        return importlib.import_module(f"normbench.{name}")
    if name in ("apply_policy", "restore"):  # above the readers in the layers: loaded on first use too
        import importlib

        return getattr(importlib.import_module("normbench.policy"), name)
    raise AttributeError(f"module 'normbench' has no attribute {name!r}")
