"""#52: what ``normbench.policy.recognise`` lets through to its probe and what it says of a model's norms: the
class pre-filter (``_candidate``), transformers' RMSNorms (``_hf``: their weight, and the eps the module names or
else the model's config), normbench's own modules inside a model (``find``), the registry's module classes
(``_native_classes``) and the output-dtype rule (``_cast_rule``). The modules are torch's, transformers' and
normbench's own, or written here from their formulas."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from test_mutation_recognise import W, _HiddenRMSNorm
from torch import nn

from normbench.policy import recognise as rec

transformers_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
transformers_gemma3 = pytest.importorskip("transformers.models.gemma3.modeling_gemma3")


def _rand_weight(m: nn.Module, offset: float = 0.5, seed: int = 7) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.copy_(torch.rand(m.weight.shape, generator=g) + offset)
    return m


def _llama(eps: float = 1e-6) -> nn.Module:
    return _rand_weight(transformers_llama.LlamaRMSNorm(W, eps=eps))


def _gemma3(eps: float = 1e-6) -> nn.Module:
    return _rand_weight(transformers_gemma3.Gemma3RMSNorm(W, eps=eps), offset=-0.5)


class _Model(nn.Module):
    """A model as ``find`` sees one: named sub-modules in order, and a ``config`` (None: the model has none)."""

    def __init__(self, config=None, **modules):
        super().__init__()
        self.config = config
        for name, m in modules.items():
            setattr(self, name, m)


def _cfg(eps: float):
    return types.SimpleNamespace(rms_norm_eps=eps)


# --- _candidate: which modules the probe is even tried on ------------------------------------------------------------

class _ParamNorm(nn.Module):
    """A leaf whose class name says norm, with the parameters given as ``name=shape``."""

    def __init__(self, **shapes):
        super().__init__()
        for name, shape in shapes.items():
            setattr(self, name, nn.Parameter(torch.ones(shape)))


class _WrapNorm(nn.Module):
    """A container whose name says norm (a block holding a LayerNorm): not a leaf, so not one norm."""

    def __init__(self):
        super().__init__()
        self.inner = nn.LayerNorm(W)


@pytest.mark.parametrize("module, passes", [
    (nn.LayerNorm(W), True),
    (nn.LayerNorm(W, elementwise_affine=False), True),
    (nn.RMSNorm(W), True),
    (_ParamNorm(), True),                                   # no parameters at all
    (_ParamNorm(weight=W, bias=W), True),
    (nn.GroupNorm(2, W), False),                            # statistics over channel groups
    (nn.InstanceNorm1d(W, affine=True), False),             # statistics per instance
    (nn.BatchNorm1d(W), False),                             # statistics over the batch
    (nn.Linear(W, W), False),                               # its name does not say norm
    (_WrapNorm(), False),                                   # it has a sub-module
    (_ParamNorm(weight=(W, W)), False),                     # a 2-d weight
    (_ParamNorm(weight=W, gain=W), False),                  # a parameter no zoo norm has, even a 1-d one
], ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else str(v))
def test_the_pre_filter_lets_through_leaves_named_norm_with_a_1d_weight_and_bias_or_none(module, passes):
    assert rec._candidate(module) is passes


def test_what_the_pre_filter_stops_is_reported_as_not_drivable_and_never_probed():
    model = _Model(gn=nn.GroupNorm(2, W), inst=nn.InstanceNorm1d(W, affine=True), wrap=_WrapNorm())
    found, left = rec.find(model)
    assert [f.path for f in found] == ["wrap.inner"]          # the LayerNorm inside the block is one norm
    assert [(x["module"], x["class"]) for x in left] == [
        ("gn", "torch.nn.modules.normalization.GroupNorm"), ("inst", "torch.nn.modules.instancenorm.InstanceNorm1d"),
        ("wrap", f"{__name__}._WrapNorm")]
    assert {x["reason"] for x in left} == {
        "not a norm normbench can drive: it has sub-modules, or parameters other than a 1-d weight and bias, or it "
        "normalises over the batch, groups or instances"}


# --- _hf: transformers' RMSNorm classes --------------------------------------------------------------------------

def test_a_transformers_rmsnorm_is_taken_with_the_eps_it_names_not_the_configs():
    """Llama names eps ``variance_epsilon``, Gemma 3 ``eps``; the config's ``rms_norm_eps`` (here another value)
    is only for a module that names none."""
    found, left = rec.find(_Model(_cfg(1e-6), llama=_llama(1e-2), gemma=_gemma3(1e-2)))
    assert left == []
    got = {f.path: (f.norm, f.layout, f.width, f.eps, f.offset) for f in found}
    assert got == {"llama": ("rmsnorm", "tokens", W, 1e-2, False), "gemma": ("rmsnorm", "tokens", W, 1e-2, True)}


class _QuietRMSNorm(nn.Module):
    """Llama's RMSNorm as a transformers class that keeps its eps where no probe reads it (``_e``): as find sees a
    class of that name from transformers whose instances do not name their eps."""

    def __init__(self, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))
        self._e = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self._e))


_QuietRMSNorm.__name__ = _QuietRMSNorm.__qualname__ = "Qwen3RMSNorm"
_QuietRMSNorm.__module__ = "transformers.models.qwen3.modeling_qwen3"


def test_a_transformers_rmsnorm_naming_no_eps_takes_the_models_config():
    found, left = rec.find(_Model(_cfg(1e-2), norm=_rand_weight(_QuietRMSNorm(1e-2))))
    assert left == [] and [(f.path, f.eps) for f in found] == [("norm", 1e-2)]


def test_a_transformers_rmsnorm_with_no_eps_anywhere_is_left_with_the_reason():
    found, left = rec.find(_Model(None, norm=_rand_weight(_QuietRMSNorm(1e-2))))
    assert found == [] and left == [{"module": "norm", "class": "Qwen3RMSNorm", "reason": (
        "neither the module nor the model's config (rms_norm_eps) gives its eps")}]


def _no_weight(m):
    m.weight = None
    return m


def _deleted_weight(m):
    del m.weight
    return m


def _square_weight(m):
    m.weight = nn.Parameter(torch.ones(W, W))
    return m


@pytest.mark.parametrize("change", [_no_weight, _deleted_weight, _square_weight])
def test_a_transformers_rmsnorm_without_a_1d_weight_is_left_with_the_reason(change):
    found, left = rec.find(_Model(_cfg(1e-6), norm=change(_llama())))
    assert found == [] and left == [{"module": "norm", "class": "LlamaRMSNorm", "reason": "it has no 1-d weight"}]


# --- find: normbench's own modules in a model ------------------------------------------------------------------------

def _zoo(name: str, **kw) -> nn.Module:
    from normbench.discovery import REGISTRY
    from normbench.registry import resolve

    return resolve(REGISTRY.get(name).factory)(W, **kw)


def test_normbench_modules_are_found_with_their_own_width_layout_and_eps():
    rms, ln = _zoo("rmsnorm", eps=1e-3), _zoo("layernorm", eps=1e-4)
    found, left = rec.find(_Model(None, rms=rms, ln=ln))
    assert left == []
    assert [(f.path, f.module, f.norm, f.layout, f.width, f.eps, f.native) for f in found] == [
        ("rms", rms, "rmsnorm", rms.layout, W, 1e-3, True), ("ln", ln, "layernorm", ln.layout, W, 1e-4, True)]


def test_a_normbench_module_without_a_layout_is_taken_as_tokens():
    rms = _zoo("rmsnorm")
    del rms.layout
    found, _ = rec.find(_Model(None, rms=rms))
    assert [(f.path, f.layout) for f in found] == [("rms", "tokens")]


def test_a_normbench_module_without_its_width_is_left_and_the_rest_of_the_model_still_looked_at():
    broken = _zoo("rmsnorm")
    del broken.num_features
    later = _zoo("layernorm")
    found, left = rec.find(_Model(None, broken=broken, later=later))
    assert left == [{"module": "broken", "class": "RMSNorm", "reason": "it has no num_features"}]
    assert [f.path for f in found] == ["later"]


def test_a_normbench_module_without_an_eps_is_found_with_none():
    rms = _zoo("rmsnorm")
    del rms.eps
    found, _ = rec.find(_Model(None, rms=rms))
    assert [(f.path, f.eps) for f in found] == [("rms", None)]


# --- find: any other module whose class says norm, by what it computes ------------------------------------------------

class _PromotingRMSNorm(nn.Module):
    """Llama's RMSNorm written out (weight * x.to(input dtype): a bfloat16 input comes back float32), eps under a
    name no probe reads: the model's config or the probe's recovery gives it."""

    def __init__(self, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(W, generator=torch.Generator().manual_seed(13)) + 0.5)
        self._e = eps

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self._e)).to(x.dtype)


class _CastingRMSNorm(_PromotingRMSNorm):
    """Gemma's order: (x * w) cast back to the input's dtype."""

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self._e) * self.weight).to(x.dtype)


def test_a_module_naming_no_eps_is_held_to_the_configs():
    """The config's ``rms_norm_eps`` is the eps a module that names none is held to: taken exactly where the module
    computes with it, and the module left alone where it computes with another (not an eps recovered instead)."""
    found, left = rec.find(_Model(_cfg(1e-2), norm=_PromotingRMSNorm(1e-2)))
    assert left == [] and [(f.path, f.norm, f.eps) for f in found] == [("norm", "rmsnorm", 1e-2)]
    found, left = rec.find(_Model(_cfg(1e-6), norm=_PromotingRMSNorm(1e-2)))
    assert found == [] and [(x["module"], x["class"]) for x in left] == [
        ("norm", f"{__name__}._PromotingRMSNorm")]
    assert left[0]["reason"].startswith("its output on the probe is none of RMSNorm or LayerNorm over the last dim")


def test_each_found_module_says_whether_its_output_keeps_the_inputs_dtype():
    """Promoting (Llama's order), casting back (Gemma's), and a LayerNorm without weight (nothing to promote
    with: its output keeps the input's dtype) with its width from ``normalized_shape``."""
    model = _Model(None, promotes=_PromotingRMSNorm(1e-5), casts=_CastingRMSNorm(1e-5),
                   bare=nn.LayerNorm(W, eps=1e-5, elementwise_affine=False))
    found, left = rec.find(model)
    assert left == []
    got = {f.path: (f.norm, f.width, f.cast_to_input, f.create) for f in found}
    assert got == {"promotes": ("rmsnorm", W, False, {}), "casts": ("rmsnorm", W, True, {}),
                   "bare": ("layernorm", W, True, {"affine": False})}
    assert all(type(f.cast_to_input) is bool for f in found)


def test_torchs_rmsnorm_with_eps_none_is_left_with_the_reason():
    found, left = rec.find(_Model(None, norm=nn.RMSNorm(W)))
    assert found == [] and left == [{"module": "norm", "class": "torch.nn.modules.normalization.RMSNorm", "reason": (
        "eps=None: torch uses the input dtype's machine epsilon, which no fixed-eps implementation computes")}]


# --- _native_classes: the registry's module classes, whatever a plugin's factory is -----------------------------------

def test_a_plugin_factory_that_cannot_import_or_is_a_function_does_not_hide_the_other_classes(monkeypatch):
    from normbench.discovery import REGISTRY

    specs = REGISTRY.specs
    without = rec._native_classes()
    assert without[type(_zoo("rmsnorm"))] == "rmsnorm" and without[type(_zoo("layernorm"))] == "layernorm"
    rms = specs["rmsnorm"]
    broken = dataclasses.replace(rms, name="broken_plugin", factory="normbench_no_such_module_xyz:Norm")
    func = dataclasses.replace(rms, name="function_plugin", factory="normbench.norms.groups:default_num_groups")
    monkeypatch.setattr(REGISTRY, "_specs", {"broken_plugin": broken, "function_plugin": func, **specs})
    assert rec._native_classes() == without   # both plugins first: neither hides a class, neither adds one


# --- _cast_rule: does the module hand back its input's dtype? ------------------------------------------------------

class _Rows(nn.Module):
    """Llama's RMSNorm computed on the input viewed as rows of W (as a fused kernel views it): it needs a batch
    dimension, and promotes a bfloat16 input with its float32 weight as Llama does."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))

    def forward(self, x):
        rows = x.flatten(0, -2).float()
        y = rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * y.to(x.dtype).view(x.shape)


class _Float32Only(nn.Module):
    """Refuses any input whose dtype is not its weight's (as some fused LayerNorms refuse mixed dtypes)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))

    def forward(self, x):
        if x.dtype != self.weight.dtype:
            raise TypeError(f"expected {self.weight.dtype}, got {x.dtype}")
        return x * self.weight


def test_the_output_dtype_rule_of_each_kind_of_module():
    assert rec._cast_rule(_llama()) is False           # weight * x.to(bfloat16): promoted to float32
    assert rec._cast_rule(_gemma3()) is True           # (x * w).type_as(x): the input's dtype
    assert rec._cast_rule(_llama().bfloat16()) is True  # a weight no wider than the input: its dtype either way
    assert rec._cast_rule(_Rows()) is False            # probed with a batch of rows, as a model calls it
    assert rec._cast_rule(_Float32Only()) is True      # refuses mixed dtypes: never promotes


def test_the_output_dtype_is_probed_on_the_weights_device():
    """A model on the meta device (built to be inspected, not run): the probe input is made where the weight is,
    so the rule is read from the module's own computation instead of a device mismatch."""
    assert rec._cast_rule(_llama().to("meta")) is False
    assert rec._cast_rule(_gemma3().to("meta")) is True


# --- probe's tolerance and its reasons -------------------------------------------------------------------------------

class _OffByTolerance(nn.Module):
    """RMSNorm computed in float64, plus 1e-5 x (k + its largest output): the probe's tight tolerance is
    1e-5 x (1 + the reference's largest output), so k = 1.5 is just outside it, k = 0.5 just inside."""

    def __init__(self, k: float, eps: float = 1e-6):
        super().__init__()
        g = torch.Generator().manual_seed(9)
        self.weight = nn.Parameter(torch.rand(W, generator=g) + 0.5)
        self.variance_epsilon, self.k = eps, k

    def forward(self, x):
        xd = x.double()
        y = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight.double()
        return y + 1e-5 * (self.k + y.abs().max())


def test_probe_draws_its_tight_tolerance_at_1e5_of_one_plus_the_largest_output():
    assert rec.probe(_OffByTolerance(0.5), 1e-6, False) is None
    said = rec.probe(_OffByTolerance(1.5), 1e-6, False)
    assert said is not None and said.startswith("its output differs from x / sqrt(mean(x^2) + 1e-06) * weight by ")


def test_probe_any_holds_a_module_that_names_its_eps_to_the_same_tolerance():
    assert rec.probe_any(_OffByTolerance(0.5), None)[0] == ("rmsnorm", False, 1e-6, {})
    found, why = rec.probe_any(_OffByTolerance(1.5), None)
    assert found is None and why.startswith("its output on the probe is none of RMSNorm or LayerNorm"), why


class _Raises(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))

    def forward(self, x):
        raise ValueError("no probe for me")


def test_probe_says_the_error_of_a_module_that_fails():
    assert rec.probe(_Raises(), 1e-6, False) == "it failed on a probe input: ValueError: no probe for me"


# --- on a GPU: every probe input is made on the module's device ------------------------------------------------------

_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: on a machine whose only device is the "
                           "CPU, a probe input made on the CPU is on the module's device whatever the code asks")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_CUDA)])
def test_a_model_is_probed_on_its_own_device(device):
    """transformers' RMSNorm (probe), torch's LayerNorm (probe_any, eps named) and a norm whose eps is recovered
    (probe_any's recovery): each found on CUDA as on the CPU (docs/gpu-not-rehearsed.md)."""
    model = _Model(None, llama=_llama(1e-5), ln=nn.LayerNorm(W, eps=1e-5), quiet=_HiddenRMSNorm(1e-5))
    found, left = rec.find(model.to(device))
    assert left == []
    got = {f.path: (f.norm, f.width) for f in found}
    assert got == {"llama": ("rmsnorm", W), "ln": ("layernorm", W), "quiet": ("rmsnorm", W)}
    assert {f.path: f.eps for f in found}["quiet"] == pytest.approx(1e-5, rel=0.01)
