"""Models for the accuracy suite and one entry point, ``build_model``, that puts the norm under test into them.

=================  ========  =====================================================================
model              layout    what it is
=================  ========  =====================================================================
``gpt``            tokens    small decoder-only GPT, placement as a parameter (``models/gpt.py``)
``vit``            tokens    timm VisionTransformer, ``norm_layer`` = the norm under test
``resnet``         images    timm ResNet (BasicBlocks), ``norm_layer`` = the norm under test
``fixup_resnet``   images    Fixup, no norms (norm must be ``none``)
``skipinit_resnet`` images   SkipInit, no norms (norm must be ``none``)
``nf_resnet``      images    NF-ResNet: convs wrapped by a weight norm (default ``scaled_ws``) + AGC
=================  ========  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from normbench.models.norms import activation_spec, norm_factory, resolve, wrap_weights

MODEL_LAYOUT = {
    "gpt": "tokens",
    "vit": "tokens",
    "resnet": "images",
    "fixup_resnet": "images",
    "skipinit_resnet": "images",
    "nf_resnet": "images",
}
NORM_FREE = ("fixup_resnet", "skipinit_resnet", "nf_resnet")
__all__ = ["MODEL_LAYOUT", "NORM_FREE", "BuiltModel", "build_model", "model_hash", "supports"]


@dataclass
class BuiltModel:
    module: nn.Module
    #: JSON-ready description recorded in the result (architecture, sizes, placement, base norm, ...).
    config: dict = field(default_factory=dict)


def supports(model: str, norm) -> str | None:
    """``None`` if ``norm`` can be trained in ``model``, else the reason it cannot."""
    if model not in MODEL_LAYOUT:
        return f"unknown model {model!r}; models: {', '.join(MODEL_LAYOUT)}"
    spec = resolve(norm)
    layout = MODEL_LAYOUT[model]
    if model in ("fixup_resnet", "skipinit_resnet"):
        return None if spec.name == "none" else f"{model} is normalization-free: train it with --norm none"
    if model == "nf_resnet":
        if spec.kind != "weight":
            return (f"nf_resnet needs a weight norm for its convs (e.g. scaled_ws), "
                    f"not the {spec.kind} norm {spec.name!r}")
        return None if layout in spec.layouts else f"{spec.name!r} has no {layout} layout"
    if spec.kind == "attention" and model != "gpt":
        return f"{spec.name!r} (attention kind) is applied to queries and keys; only the gpt model has them exposed"
    if layout not in spec.layouts:
        return f"{spec.name!r} supports layouts {list(spec.layouts)}; {model} needs {layout}"
    return None


def _qk_factory(spec, seq_len: int):
    def make(head_dim: int) -> nn.Module:
        try:  # the built-in QK-Norm initialises its gain from the sequence length; plugins may not take it
            return spec.create(head_dim, layout="tokens", seq_len=seq_len)
        except TypeError:
            return spec.create(head_dim, layout="tokens")
    return make


def build_model(model: str, task, norm, placement: str | None = None, qk_norm: bool = False,
                base_norm=None, backend: str = "eager", **overrides) -> BuiltModel:
    """Build ``model`` for ``task`` (a ``normbench.tasks.Task``) with ``norm`` (a name or ``NormSpec``).

    ``placement`` and ``qk_norm`` apply to the GPT; ``base_norm`` fills the activation-norm slots when ``norm``
    is a weight or attention norm; ``backend`` picks the implementation of the activation norm (e.g. "triton");
    ``overrides`` change the size preset (e.g. ``n_layer=12`` for the GPT).
    """
    spec = resolve(norm)
    if backend != "eager" and spec.kind not in ("activation", "residual"):
        raise ValueError(f"--backend {backend} applies to activation norms; {spec.name!r} is a {spec.kind} norm")
    reason = supports(model, spec)
    if reason:
        raise ValueError(reason)
    if placement is not None and model != "gpt":
        raise ValueError(f"--placement applies to the gpt model only (got {placement!r} for {model})")
    layout = MODEL_LAYOUT[model]
    info: dict = {"model": model, "layout": layout}
    if model == "gpt":
        from normbench.models.gpt import GPT, GPTConfig

        if task.vocab_size is None:
            raise ValueError(f"the gpt model needs a text task; {task.name} is an {task.modality} task")
        act = activation_spec(spec, base_norm)
        use_qk = qk_norm or spec.kind == "attention"
        qk_spec = spec if spec.kind == "attention" else (resolve("qk_norm") if use_qk else None)
        cfg = GPTConfig(vocab_size=task.vocab_size, placement=placement or "pre_ln", qk_norm=use_qk)
        for k, v in overrides.items():
            if not hasattr(cfg, k):
                raise ValueError(f"unknown gpt option {k!r}; known: {', '.join(cfg.to_dict())}")
            default = getattr(cfg, k)
            setattr(cfg, k, v if (default is None or v is None) else type(default)(v))
        qk_factory = _qk_factory(qk_spec, cfg.seq_len) if use_qk else None
        module = GPT(cfg, norm_factory(act, layout, backend), qk_factory)
        info.update(cfg.to_dict())
        if spec.kind == "weight":
            info["wrapped_layers"] = wrap_weights(module.blocks, spec, layout, nn.Linear)
        info["base_norm"] = act.name if act is not spec else None
        return BuiltModel(module, info)
    if task.num_classes is None:
        raise ValueError(f"{model} needs an image task; {task.name} is a {task.modality} task")
    if model in NORM_FREE:
        from normbench.models.nf import NormFreeResNet

        variant = {"fixup_resnet": "fixup", "skipinit_resnet": "skipinit", "nf_resnet": "nf"}[model]
        module = NormFreeResNet(variant, task.image_size, task.num_classes,
                                weight_spec=spec if variant == "nf" else None, **overrides)
        info.update(module.config)
        info["base_norm"] = None
        return BuiltModel(module, info)
    from normbench.models.timm_models import build_resnet, build_vit

    act = activation_spec(spec, base_norm, default="batchnorm" if model == "resnet" else "layernorm")
    factory = norm_factory(act, layout, backend)
    builder = build_resnet if model == "resnet" else build_vit
    module, arch = builder(task.image_size, task.num_classes, factory, **overrides)
    info.update(arch)
    if spec.kind == "weight":
        if model == "resnet":
            info["wrapped_layers"] = wrap_weights(module, spec, layout, nn.Conv2d)
        else:
            info["wrapped_layers"] = wrap_weights(module.blocks, spec, "tokens", nn.Linear)
    info["base_norm"] = act.name if act is not spec else None
    return BuiltModel(module, info)


#: Source files whose code defines each model (besides this module and norms.py, shared by all).
_MODEL_SOURCES = {
    "gpt": ("gpt.py",),
    "vit": ("timm_models.py",),
    "resnet": ("timm_models.py",),
    "fixup_resnet": ("nf.py", "timm_models.py"),
    "skipinit_resnet": ("nf.py", "timm_models.py"),
    "nf_resnet": ("nf.py", "timm_models.py"),
}


_SOURCES: dict[str, bytes] = {}


def model_hash(model: str) -> str:
    """sha256 (16 hex) of the source of ``model``'s code (and timm's version for timm models).

    Part of an accuracy record's id: a record made with other model code is another cell, not a duplicate.
    """
    import hashlib
    from pathlib import Path

    if model not in _MODEL_SOURCES:
        raise ValueError(f"unknown model {model!r}; models: {', '.join(MODEL_LAYOUT)}")
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in ("__init__.py", "norms.py", *_MODEL_SOURCES[model]):
        if name not in _SOURCES:
            # Read once per process, when the model is first used (its module is loaded by then): a file edited
            # while a sweep runs must not lend its hash to the code already loaded.
            _SOURCES[name] = (here / name).read_bytes()
        h.update(name.encode() + b"\0" + _SOURCES[name] + b"\0")
    if "timm_models.py" in _MODEL_SOURCES[model]:
        try:
            from importlib.metadata import version

            h.update(f"timm=={version('timm')}".encode())
        except Exception:  # noqa: BLE001 - timm absent: the model cannot be built anyway
            h.update(b"timm==absent")
    return h.hexdigest()[:16]
