"""Which modules of a model are norms a policy can drive, found by what they compute: normbench's own, and any module
with a 1-d weight (and bias, if any; or none at all) and a single-tensor forward whose output on a probe is RMSNorm
(scale ``w`` or ``1 + w``) or LayerNorm (with or without bias or affine) over the last dimension, whatever its class
(torch's ``nn.LayerNorm`` and ``nn.RMSNorm``, the transformers families' RMSNorms, T5's, timm's token LayerNorms).
Class names only pre-filter (a class whose name says norm, or a known one); nothing is replaced without the probe,
which runs in eval mode under ``no_grad`` and restores the module's buffers, training flag and the RNG state.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

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
    create: dict = field(default_factory=dict)  # the zoo module's other arguments (affine=, bias=)

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
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (torch's "cannot dispatch to fused implementation")
            y = module(torch.ones(1, w.shape[0], dtype=torch.bfloat16, device=w.device))
    except Exception:  # (torch's LayerNorm refuses mixed dtypes: its output is never promoted)
        return True
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


def _eps_attr(module: nn.Module):
    for key in ("variance_epsilon", "eps", "epsilon", "rms_norm_eps", "layer_norm_eps"):
        v = getattr(module, key, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _forms(module: nn.Module):
    """(norm, offset, create kwargs) a module with these parameters could compute."""
    w, b = module._parameters.get("weight"), module._parameters.get("bias")
    if w is None and b is None:
        return [("layernorm", False, {"affine": False}), ("rmsnorm", False, {"affine": False})]
    if b is not None:
        return [("layernorm", False, {})]
    return [("rmsnorm", False, {}), ("rmsnorm", True, {}), ("layernorm", False, {"bias": False})]


def _expected(x: torch.Tensor, norm: str, w, b, offset: bool, eps: float) -> torch.Tensor:
    xd = x.double()
    if norm == "layernorm":
        xd = xd - xd.mean(-1, keepdim=True)
    y = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * ((1.0 + w.double()) if offset else w.double())
    if b is not None:
        y = y + b.double()
    return y


def _recover_eps(module: nn.Module, norm: str, w, b, offset: bool, width: int, device) -> float | None:
    """eps from one probe row small enough that eps matters: y = x' / sqrt(m + eps) * scale (+ bias)."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(1, width, generator=g) * 1e-3).to(device)
    y = module(x).double()
    xd = x.double()
    if norm == "layernorm":
        xd = xd - xd.mean(-1, keepdim=True)
    if b is not None:
        y = y - b.double()
    if w is not None:
        y = y / ((1.0 + w.double()) if offset else w.double())
    r = (xd / y).pow(2) - xd.pow(2).mean(-1, keepdim=True)
    r = r[torch.isfinite(r)]
    if not r.numel():
        return None
    eps = float(r.median())
    return eps if eps > 0 else None


def probe_any(module: nn.Module, config) -> tuple[tuple | None, str]:
    """((norm, offset, eps, create kwargs), "") when ``module`` computes one of :func:`_forms` over its last dim,
    else (None, what it computes instead). eps from the module, the model's config, or recovered by the probe (then
    checked within 1 %). Eval mode, no autograd; buffers, training flag and RNG state restored."""
    w = module._parameters.get("weight")
    width = int(w.shape[0]) if w is not None else getattr(module, "normalized_shape", (None,))[-1]
    if not isinstance(width, int):
        return None, "it has no weight and no normalized_shape: its width is unknown"
    device = w.device if w is not None else torch.device("cpu")
    buffers = {k: v.clone() for k, v in module._buffers.items() if v is not None}
    training = module.training
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            module.eval()
            given = _eps_attr(module)
            if given is None:
                given = _config_eps(config) if config is not None else None
            bias = module._parameters.get("bias")
            tried = []
            for norm, offset, create in _forms(module):
                eps = given
                if eps is None:
                    eps = _recover_eps(module, norm, w, bias, offset, width, device)
                    if eps is None:
                        continue
                ok, d = True, 0.0
                g = torch.Generator().manual_seed(0)
                for size in (1.0, eps ** 0.5):
                    x = (torch.randn(2, 3, width, generator=g) * size).to(device)
                    y = module(x)
                    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
                        return None, (f"it returns {type(y).__name__} {tuple(getattr(y, 'shape', ()))} for input "
                                      f"{tuple(x.shape)}")
                    ref = _expected(x, norm, w, bias, offset, eps)
                    d = float((y.double() - ref).abs().max())
                    # 1 % of eps moves a row of size sqrt(eps) by about 0.5 %; the weight-sized rows by far less
                    tol = (1e-5 if given is not None else 5e-3) * (1 + float(ref.abs().max()))
                    if not d <= tol:
                        ok = False
                        break
                if ok:
                    return (norm, offset, float(eps), create), ""
                tried.append(f"{norm}{' (1 + w)' if offset else ''} by {d:.3g}")
            return None, ("its output on the probe is none of RMSNorm or LayerNorm over the last dim (differs from "
                          + ", ".join(tried or ["(eps unknown)"]) + ")")
    except Exception as exc:  # a module that cannot run on the probe is left as it is
        return None, f"it failed on a probe input: {type(exc).__name__}: {exc}"
    finally:
        module.train(training)
        for k, v in buffers.items():
            module._buffers[k].copy_(v)


def _candidate(m: nn.Module) -> bool:
    """The pre-filter: a leaf with a 1-d weight (and a 1-d bias if any) or none, whose class says it normalises."""
    name = type(m).__name__.lower()
    if "norm" not in name or "batch" in name or "group" in name or "instance" in name:
        return False
    if any(True for _ in m.children()):
        return False
    params = {k: p for k, p in m._parameters.items() if p is not None}
    if set(params) - {"weight", "bias"} or any(p.dim() != 1 for p in params.values()):
        return False
    return True


def find(model: nn.Module) -> tuple[list[Found], list[dict]]:
    """The norm modules of ``model`` a policy can drive, and the norm-like ones it cannot (``{"module", "class",
    "reason"}``: one whose probe says it computes something else, or that has parameters no zoo norm has)."""
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
        elif isinstance(m, nn.RMSNorm) and m.eps is None:
            left.append({"module": path, "class": f"{cls.__module__}.{cls.__name__}", "reason": (
                "eps=None: torch uses the input dtype's machine epsilon, which no fixed-eps implementation computes")})
        elif _candidate(m):
            got, why = probe_any(m, config)
            if got is None:
                left.append({"module": path, "class": f"{cls.__module__}.{cls.__name__}", "reason": why})
                continue
            norm, offset, eps, create = got
            w = m._parameters.get("weight")
            width = int(w.shape[0]) if w is not None else int(m.normalized_shape[-1])
            found.append(Found(path, m, norm, "tokens", width, eps, offset=offset,
                               cast_to_input=_cast_rule(m) if w is not None else True, create=create))
        elif "norm" in cls.__name__.lower():
            left.append({"module": path, "class": f"{cls.__module__}.{cls.__name__}",
                         "reason": "not a norm normbench can drive: it has sub-modules, or parameters other than a "
                                   "1-d weight and bias, or it normalises over the batch, groups or instances"})
    return found, left
