"""#49: norms found by what they compute, whatever their class: GPT-2's and a timm ViT's ``nn.LayerNorm``, T5's
``T5LayerNorm`` and torch's ``nn.RMSNorm``, in tiny models made from configs (no downloads), each confirmed by the
probe, driven by a policy, within the dtype's tolerance, state_dict unchanged and restored exactly."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from test_policy import CALLS, _close, _twin, backends, shape_policy, tr  # noqa: F401  (the backends fixture)
from torch import nn

from normbench import best
from normbench.policy import PolicyNorm, _dims, apply_policy, restore
from normbench.policy.recognise import find


def _gpt2():
    return tr.GPT2LMHeadModel(tr.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=64)), \
        (lambda m, ids: m(ids).logits), {"layernorm": 5}, 1e-5


def _t5():
    model = tr.T5ForConditionalGeneration(tr.T5Config(d_model=32, d_ff=64, d_kv=16, num_heads=2, num_layers=1,
                                                      vocab_size=64, decoder_start_token_id=0))
    return model, (lambda m, ids: m(input_ids=ids, decoder_input_ids=ids).logits), {"rmsnorm": 7}, 1e-6


def _vit(norm_layer=None):
    timm = pytest.importorskip("timm")
    kw = {"norm_layer": norm_layer} if norm_layer else {}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                              depth=2, num_heads=2, num_classes=10, **kw)
    return model, (lambda m, ids: m(torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(7)))), \
        {"layernorm" if norm_layer is None else "rmsnorm": 5}, 1e-6


MODELS = {"gpt2": _gpt2, "t5": _t5, "vit": _vit,
          "vit-nn.RMSNorm": lambda: _vit(functools.partial(nn.RMSNorm, eps=1e-6))}


def _norm_calls(model, run, ids):
    """(module name, input dims as records hold them) of every call of a module the probe found."""
    found, _left = find(model)
    seen = []
    hooks = [f.module.register_forward_pre_hook(lambda m, a, p=f.path: seen.append((p, _dims(a[0], "tokens"))))
             for f in found]
    with torch.no_grad():
        run(model, ids)
    for h in hooks:
        h.remove()
    return found, seen


@pytest.mark.parametrize("name", sorted(MODELS))
def test_found_by_what_they_compute_driven_and_restored(name, backends):  # noqa: F811  (the fixture)
    model, run, want, eps = MODELS[name]()
    backends("layernorm", ("twin", _twin))
    torch.manual_seed(0)
    with torch.no_grad():   # weights off their init (ones and zeros would hide a missing weight or bias)
        for n, p in model.named_parameters():
            if p.dim() == 1 and "norm" in n or n.startswith("ln_") or ".ln_" in n:
                p.add_(torch.randn_like(p) * 0.3)
    model.eval()
    ref = copy.deepcopy(model)
    ids = torch.randint(0, 64, (1, 5))
    found, calls = _norm_calls(model, run, ids)
    by = {}
    for f in found:
        by[f.norm] = by.get(f.norm, 0) + 1
        assert f.eps == pytest.approx(eps, rel=0.01), (f.path, f.eps)
    assert by == want, [(f.path, f.norm) for f in found]
    docs = [shape_policy(norm, "tokens", dims) for norm, dims in
            sorted({(next(f.norm for f in found if f.path == p), d) for p, d in calls})]
    doc = {**docs[0], "answers": [a for d in docs for a in d["answers"]],
           "policy": [p for d in docs for p in d["policy"]]}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = apply_policy(model, doc)
    assert len(report.replaced) == sum(want.values()), str(report)
    assert all(isinstance(model.get_submodule(f.path), PolicyNorm) for f in found)
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    n = CALLS["twin"]
    with torch.no_grad():
        got, exp = run(model, ids), run(ref, ids)
    assert CALLS["twin"] - n == len(calls), "the policy's backend did not run for every norm call"
    assert _close(got, exp, best.ERR_TOL["float32"])
    assert sorted(restore(model)) == sorted(f.path for f in found)
    assert not any(isinstance(m, PolicyNorm) for m in model.modules())
    with torch.no_grad():
        assert torch.equal(run(model, ids), exp)


class _CentredNorm(nn.Module):
    """Named like a norm, with a 1-d weight, but not one (it only centres): the probe leaves it, saying why."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = 1e-5

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) * self.weight


class _HiddenEpsNorm(nn.Module):
    """An RMSNorm whose eps no attribute names: the probe recovers it."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 3e-4) * self.weight


def test_the_probe_replaces_nothing_it_cannot_confirm():
    m = nn.Module()
    m.a_norm = _CentredNorm(8)
    m.rms_default_eps = nn.RMSNorm(8)       # eps=None: the input dtype's machine epsilon
    m.hidden = _HiddenEpsNorm(8)
    m.bn_norm = nn.BatchNorm1d(8)
    rng = torch.get_rng_state()
    found, left = find(m)
    assert torch.equal(torch.get_rng_state(), rng)
    why = {r["module"]: r["reason"] for r in left}
    assert "none of RMSNorm or LayerNorm" in why["a_norm"]
    assert "machine epsilon" in why["rms_default_eps"]
    assert "batch" in why["bn_norm"]
    assert [(f.path, f.norm) for f in found] == [("hidden", "rmsnorm")]
    assert found[0].eps == pytest.approx(3e-4, rel=0.01)
