"""Models: every registry norm trains in every model whose layout it supports; placements; NF baselines; plugins."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import normbench
from normbench import NormSpec, Paper
from normbench.models import MODEL_LAYOUT, build_model, supports
from normbench.models.gpt import PLACEMENTS
from normbench.tasks import get_task

LM = get_task("synth-lm")
SHAPES = get_task("synth-shapes")
TINY = {
    "gpt": {"n_layer": 2, "n_embd": 16, "n_head": 2, "seq_len": 16},
    "vit": {"embed_dim": 16, "depth": 2, "num_heads": 2},
    "resnet": {},
    "nf_resnet": {},
    "fixup_resnet": {},
    "skipinit_resnet": {},
}


pytestmark = pytest.mark.usefixtures("one_thread")


def _step(model_name: str, module: nn.Module, batch: int = 4) -> float:
    """One SGD step on random data; returns the loss and checks every parameter that should learn got a gradient."""
    g = torch.Generator().manual_seed(0)
    if MODEL_LAYOUT[model_name] == "tokens" and model_name == "gpt":
        x = torch.randint(0, LM.vocab_size, (batch, 16), generator=g)
        out = module(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), x.reshape(-1))
    else:
        x = torch.randn(batch, 3, 16, 16, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        loss = F.cross_entropy(module(x), y)
    opt = torch.optim.SGD(module.parameters(), lr=1e-2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item())
    return loss.item()


def _cases():
    for name in normbench.list_norms():
        spec = normbench.get_norm(name)
        for model in ("gpt", "vit", "resnet", "nf_resnet"):
            if supports(model, spec) is None:
                yield pytest.param(name, model, id=f"{name}-{model}")


@pytest.mark.parametrize("norm,model", list(_cases()))
def test_every_norm_trains_in_every_model_of_its_layout(norm, model):
    spec = normbench.get_norm(norm)
    task = LM if model == "gpt" else SHAPES
    torch.manual_seed(0)
    built = build_model(model, task, spec, **TINY[model])
    built.module.train()
    _step(model, built.module)
    _step(model, built.module)  # a second step exercises running statistics and optimizer state
    built.module.eval()
    with torch.no_grad():
        x = torch.randint(0, 64, (2, 16)) if model == "gpt" else torch.randn(2, 3, 16, 16)
        assert torch.isfinite(built.module(x)).all()
    if spec.kind == "weight":
        assert built.config["wrapped_layers"] > 0


def test_the_whole_activation_zoo_is_covered_by_some_model():
    for name in normbench.list_norms():
        spec = normbench.get_norm(name)
        if spec.kind in ("activation", "residual"):
            assert any(supports(m, spec) is None for m in ("gpt", "vit", "resnet")), name


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("qk", [False, True])
def test_placements_build_and_train(placement, qk):
    if placement == "ngpt" and qk:
        pytest.skip("nGPT normalises queries and keys itself")
    torch.manual_seed(0)
    built = build_model("gpt", LM, "rmsnorm", placement=placement, qk_norm=qk, **TINY["gpt"])
    assert built.config["placement"] == placement and built.config["qk_norm"] is qk
    _step("gpt", built.module)


def test_placement_structure():
    m = build_model("gpt", LM, "layernorm", placement="mix_ln", n_layer=4, n_embd=16, n_head=2).module
    assert [b.mode for b in m.blocks] == ["post_ln", "pre_ln", "pre_ln", "pre_ln"]
    post = build_model("gpt", LM, "layernorm", placement="post_ln", **TINY["gpt"]).module
    assert isinstance(post.norm_f, nn.Identity)
    deep = build_model("gpt", LM, "layernorm", placement="deepnorm", n_layer=4, n_embd=16, n_head=2).module
    assert deep.blocks[0].alpha == pytest.approx(8 ** 0.25)
    hyb = build_model("gpt", LM, "layernorm", placement="hybridnorm", **TINY["gpt"]).module
    assert len(hyb.blocks[0].attn.qkv_norms) == 3 and not hasattr(hyb.blocks[0], "norm1")
    assert not isinstance(hyb.norm_f, nn.Identity)
    peri = build_model("gpt", LM, "layernorm", placement="peri_ln", **TINY["gpt"]).module
    assert hasattr(peri.blocks[1], "norm2_out")


def test_layernorm_scaling_gets_the_block_depth():
    m = build_model("gpt", LM, "layernorm", placement="layernorm_scaling", n_layer=3, n_embd=16, n_head=2).module
    x = torch.randn(2, 5, 16)
    ln = nn.functional.layer_norm(x, (16,))
    assert torch.allclose(m.blocks[2].norm1(x), ln / math.sqrt(3), atol=1e-5)
    spec_based = build_model("gpt", LM, "layernorm_scaling", n_layer=3, n_embd=16, n_head=2).module
    assert spec_based.blocks[2].norm2.depth == 3
    vit = build_model("vit", SHAPES, "layernorm_scaling", **TINY["vit"]).module
    assert vit.blocks[1].norm1.depth == 2


def test_norm_layer_goes_into_timm_models():
    res = build_model("resnet", SHAPES, "groupnorm").module
    kinds = {type(m).__name__ for m in res.modules()}
    assert "BatchNorm2d" not in kinds and any("Group" in k for k in kinds)
    vit = build_model("vit", SHAPES, "dyt", **TINY["vit"]).module
    assert type(vit.blocks[0].norm1).__name__ == "DyT" and type(vit.fc_norm).__name__ == "DyT"


@pytest.mark.parametrize("model", ["fixup_resnet", "skipinit_resnet"])
def test_norm_free_baselines(model):
    torch.manual_seed(0)
    built = build_model(model, SHAPES, "none")
    _step(model, built.module)
    with pytest.raises(ValueError, match="--norm none"):
        build_model(model, SHAPES, "batchnorm")


def test_nf_resnet_needs_a_weight_norm_and_keeps_signal_in_range():
    torch.manual_seed(0)
    m = build_model("nf_resnet", SHAPES, "scaled_ws").module
    h = m.stem(torch.randn(32, 3, 16, 16))
    for block in m.blocks:
        h = block(h)
    assert 0.1 < h.std().item() < 10
    with pytest.raises(ValueError, match="weight norm"):
        build_model("nf_resnet", SHAPES, "layernorm")


def test_unsupported_layout_is_a_clear_error():
    with pytest.raises(ValueError, match="layouts"):
        build_model("gpt", LM, "groupnorm")
    with pytest.raises(ValueError, match="gpt"):
        build_model("resnet", SHAPES, "layernorm", placement="post_ln")


def test_weight_norm_uses_base_norm_and_wraps_layers():
    assert build_model("resnet", SHAPES, "weight_norm").config["base_norm"] == "batchnorm"
    built = build_model("resnet", SHAPES, "weight_std", base_norm="groupnorm")
    assert built.config["base_norm"] == "groupnorm" and built.config["wrapped_layers"] > 0
    assert not any(isinstance(m, nn.BatchNorm2d) for m in built.module.modules())
    gpt = build_model("gpt", LM, "qk_norm", **TINY["gpt"])
    assert gpt.config["qk_norm"] is True and gpt.config["base_norm"] == "layernorm"


class _HalfNorm(nn.Module):
    """A toy third-party norm: x / (2·rms(x)) with a gain, over the channel axis of either layout."""

    def __init__(self, num_features, layout="tokens"):
        super().__init__()
        self.dim = -1 if layout == "tokens" else 1
        shape = (num_features,) if layout == "tokens" else (1, num_features, 1, 1)
        self.weight = nn.Parameter(torch.ones(shape))

    def forward(self, x):
        return self.weight * x / (2 * x.pow(2).mean(self.dim, keepdim=True).add(1e-5).sqrt())


PLUGIN = NormSpec(
    name="halfnorm", title="Half RMS norm (test plugin)",
    paper=Paper("A test", "Nobody", 2025, "https://example.org/halfnorm"),
    family="features", kind="activation", layouts=("tokens", "images"), formula="y = γ·x/(2·rms(x))",
    factory=_HalfNorm, package="normbench-test-plugin", package_version="0.0",
)


@pytest.mark.parametrize("model", ["gpt", "vit", "resnet"])
def test_a_plugin_norm_trains_without_code_changes(model):
    torch.manual_seed(0)
    built = build_model(model, LM if model == "gpt" else SHAPES, PLUGIN, **TINY[model])
    assert any(isinstance(m, _HalfNorm) for m in built.module.modules())
    _step(model, built.module)
