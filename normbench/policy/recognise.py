"""Which modules of a model are norms a policy can drive: normbench's own and the transformers RMSNorms of the
catalog's families, each confirmed by running it once on a small probe before anything is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

#: transformers' RMSNorm classes of the catalog's families (their ``model_type`` in normbench.catalog.ARCHITECTURES):
#: class name -> scales by ``1 + weight`` (Gemma) instead of ``weight``. Each computes x / sqrt(mean(x^2) + eps),
#: in float32, times the weight; the probe below checks that before a module is replaced.
HF_RMSNORMS = {
    "LlamaRMSNorm": False, "MistralRMSNorm": False, "Qwen2RMSNorm": False, "Qwen3RMSNorm": False,
    "Qwen3MoeRMSNorm": False, "Olmo2RMSNorm": False, "DeepseekV3RMSNorm": False, "Gemma3RMSNorm": True,
}


@dataclass
class Found:
    """A norm module of a model that a policy can drive."""

    path: str                 # its qualified name in the model
    module: nn.Module
    norm: str                 # the zoo norm that computes it (rmsnorm, layernorm, add_rmsnorm, ...)
    layout: str
    width: int
    eps: float | None
    offset: bool = False      # Gemma: the scale is 1 + weight
    native: bool = False      # a normbench module: it is its own eager implementation
    cast_to_input: bool = False  # its output has the input's dtype (not the input's promoted with the weight's)

    @property
    def what(self) -> str:
        cls = type(self.module)
        return f"{cls.__module__.split('.')[0]} {cls.__name__}"


def _native_classes() -> dict[type, str]:
    """normbench module class -> norm name, for every registered norm whose factory is a class (its eager module)."""
    from normbench.discovery import REGISTRY
    from normbench.registry import resolve

    out: dict[type, str] = {}
    for name, spec in REGISTRY.specs.items():
        if spec.kind not in ("activation", "residual"):
            continue
        try:
            factory = resolve(spec.factory)
        except Exception:  # a plugin whose factory cannot import: nothing of it can be in the model
            continue
        if isinstance(factory, type) and issubclass(factory, nn.Module):
            out.setdefault(factory, name)
    return out


def _config_eps(config) -> float | None:
    if config is None:
        return None
    for key in ("rms_norm_eps",):
        v = getattr(config, key, None)
        if v is None and hasattr(config, "get_text_config"):
            v = getattr(config.get_text_config(), key, None)
        if v is not None:
            return float(v)
    return None


def _reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()


def probe(module: nn.Module, eps: float, offset: bool) -> str | None:
    """None when ``module`` computes RMSNorm with ``eps`` and scale ``weight`` (``1 + weight`` when ``offset``),
    else what differs. Run on float32 rows of ordinary size and of size near sqrt(eps) (where eps matters)."""
    w = module.weight.detach()
    g = torch.Generator().manual_seed(0)
    scale = (1.0 + w.double()) if offset else w.double()
    try:
        with torch.no_grad():
            for size in (1.0, eps ** 0.5):
                x = (torch.randn(2, 3, w.shape[0], generator=g) * size).to(w.device)
                y = module(x)
                ref = _reference(x, scale.to(w.device), eps)
                if not isinstance(y, torch.Tensor) or y.shape != x.shape:
                    return f"it returns {type(y).__name__} {tuple(getattr(y, 'shape', ()))} for input {tuple(x.shape)}"
                d = float((y.double() - ref).abs().max())
                tol = 1e-5 * (1 + float(ref.abs().max()))
                if not d <= tol:
                    form = "(1 + weight)" if offset else "weight"
                    return (f"its output differs from x / sqrt(mean(x^2) + {eps:g}) * {form} by {d:.3g} (rows of "
                            f"size {size:.3g}): not the RMSNorm it looks like")
    except Exception as exc:  # a module that cannot run on the probe is left as it is
        return f"it failed on a probe input: {type(exc).__name__}: {exc}"
    return None


def _cast_rule(module: nn.Module) -> bool:
    """Whether ``module`` returns its input's dtype when the weight is float32 and the input bfloat16 (Gemma 3,
    OLMo-2) rather than the promoted float32 (Llama's ``weight * x``)."""
    w = module.weight
    if w.dtype != torch.float32:
        return True  # both rules give the input's dtype whenever the weight is not wider than the input
    with torch.no_grad():
        y = module(torch.ones(1, w.shape[0], dtype=torch.bfloat16, device=w.device))
    return y.dtype == torch.bfloat16


def _hf(path: str, module: nn.Module, config) -> tuple[Found | None, str | None]:
    cls = type(module)
    offset = HF_RMSNORMS[cls.__name__]
    w = getattr(module, "weight", None)
    if not isinstance(w, torch.Tensor) or w.dim() != 1:
        return None, "it has no 1-d weight"
    eps = getattr(module, "variance_epsilon", None)
    if eps is None:
        eps = getattr(module, "eps", None)
    if eps is None:
        eps = _config_eps(config)
    if eps is None:
        return None, "neither the module nor the model's config (rms_norm_eps) gives its eps"
    why = probe(module, float(eps), offset)
    if why:
        return None, why
    return Found(path, module, "rmsnorm", "tokens", int(w.shape[0]), float(eps), offset=offset,
                 cast_to_input=_cast_rule(module)), None


def find(model: nn.Module) -> tuple[list[Found], list[dict]]:
    """The norm modules of ``model`` a policy can drive, and the norm-like ones it cannot (``{"module", "class",
    "reason"}``: a class whose name says Norm that normbench does not know, or one that failed its probe)."""
    native = _native_classes()
    config = getattr(model, "config", None)
    found, left = [], []
    for path, m in model.named_modules():
        if not path:
            continue
        cls = type(m)
        if cls in native:
            width = getattr(m, "num_features", None)
            layout = getattr(m, "layout", "tokens")
            if not isinstance(width, int):
                left.append({"module": path, "class": cls.__name__, "reason": "it has no num_features"})
                continue
            found.append(Found(path, m, native[cls], layout, width, getattr(m, "eps", None), native=True))
        elif cls.__module__.startswith("transformers.") and cls.__name__ in HF_RMSNORMS:
            f, why = _hf(path, m, config)
            if f is not None:
                found.append(f)
            else:
                left.append({"module": path, "class": cls.__name__, "reason": why})
        elif "norm" in cls.__name__.lower():
            left.append({"module": path, "class": f"{cls.__module__}.{cls.__name__}",
                         "reason": "not a norm class normbench knows (normbench's own, or the transformers RMSNorms "
                                   f"{', '.join(sorted(HF_RMSNORMS))})"})
    return found, left
