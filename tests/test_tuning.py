"""Recipes and fair tuning: recipe/model hashes in the record id, zero_init_last, Fixup as its official code, the
learning-rate choice rule, and ``normbench sweep --tune`` end to end (tuning records flagged, resumable)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import normbench.models as models_pkg
from normbench.models import build_model, model_hash
from normbench.records.store import record_files
from normbench.results import iter_records
from normbench.tasks import get_task
from normbench.train.loop import Run, make_optimizer, run_config
from normbench.train.recipes import Recipe, get_recipe
from normbench.train.tune import choose_lr

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPES = get_task("synth-shapes")


def test_recipe_and_model_hashes_are_in_the_config_and_change_the_id():
    run = Run(task="synth-lm", model="gpt", norm="layernorm")
    cfg = run_config(run)
    blob = json.dumps(run.recipe().to_dict(), sort_keys=True, separators=(",", ":"), default=str)
    assert cfg["recipe_hash"] == hashlib.sha256(blob.encode()).hexdigest()[:16]
    here = Path(models_pkg.__file__).parent
    h = hashlib.sha256()
    for name in ("__init__.py", "norms.py", "gpt.py"):
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    assert cfg["model_hash"] == h.hexdigest()[:16] == model_hash("gpt") != model_hash("resnet")
    other = run_config(Run(task="synth-lm", model="gpt", norm="layernorm", recipe_overrides={"weight_decay": 0.0}))
    assert other["recipe_hash"] != cfg["recipe_hash"]
    # The DyT recipe is the cell's recipe adapted for DyT: another hash, and it says so.
    dyt = run_config(Run(task="synth-lm", model="gpt", norm="dyt"))
    assert dyt["recipe"]["adapted_for"] == ["norm:dyt"] and dyt["recipe_hash"] != cfg["recipe_hash"]
    assert dyt["model_config"]["embed_scale"] is True


def test_zero_init_last_is_a_recipe_option_off_in_norm_comparisons():
    assert get_recipe("synth-shapes", "resnet").zero_init_last is False
    off = build_model("resnet", SHAPES, "groupnorm", **get_recipe("synth-shapes", "resnet").model_kwargs("resnet"))
    on = build_model("resnet", SHAPES, "groupnorm", zero_init_last=True)
    # timm's BasicBlock: bn2 is the last norm of the residual branch.
    blocks = [m for m in off.module.modules() if type(m).__name__ == "BasicBlock"]
    assert blocks and all(torch.all(b.bn2.weight == 1) for b in blocks)
    assert all(torch.all(b.bn2.weight == 0) for b in on.module.modules() if type(b).__name__ == "BasicBlock")
    assert off.config["zero_init_last"] is False and on.config["zero_init_last"] is True


@pytest.mark.parametrize("norm", ["evonorm_b0", "evonorm_s0"])
def test_evonorm_resnet_as_the_authors_code(norm):
    """EvoNorm ResNet (tensorflow/tpu resnet_model.py): stem and block-first norms are EvoNorm with no ReLU after
    them; the block's last norm and the shortcut's norm are affine only (nonlinearity=False); ReLU after the add.
    Checked against a forward written from those rules with independent EvoNorm formulas."""
    torch.manual_seed(0)
    built = build_model("resnet", SHAPES, norm)
    m = built.module.eval() if norm == "evonorm_b0" else built.module
    assert built.config["norm_act"] is True and "norm_act" not in build_model("resnet", SHAPES, "batchnorm").config
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 1 and ("bn" in name or "downsample" in name):
                p.copy_(1 + 0.3 * torch.randn_like(p))
        for b in m.modules():
            if hasattr(b, "running_var"):
                b.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 16, 16)

    def c(v):
        return v.view(1, -1, 1, 1)

    def evo(layer, z):  # nonlinear EvoNorm, written from the paper's formulas
        if norm == "evonorm_s0":
            g = layer.num_groups
            std = (z.reshape(z.shape[0], g, -1).var(dim=2, unbiased=False) + layer.eps).sqrt()
            std = std.repeat_interleave(z.shape[1] // g, dim=1).view(z.shape[0], z.shape[1], 1, 1)
            y = z * torch.sigmoid(c(layer.v) * z) / std
        else:
            inst = (z.var(dim=(2, 3), unbiased=False, keepdim=True) + layer.eps).sqrt()
            y = z / torch.maximum(c(layer.running_var + layer.eps).sqrt(), c(layer.v) * z + inst)
        return y * c(layer.weight) + c(layer.bias)

    def affine(layer, z):
        assert layer.apply_act is False and layer.v is None
        return z * c(layer.weight) + c(layer.bias)

    h = evo(m.bn1, m.conv1(x))
    for stage in (m.layer1, m.layer2, m.layer3):
        for b in stage:
            r = affine(b.bn2, b.conv2(evo(b.bn1, b.conv1(h))))
            s = h if b.downsample is None else affine(b.downsample[1], b.downsample[0](h))
            h = F.relu(r + s)
    want = m.fc(h.mean(dim=(2, 3)))
    torch.testing.assert_close(m(x), want, rtol=1e-5, atol=1e-5)


def test_fixup_as_its_official_code():
    """Fixup (official CIFAR code): relu(conv(x) + b) stem, branches with zero last conv, zero-padded subsampling
    shortcut, fc(pool + b) with zero fc; its scalar biases and multipliers train at a tenth of the rate."""
    torch.manual_seed(0)
    m = build_model("fixup_resnet", SHAPES, "none").module
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 0 or name.startswith("fc"):
                p.add_(0.1 * torch.randn_like(p))
        for b in m.blocks:
            b.conv2.weight.normal_(0, 0.05)
    x = torch.randn(2, 3, 16, 16)

    def conv(layer, z):
        return F.conv2d(z, layer.weight, None, layer.stride, layer.padding)

    h = F.relu(conv(m.stem.conv, x) + m.stem.bias)
    for b in m.blocks:
        out = F.relu(conv(b.conv1, h + b.bias1a) + b.bias1b)
        out = conv(b.conv2, out + b.bias2a) * b.scale + b.bias2b
        sc = h
        if b.conv1.stride[0] != 1 or b.conv1.in_channels != b.conv1.out_channels:
            s = b.conv1.stride[0]
            sub = (h + b.bias1a)[:, :, ::s, ::s]
            sc = torch.cat([sub, torch.zeros_like(sub)[:, : b.conv1.out_channels - b.conv1.in_channels]], 1)
        h = F.relu(out + sc)
    want = F.linear(h.mean((2, 3)) + m.bias_fc, m.fc.weight, m.fc.bias)
    torch.testing.assert_close(m(x), want)
    # Initialisation: zero classifier and last convs; first convs He-normal (fan-out) times L^(-1/2).
    fresh = build_model("fixup_resnet", SHAPES, "none").module
    assert torch.all(fresh.fc.weight == 0) and all(torch.all(b.conv2.weight == 0) for b in fresh.blocks)
    opt = make_optimizer(fresh, get_recipe("synth-shapes", "fixup_resnet"))
    scaled = {id(p) for g in opt.param_groups if g["lr_scale"] == 0.1 for p in g["params"]}
    want_scaled = {id(p) for n, p in fresh.named_parameters() if "bias" in n or n.endswith("scale")}
    assert scaled == want_scaled and fresh.fc.bias is not None and id(fresh.fc.bias) in scaled


def _rec(lr, final, diverged=False, metric="perplexity"):
    return {"config": {"recipe": {"lr": lr}}, "metrics": {"final": None if diverged else final,
                                                           "diverged": diverged, "metric": metric,
                                                           "higher_is_better": metric != "perplexity"}}


def test_choose_lr_fewest_diverged_then_best_mean_log_perplexity():
    grid = [1e-3, 3e-3, 9e-3]
    recs = [_rec(1e-3, 6.0), _rec(1e-3, 6.0), _rec(3e-3, 4.0), _rec(3e-3, 5.0), _rec(9e-3, 3.0),
            _rec(9e-3, None, diverged=True)]
    lr, scores = choose_lr(grid, recs)
    assert lr == 3e-3  # 9e-3 has the best surviving seed but one diverged seed
    assert scores["0.003"]["score"] == pytest.approx((math.log(4) + math.log(5)) / 2)
    assert scores["0.009"]["diverged"] == 1
    # Geometric, not arithmetic: {1, 9} (log-mean log 3) beats {3.2, 3.2} although its arithmetic mean is larger.
    lr, _ = choose_lr([1.0, 2.0], [_rec(1.0, 1.0), _rec(1.0, 9.0), _rec(2.0, 3.2), _rec(2.0, 3.2)])
    assert lr == 1.0
    lr, _ = choose_lr([0.1, 0.2], [_rec(0.1, 0.5, metric="top1"), _rec(0.2, 0.7, metric="top1")])
    assert lr == 0.2
    with pytest.raises(ValueError, match="no tuning record"):
        choose_lr([0.1, 0.2], [_rec(0.1, 0.5, metric="top1")])


def test_lr_candidates_follow_the_grid():
    r = Recipe(task="t", model="m", lr=3e-3)
    assert r.lr_candidates() == [0.001, 0.003, 0.009]


def test_sweep_tune_end_to_end_and_resumable(tmp_path, capsys):
    from normbench.cli import main

    out = tmp_path / "res"
    argv = ["sweep", "--tune", "--tasks", "synth-lm", "--norms", "rmsnorm", "--steps", "2", "--seeds", "2",
            "--out", str(out), "--no-progress", "--executor", "inprocess", "--checkpoint-dir", str(tmp_path / "ck")]
    assert main(argv) == 0
    recs = [r for _, r in iter_records(out, kind="accuracy")]
    tuning = [r for r in recs if "tuning" in r["flags"]]
    final = [r for r in recs if "tuning" not in r["flags"]]
    base = get_recipe("synth-lm", "gpt").lr_candidates()
    grid = final[0]["config"]["lr_search"]["grid"]
    # The recipe's grid, plus at most one step beyond each edge when the best rate sat on that edge.
    assert grid[grid.index(base[0]):grid.index(base[0]) + len(base)] == base and len(grid) <= len(base) + 2
    assert len(tuning) == len(grid) * 2 and len(final) == 2
    assert all(r["config"]["split"] == "val" for r in tuning) and all(r["config"]["split"] == "test" for r in final)
    assert sorted({r["config"]["recipe"]["lr"] for r in tuning}) == grid
    chosen, _ = choose_lr(grid, tuning)
    assert chosen not in (grid[0], grid[-1]) or len(grid) > len(base)
    assert {r["config"]["lr_search"]["chosen"] for r in final} == {chosen}
    assert {r["config"]["recipe"]["lr"] for r in final} == {chosen}
    n_files = sorted(p.stat().st_mtime_ns for p in record_files(out))
    assert n_files
    capsys.readouterr()
    assert main(argv) == 0  # resumed: everything is already there
    err = capsys.readouterr().err
    assert err.count("skipped") == len(tuning) + len(final)
    assert sorted(p.stat().st_mtime_ns for p in record_files(out)) == n_files


def test_validation_split_is_the_loaders_split_and_a_task_without_one_is_refused():
    from normbench.tasks import TaskData
    from normbench.tasks.splits import VAL_FRACTION
    from normbench.train.loop import validation_split
    from normbench.train.recipes import RECIPES

    x = torch.arange(100).view(100, 1, 1, 1).expand(100, 3, 2, 2).to(torch.uint8)
    y = torch.arange(100) % 10
    own = TaskData(task=SHAPES, train={"x": x, "y": y}, eval={"x": x[:5], "y": y[:5]},
                   val={"x": x[:7], "y": y[:7]})
    v = validation_split(own)
    assert torch.equal(v.eval["x"], x[:7]) and torch.equal(v.train["x"], x)
    none = TaskData(task=SHAPES, train={"x": x, "y": y}, eval={"x": x[:5], "y": y[:5]})
    with pytest.raises(ValueError, match="no validation split"):
        validation_split(none)
    # The recipe records the fraction the loaders hold out; it must be the one they use.
    assert {r.val_fraction for r in RECIPES.values()} == {VAL_FRACTION}


def test_default_cells_warm_up_and_clip_the_stress_variant_does_neither():
    from normbench.train.recipes import RECIPES

    for name, r in RECIPES.items():
        if r.variant == "deep_stress":
            assert r.warmup_steps == 0 and not r.grad_clip and not r.agc, name
        else:
            assert r.warmup_steps > 0 and (r.grad_clip or r.agc), name
    assert {"synth-lm/gpt/deep", "synth-lm/gpt/deep_stress"} <= set(RECIPES)
    # nGPT's own recipe (no warm-up, no weight decay) applies to its placement only.
    ngpt = get_recipe("synth-lm", "gpt").adapted("ngpt", "ngpt")
    assert ngpt.warmup_steps == 0 and ngpt.weight_decay == 0 and ngpt.adapted_for == ("placement:ngpt",)
    assert get_recipe("synth-lm", "gpt").adapted("ngpt", "pre_ln").adapted_for == ()
