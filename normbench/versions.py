"""Versions: normbench's own and the installed libraries' that records, hashes and discovery name (no torch import)."""

from __future__ import annotations

from importlib import metadata

__version__ = "0.1.0"


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def triton_version() -> str | None:
    """The installed Triton's version: the ``triton`` distribution, or PyTorch's own builds of it."""
    return dist_version("triton") or dist_version("pytorch-triton") or dist_version("pytorch-triton-rocm")


def timm_version() -> str | None:
    """The installed timm's version (part of a timm model's code hash, ``models.model_hash``)."""
    return dist_version("timm")
