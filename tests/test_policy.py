"""normbench.apply_policy / restore: best's policy driving tiny random transformers models of every catalog family
and normbench's own norm modules; checked against the untouched model (a deep copy), never against itself."""

from __future__ import annotations

import copy
import dataclasses
import json
import warnings
from collections import Counter

import pytest
import torch
from torch import nn

import normbench
from normbench import best, catalog
from normbench.discovery import REGISTRY
from normbench.policy import PolicyFallbackWarning, PolicyMismatch, PolicyNorm, _hardware_id, apply_policy, restore
from normbench.registry import Backend, adopt_state

tr = pytest.importorskip("normbench._compat").import_transformers()

HW = _hardware_id(torch.device("cpu"))
CALLS: Counter = Counter()   # backend -> calls of the test backends' forward
_BASE = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=16)
FAMILIES = {
    "llama": lambda: (tr.LlamaConfig(**_BASE), tr.LlamaForCausalLM),
    "mistral": lambda: (tr.MistralConfig(**_BASE, sliding_window=None), tr.MistralForCausalLM),
    "qwen3": lambda: (tr.Qwen3Config(**_BASE), tr.Qwen3ForCausalLM),
    "gemma3": lambda: (tr.Gemma3TextConfig(**_BASE, sliding_window=8), tr.Gemma3ForCausalLM),
    "olmo2": lambda: (tr.Olmo2Config(**{**_BASE, "num_key_value_heads": 2}), tr.Olmo2ForCausalLM),
    "deepseek_v3": lambda: (tr.DeepseekV3Config(
        **{**_BASE, "num_key_value_heads": 2, "head_dim": 8}, moe_intermediate_size=16, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8), tr.DeepseekV3ForCausalLM),
}


# --- test backends: the eager class's own forward run on a module whose parameters are its own slots -------------
class _Twin(nn.Module):
    """Computes exactly what the eager module computes, with the parameters registered on itself (so a backend
    whose slots were not pointed at the model's parameters computes with the placeholders and the test sees it)."""

    def __init__(self, eager: nn.Module, tag: str):
        super().__init__()
        adopt_state(self, eager)
        object.__setattr__(self, "eager", eager)
        object.__setattr__(self, "tag", tag)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if "eager" not in self.__dict__:
                raise
            return getattr(self.__dict__["eager"], name)

    def forward(self, *args):
        CALLS[self.tag] += 1
        params = {k: v for k, v in self._parameters.items() if v is not None}
        out = torch.func.functional_call(self.eager, params, args)
        if self.tag == "broken":  # fails the check gate: its output is off by 1
            return out + 1
        return out


def _twin(eager, spec):
    return _Twin(eager, "twin")


def _broken(eager, spec):
    return _Twin(eager, "broken")


@pytest.fixture
def backends(monkeypatch):
    """The norms of these tests get a ``twin`` backend (a second backend that computes what eager computes)."""
    def add(name, *extra):
        spec = REGISTRY.get(name)
        monkeypatch.setitem(REGISTRY.specs, name, dataclasses.replace(
            spec, extra_backends=spec.extra_backends + tuple(Backend(b, build=f) for b, f in extra)))

    for n in ("rmsnorm", "add_rmsnorm", "add_layernorm"):
        add(n, ("twin", _twin))
    CALLS.clear()
    return add


# --- policies, as `normbench best --json` makes them from records -------------------------------------------------
def _records(targets, backend, dtypes=("float32",), passes=("fwd", "fwd+bwd"), hw=HW):
    """Per shape, dtype and pass: the winner and eager timed head to head, the winner twice as fast (paired).
    ``backend`` names the winner, or is a function of the target's regime naming it; where the winner is eager, it
    is twice as fast as backend ``a``."""
    recs, seen = [], set()
    for t in targets:
        win = backend(t["regime"]) if callable(backend) else backend
        other = "a" if win == "eager" else "eager"
        for d in dtypes:
            for p in passes:
                key = (t["norm"], t["layout"], tuple(t["dims"]), d, p)
                if key in seen:
                    continue
                seen.add(key)
                ids = {b: f"{'-'.join(map(str, key))}-{b}" for b in (win, other)}
                for b, o, tm, ratio in ((other, win, 2.0, 2.0), (win, other, 1.0, 0.5)):
                    pair = {"partner": ids[o], "ratio": ratio, "ci": [ratio * 0.95, ratio * 1.05], "n": 21,
                            "verdict": "faster" if ratio < 1 else "slower"}
                    recs.append({"id": ids[b], "kind": "kernel", "norm": {"name": t["norm"]}, "flags": [],
                                 "config": {"layout": t["layout"], "shape": list(t["dims"]), "dtype": d, "pass": p,
                                            "backend": b},
                                 "metrics": {"time_median_s": tm, "paired": [pair]},
                                 "provenance": {"hardware_id": hw}})
    return recs


