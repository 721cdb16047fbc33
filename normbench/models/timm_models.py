"""timm ResNet and ViT with the norm under test passed as ``norm_layer``, sized for each image task.

timm is always imported through ``normbench._compat.import_timm()`` (torchvision's compiled ops may not load
on a CPU build of torch).
"""

from __future__ import annotations

import types
from dataclasses import asdict, dataclass

from torch import nn

from normbench._compat import import_timm
from normbench.models.norms import timm_norm_layer


@dataclass(frozen=True)
class ResNetPreset:
    layers: tuple[int, ...]
    channels: tuple[int, ...]
    #: "small": a 3x3 stride-1 conv; "small_pool": that plus a stride-2 max-pool; "imagenet": timm's 7x7/2 + pool
    stem: str


@dataclass(frozen=True)
class ViTPreset:
    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int
    mlp_ratio: float


# Keyed by the training crop size. 16: the offline task; 32: CIFAR (ResNet-20 / ViT-Tiny-ish);
# 64: Tiny-ImageNet and 128: Imagenette (ResNet-18 / a 6-block ViT with 64 patches).
RESNET_PRESETS = {
    16: ResNetPreset(layers=(1, 1, 1), channels=(16, 32, 64), stem="small"),
    32: ResNetPreset(layers=(3, 3, 3), channels=(16, 32, 64), stem="small"),
    64: ResNetPreset(layers=(2, 2, 2, 2), channels=(64, 128, 256, 512), stem="small_pool"),
    128: ResNetPreset(layers=(2, 2, 2, 2), channels=(64, 128, 256, 512), stem="imagenet"),
}
VIT_PRESETS = {
    16: ViTPreset(patch_size=4, embed_dim=64, depth=4, num_heads=4, mlp_ratio=2.0),
    32: ViTPreset(patch_size=4, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4.0),
    64: ViTPreset(patch_size=8, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4.0),
    128: ViTPreset(patch_size=16, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4.0),
}


def preset_for(presets: dict, image_size: int):
    if image_size not in presets:
        raise ValueError(f"no model preset for {image_size}px images; presets exist for {sorted(presets)}")
    return presets[image_size]


def _forward_stages(self, x):
    x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
    i = 1
    while hasattr(self, f"layer{i}"):
        x = getattr(self, f"layer{i}")(x)
        i += 1
    return x


def _as_norm_act_resnet(model: nn.Module, norm, zero_init_last: bool) -> int:
    """Turn every norm + ReLU of a timm ResNet into one normalization-activation layer (EvoNorm-style).

    As in the EvoNorm authors' ResNet (tensorflow/tpu models/official/resnet/resnet_model.py, ``norm_activation``):
    the stem's and each block's first BN-ReLU become ``norm(C)`` with no ReLU after it; the block's last norm and
    the shortcut's norm, which have no activation after them, become ``norm(C, apply_act=False)`` (the layer's
    affine part only); the ReLU after the residual add stays. Returns how many layers became affine-only.
    """
    def linear(c: int) -> nn.Module:
        try:
            return norm(c, apply_act=False)
        except TypeError as e:
            raise ValueError(f"{type(norm(c)).__name__} declares norm_act = True, so it must accept apply_act=False "
                             f"(its affine part only, for norms with no activation after them): {e}") from e

    model.act1 = nn.Identity()
    n = 0
    for stage in (m for name, m in model.named_children() if name.startswith("layer")):
        for block in stage:
            block.act1 = nn.Identity()
            block.bn2 = linear(block.bn2.num_features)
            if zero_init_last and getattr(block.bn2, "weight", None) is not None:
                nn.init.zeros_(block.bn2.weight)
            n += 1
            if block.downsample is not None:
                block.downsample[-1] = linear(block.downsample[-1].num_features)
                n += 1
    return n


def build_resnet(image_size: int, num_classes: int, norm, **overrides) -> tuple[nn.Module, dict]:
    """A timm ``ResNet`` of ``BasicBlock``s whose every norm is ``norm(C)``; returns (model, its config)."""
    timm = import_timm()
    from timm.models.resnet import BasicBlock, ResNet

    p = preset_for(RESNET_PRESETS, image_size)
    layers = tuple(overrides.pop("layers", p.layers))
    channels = tuple(overrides.pop("channels", p.channels))
    # timm's default zero-initialises the last norm's gain in every block; that switches off the branches of norms
    # with a gain but not of the identity, so norm comparisons leave it off (a recipe option).
    zero_init_last = bool(overrides.pop("zero_init_last", False))
    if overrides:
        raise ValueError(f"unknown resnet options {sorted(overrides)}; known: layers, channels, zero_init_last")
    kwargs = dict(num_classes=num_classes, channels=channels, norm_layer=timm_norm_layer(norm),
                  zero_init_last=zero_init_last)
    if p.stem != "imagenet":
        # timm's deep stem makes the stem width channels[0]; it is then replaced by one 3x3 stride-1 conv,
        # the usual stem for small images.
        kwargs.update(stem_type="deep", stem_width=channels[0] // 2)
    model = ResNet(BasicBlock, layers, **kwargs)
    # A normalization-activation layer (EvoNorm) replaces a norm and its ReLU: no ReLU after it, and the norms
    # with no activation after them use its affine part only (``_as_norm_act_resnet``).
    norm_act = bool(getattr(norm(channels[0]), "norm_act", False))
    if norm_act:
        _as_norm_act_resnet(model, norm, zero_init_last)
    if len(layers) != 4:
        # timm's forward_features names layer1..layer4; CIFAR ResNets have three stages.
        model.forward_features = types.MethodType(_forward_stages, model)
    if p.stem != "imagenet":
        model.conv1 = nn.Conv2d(3, channels[0], 3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        if p.stem == "small":
            model.maxpool = nn.Identity()
    del timm
    return model, {"arch": "timm.ResNet(BasicBlock)", "layers": list(layers), "channels": list(channels),
                   "stem": p.stem, "zero_init_last": zero_init_last,
                   **({"norm_act": True} if norm_act else {})}


def build_vit(image_size: int, num_classes: int, norm, **overrides) -> tuple[nn.Module, dict]:
    """A timm ``VisionTransformer`` (mean-pooled, no class token) with ``norm_layer`` = the norm under test.

    Norms that need the block depth (LayerNorm Scaling) are rebuilt per block with depth = block index + 1.
    """
    import_timm()
    from timm.models.vision_transformer import VisionTransformer

    p = asdict(preset_for(VIT_PRESETS, image_size))
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown vit options {sorted(unknown)}; known: {', '.join(p)}")
    p.update(overrides)
    model = VisionTransformer(img_size=image_size, num_classes=num_classes, global_pool="avg", class_token=False,
                              norm_layer=timm_norm_layer(norm), **p)
    if getattr(norm, "wants_depth", False):
        for i, block in enumerate(model.blocks):
            block.norm1 = norm(p["embed_dim"], depth=i + 1)
            block.norm2 = norm(p["embed_dim"], depth=i + 1)
    return model, {"arch": "timm.VisionTransformer", **p}
