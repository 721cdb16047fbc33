"""Turn a registry ``NormSpec`` into what a model needs: a norm factory, a timm ``norm_layer``, wrapped weights.

How each kind of spec enters a model:

- ``activation``: built with ``spec.create(C, layout=...)`` wherever the model has a norm; a spec that needs
  the layer depth (``depth`` in ``spec.default_kwargs``, e.g. LayerNorm Scaling) gets the 1-based block index.
- ``residual`` (fused add + norm, ``module(x, r) -> (norm(x + r), x + r)``): trained as its base norm by calling
  the same module with a zero residual, so the registry's implementation is the one that runs.
- ``weight``: every Linear (transformers, except embeddings and the classifier/LM head) or Conv2d (ResNets)
  is wrapped with ``spec.create(C, layout, layer=existing)``, on top of the model's standard activation norm
  (``base_norm``, default LayerNorm in transformers and BatchNorm in the ResNet, as weight reparameterisations are
  used in their papers; ``base_norm="none"`` gives a run without activation norms, and ``nf_resnet`` is the
  dedicated normalization-free model).
- ``attention`` (QK-Norm): the GPT applies it to queries and keys; the activation norms are ``base_norm``
  (default LayerNorm).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

import normbench
from normbench.registry import NormSpec

NormFactory = Callable[..., nn.Module]  # (num_features, depth=None, **norm_kwargs) -> module


def resolve(norm) -> NormSpec:
    """A ``NormSpec`` from a spec or a registry name."""
    return norm if isinstance(norm, NormSpec) else normbench.get_norm(norm)


class ResidualAsNorm(nn.Module):
    """A fused add+norm module used as a plain norm: ``forward(x) = module(x, 0)[0]``."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.inner = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, torch.zeros_like(x))[0]


def activation_spec(spec: NormSpec, base_norm: str | NormSpec | None = None,
                    default: str = "layernorm") -> NormSpec:
    """The spec that fills the model's activation-norm slots when ``spec`` is the norm under test."""
    if spec.kind in ("activation", "residual"):
        return spec
    base = resolve(base_norm if base_norm is not None else default)
    if base.kind not in ("activation", "residual"):
        raise ValueError(f"base norm {base.name!r} is a {base.kind} norm; it must be an activation norm")
    return base


def norm_factory(spec: NormSpec, layout: str, backend: str = "eager") -> NormFactory:
    """``factory(C, depth=None, **kw) -> nn.Module`` building ``spec`` over C channels in ``layout`` with ``backend``.

    ``kw`` go to the norm's constructor (e.g. ``alpha_init`` for DyT/Derf in the LLM recipe).
    """
    if layout not in spec.layouts:
        raise ValueError(
            f"norm {spec.name!r} supports layouts {list(spec.layouts)}, but this model needs {layout!r}; "
            f"pick a model whose layout it supports (tokens: gpt, vit; images: resnet)")
    if spec.kind not in ("activation", "residual"):
        raise ValueError(f"norm {spec.name!r} is a {spec.kind} norm; use activation_spec() first")
    wants_depth = "depth" in dict(spec.default_kwargs)

    def factory(num_features: int, depth: int | None = None, **norm_kwargs) -> nn.Module:
        kwargs = {"depth": int(depth)} if (wants_depth and depth is not None) else {}
        kwargs.update(norm_kwargs)
        module = spec.create(int(num_features), layout=layout, backend=backend, **kwargs)
        return ResidualAsNorm(module) if spec.kind == "residual" else module

    factory.spec = spec
    factory.wants_depth = wants_depth
    return factory


def timm_norm_layer(factory: NormFactory) -> Callable[..., nn.Module]:
    """A function timm accepts as ``norm_layer``: called ``norm_layer(C, device=..., dtype=...)``."""

    def norm_layer(num_features, *args, device=None, dtype=None, **kwargs):
        module = factory(num_features)
        if device is not None or dtype is not None:
            module = module.to(device=device, dtype=dtype)
        return module

    return norm_layer


def wrap_weights(model: nn.Module, spec: NormSpec, layout: str, layer_type, skip: tuple[str, ...] = ()) -> int:
    """Replace every ``layer_type`` submodule (not under a name in ``skip``) by ``spec.create(C, layout, layer=it)``.

    Returns how many layers were wrapped.
    """
    if spec.kind != "weight":
        raise ValueError(f"norm {spec.name!r} is not a weight reparameterisation")
    if layout not in spec.layouts:
        raise ValueError(f"weight norm {spec.name!r} supports layouts {list(spec.layouts)}, not {layout!r}")
    targets = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is layer_type and not any(full == s or full.startswith(s + ".") for s in skip):
                targets.append((module, child_name, child))
    for parent, child_name, child in targets:
        c = child.out_features if isinstance(child, nn.Linear) else child.out_channels
        setattr(parent, child_name, spec.create(c, layout=layout, layer=child))
    return len(targets)