def model_policy(config, backend="twin", **kw) -> dict:
    family, arch, sites = catalog.sites_from_config(config.to_dict())
    model = catalog.Model("tiny", "tiny", family, arch, "", {}, tuple(sites))
    targets = best.model_targets(model)
    rows = best.answer(_records(targets, backend, **kw), targets)
    return best.to_policy(rows, {"model": "tiny", "shape": None})


def shape_policy(norm, layout, dims, backend="twin", **kw) -> dict:
    targets = [{"site": None, "regime": None, "norm": norm, "layout": layout, "dims": tuple(dims)}]
    rows = best.answer(_records(targets, backend, **kw), targets)
    return best.to_policy(rows, {"model": None, "shape": "x".join(map(str, dims))})


def tiny(family):
    config, cls = FAMILIES[family]()
    torch.manual_seed(0)
    model = cls(config)
    with torch.no_grad():  # weights off their init (Gemma's are 0: 1 + w = 1 would hide a missing offset)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model, config


def _rmsnorm_paths(model):
    return sorted(n for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm"))


def _close(a, b, tol=1e-5):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= tol * (1 + float(b.abs().max()))


# --- tests --------------------------------------------------------------------------------------------------------
def test_regime_for_buckets_calls_into_best_regimes():
    assert catalog.regime_for("llm", 1, 1) == "decode-1"
    assert catalog.regime_for("llm", 5, 1) == "decode-8"
    assert catalog.regime_for("llm", 256, 1) == "decode-256"
    assert catalog.regime_for("llm", 257, 1) is None
    assert catalog.regime_for("llm", 1, 100) == "prefill-1x2048"
    assert catalog.regime_for("llm", 2, 2048) == "prefill-8x4096"
    assert catalog.regime_for("llm", 9, 4096) is None
    assert catalog.regime_for("vision", 1, 1) is None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_replaced_exact_and_restored(family, backends):
    model, config = tiny(family)
    ref = copy.deepcopy(model)
    paths = _rmsnorm_paths(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolicyFallbackWarning)
        report = apply_policy(model, model_policy(config))
        assert sorted(r["module"] for r in report.replaced) == paths and not report.left, str(report)
        assert all(isinstance(model.get_submodule(p), PolicyNorm) for p in paths)
        after = model.state_dict()
        assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
        ids = torch.randint(0, 64, (2, 5))
        for mode in ("eval", "train"):  # eval under no_grad (fwd), train with autograd recording (fwd+bwd)
            getattr(model, mode)(), getattr(ref, mode)()
            calls = CALLS["twin"]
            if mode == "eval":
                with torch.no_grad():
                    got, want = model(ids).logits, ref(ids).logits
                    # a decode step: one position of each sequence (regime decode-8)
                    assert _close(model(ids[:, :1]).logits, ref(ids[:, :1]).logits)
            else:
                got, want = model(ids).logits, ref(ids).logits
                got.square().mean().backward()
                want.square().mean().backward()
                grads = dict(ref.named_parameters())
                for name, p in model.named_parameters():
                    assert _close(p.grad, grads[name].grad, 1e-4), name
            runs = 2 * len(paths) if mode == "eval" else len(paths)   # eval: prefill and a decode step
            assert CALLS["twin"] - calls == runs, f"{mode}: the policy's backend did not run for every norm call"
            assert _close(got, want)
    # a checkpoint saved before loads after, and the reverse
    model.load_state_dict(before)
    restored = restore(model)
    assert sorted(restored) == paths
    assert not any(isinstance(m, PolicyNorm) for m in model.modules())
    assert all(type(model.get_submodule(p)) is type(ref.get_submodule(p)) for p in paths)
    ref.load_state_dict(model.state_dict())
    model.eval(), ref.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


def test_the_policy_follows_training_and_restore_keeps_it(backends):
    """An optimizer step on the applied model updates the parameters the backend reads and those restore leaves."""
    model, config = tiny("qwen3")
    apply_policy(model, model_policy(config))
    ids = torch.randint(0, 64, (2, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(ids).logits.square().mean().backward()
    opt.step()
    with torch.no_grad():
        applied = model(ids).logits
    snapshot = copy.deepcopy(model.state_dict())
    restore(model)
    with torch.no_grad():
        assert _close(model(ids).logits, applied)
    assert all(torch.equal(v, snapshot[k]) for k, v in model.state_dict().items())


def test_refused_when_made_elsewhere_unless_forced(backends, tmp_path):
    model, config = tiny("llama")
    doc = model_policy(config)
    for field, value, said in (("torch", "1.0.0", "torch 1.0.0"), ("normbench", "0.0.1", "normbench 0.0.1")):
        other = copy.deepcopy(doc)
        other["made_with"][field] = value
        with pytest.raises(PolicyMismatch, match=f"made with {said}.*force=True"):
            apply_policy(model, other)
    old = {k: v for k, v in doc.items() if k != "made_with"}
    with pytest.raises(PolicyMismatch, match="does not say which normbench and torch"):
        apply_policy(model, old)
    elsewhere = model_policy(config, hw="gpu-nvidia-h200")
    with pytest.raises(PolicyMismatch, match=f"measured on gpu-nvidia-h200, this model is on {HW}"):
        apply_policy(model, elsewhere)
    assert not any(isinstance(m, PolicyNorm) for m in model.modules())  # refused: nothing replaced
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(elsewhere))
    report = apply_policy(model, str(path), force=True)
    assert report.forced and "gpu-nvidia-h200" in report.forced[0]
    mod = model.get_submodule("model.norm")
    assert mod.policy_forced == report.forced and "forced" in repr(mod)
    calls = CALLS["twin"]
    with torch.no_grad():
        model(torch.randint(0, 64, (1, 3)))
    assert CALLS["twin"] - calls == 5  # forced: the foreign hardware's answers are used, by all 5 RMSNorms


def test_fallbacks_warn_once_per_site_and_reason(backends):
    model, config = tiny("llama")
    ref = copy.deepcopy(model)
    apply_policy(model, model_policy(config, passes=("fwd",)))
    calls = CALLS["twin"]   # (the gate's check may have run the backend: only calls from here on count)
    ids = torch.randint(0, 64, (2, 5))
    with pytest.warns(PolicyFallbackWarning) as got:
        for _ in range(2):
            model(ids)                          # autograd recording: the policy has no fwd+bwd answer
    reasons = Counter(tuple(str(w.message).removeprefix("normbench policy: ").split(" runs eager: ")) for w in got)
    sites = {"input_layernorm", "post_attention_layernorm", "norm (final)"}
    assert {s for s, _ in reasons} == sites and set(reasons.values()) == {1}
    assert all("no fwd+bwd answer in float32 (autograd is recording" in r for _, r in reasons)
    assert CALLS["twin"] == calls
    model.to(torch.bfloat16), ref.to(torch.bfloat16)
    calls = CALLS["twin"]   # (.to() re-resolves: the backends are warmed again)
    with pytest.warns(PolicyFallbackWarning, match="no answer in bfloat16") as got, torch.no_grad():
        out = model(ids).logits
        model(ids)
    assert len(got) == 3 and CALLS["twin"] == calls
    with torch.no_grad():
        assert torch.equal(out, ref(ids).logits)  # eager: the original modules, exactly
    with pytest.warns(PolicyFallbackWarning, match="beyond the largest regime"), torch.no_grad():
        model.to(torch.float32)(torch.randint(0, 64, (300, 1)))  # decode of 300 sequences: past decode-256


def test_unavailable_or_unchecked_backend_runs_eager(backends):
    model, config = tiny("llama")
    report = apply_policy(model, model_policy(config, backend="triton"))  # no GPU here
    assert "rmsnorm/triton" in report.refused
    with pytest.warns(PolicyFallbackWarning, match="backend triton refused"), torch.no_grad():
        model(torch.randint(0, 64, (1, 4)))
    restore(model)
    backends("rmsnorm", ("broken", _broken))   # computes y + 1: the norm's check fails, so the gate refuses it
    report = apply_policy(model, model_policy(config, backend="broken"))
    why = report.refused["rmsnorm/broken"]
    assert "has not passed the check gate on cpu" in why and "differs from eager on cpu by 1" in why
    with pytest.warns(PolicyFallbackWarning, match="backend broken refused.*has not passed"), torch.no_grad():
        model(torch.randint(0, 64, (1, 4)))


class LlamaRMSNorm(nn.Module):
    """Named like transformers' class, but a LayerNorm: the probe must reject it."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return nn.functional.layer_norm(x, x.shape[-1:], self.weight, None, self.variance_epsilon)


LlamaRMSNorm.__module__ = "transformers.models.llama.modeling_llama"


def test_only_norms_are_replaced(backends):
    model, config = tiny("llama")
    paths = set(_rmsnorm_paths(model))
    model.model.layers[0].input_layernorm = LlamaRMSNorm(32)
    model.model.layers[1].norm = nn.Linear(32, 32)           # named like a site, not a norm
    report = apply_policy(model, model_policy(config))
    left = {r["module"]: r["reason"] for r in report.left}
    assert "its output differs from x / sqrt(mean(x^2)" in left["model.layers.0.input_layernorm"]
    assert type(model.model.layers[0].input_layernorm) is LlamaRMSNorm
    assert type(model.model.layers[1].norm) is nn.Linear
    replaced = {r["module"] for r in report.replaced}
    assert replaced == paths - {"model.layers.0.input_layernorm"}


def _native_model():
    spec = normbench.get_norm
    m = nn.Module()
    m.tok = spec("rmsnorm").create(16, eps=1e-5)
    m.img = spec("rmsnorm").create(8, layout="images")
    m.add_rms = spec("add_rmsnorm").create(16)       # the residual-add sites: the add fused with the norm ...
    m.add_ln = spec("add_layernorm").create(16)
    m.lin = nn.Linear(16, 16)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return m


def _native_run(m, x, r, img):
    y, s = m.add_rms(x, r)
    z, s2 = m.add_ln(m.lin(y), s)    # (the norm before the add, OLMo-2's order, is test_every_family's olmo2)
    return m.tok(z).sum() + s2.sum() + m.img(img).sum()


def test_normbench_modules_by_shape_both_layouts_and_residual_sites(backends):
    x, r, img = torch.randn(2, 3, 16), torch.randn(2, 3, 16), torch.randn(2, 8, 4, 4)
    m = _native_model()
    ref = copy.deepcopy(m)
    docs = [shape_policy("rmsnorm", "tokens", (2, 3, 16)), shape_policy("rmsnorm", "images", (2, 8, 4, 4)),
            shape_policy("add_rmsnorm", "tokens", (2, 3, 16)), shape_policy("add_layernorm", "tokens", (2, 3, 16))]
    doc = {**docs[0], "answers": [a for d in docs for a in d["answers"]],
           "policy": [p for d in docs for p in d["policy"]]}
    report = apply_policy(m, doc)
    assert {r["module"] for r in report.replaced} == {"tok", "img", "add_rms", "add_ln"}
    assert list(m.state_dict()) == list(ref.state_dict())
    for train in (False, True):
        m.train(train), ref.train(train)
        xs = [t.clone().requires_grad_(train) for t in (x, r, img)]
        xr = [t.clone().requires_grad_(train) for t in (x, r, img)]
        calls = CALLS["twin"]
        with torch.set_grad_enabled(train):
            got, want = _native_run(m, *xs), _native_run(ref, *xr)
        assert CALLS["twin"] - calls == 4
        assert _close(got, want)
        if train:
            got.backward(), want.backward()
            for a, b in zip(xs, xr):
                assert _close(a.grad, b.grad)
            grads = dict(ref.named_parameters())
            for name, p in m.named_parameters():
                assert _close(p.grad, grads[name].grad), name
    restore(m)
    assert type(m.tok).__name__ == "RMSNorm" and type(m.add_ln).__name__ == "AddLayerNorm"


def test_bad_policy_input_says_what_it_wants(tmp_path):
    model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="not a `normbench best --json` policy"):
        apply_policy(model, {"schema": "something else"})
    with pytest.raises(FileNotFoundError, match="normbench best --model NAME --json"):
        apply_policy(model, tmp_path / "missing.json")
    with pytest.raises(TypeError, match="a path to it"):
        apply_policy(model, 42)


@pytest.mark.parametrize("family", ["gemma3", "olmo2", "qwen3"])
@pytest.mark.parametrize("weights", [torch.float32, torch.bfloat16])
def test_bfloat16_each_module_within_best_tolerance(family, weights, backends):
    """Module by module on bfloat16 inputs, weights in float32 (mixed precision) or bfloat16 (Gemma and OLMo-2
    multiply before casting to the input's dtype, Llama-likes cast then multiply, promoting): the replaced module's
    output, its dtype, and the gradients against the original's within best's bfloat16 tolerance."""
    model, config = tiny(family)
    model.to(weights)
    ref = copy.deepcopy(model)
    apply_policy(model, model_policy(config, dtypes=("bfloat16",)))
    tol = best.ERR_TOL["bfloat16"]
    calls = CALLS["twin"]
    for path in _rmsnorm_paths(ref):
        new, old = model.get_submodule(path), ref.get_submodule(path)
        x = torch.randn(2, 3, old.weight.shape[0], dtype=torch.bfloat16) * 2
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = new(xa), old(xb)
        assert ya.dtype == yb.dtype and _close(ya.float(), yb.float(), tol), path
        dy = torch.randn_like(yb)
        ya.backward(dy), yb.backward(dy)
        assert _close(xa.grad.float(), xb.grad.float(), tol), path
        assert _close(new.weight.grad.float(), old.weight.grad.float(), tol), path
    assert CALLS["twin"] - calls == len(_rmsnorm_paths(ref))
