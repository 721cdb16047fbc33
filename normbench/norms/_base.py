"""Shared helpers for the built-in norms: layout handling and the reduction axis."""

from __future__ import annotations

import torch

LAYOUTS = ("tokens", "images")


def check_layout(layout: str, allowed: tuple[str, ...] = LAYOUTS) -> str:
    if layout not in allowed:
        raise ValueError(f"layout must be one of {allowed}, got {layout!r}")
    return layout


def channel_dim(layout: str) -> int:
    """Index of the channel axis: last for tokens ``[..., C]``, 1 for images ``[N, C, H, W]``."""
    return -1 if layout == "tokens" else 1


def check_input(x: torch.Tensor, num_features: int, layout: str, name: str) -> None:
    if layout == "images":
        if x.dim() != 4 or x.shape[1] != num_features:
            raise ValueError(f"{name} expects images [N, {num_features}, H, W], got {tuple(x.shape)}")
    elif x.dim() < 1 or x.shape[-1] != num_features:
        raise ValueError(f"{name} expects tokens [..., {num_features}], got {tuple(x.shape)}")


def per_channel(p: torch.Tensor, layout: str) -> torch.Tensor:
    """View a ``[C]`` parameter so it broadcasts over the channel axis of ``layout``."""
    return p if layout == "tokens" else p.view(1, -1, 1, 1)


def upcast(x: torch.Tensor) -> torch.Tensor:
    """Compute statistics in at least float32: widen half types, keep float32/float64 as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
