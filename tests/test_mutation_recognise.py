"""#52: ``normbench.policy.recognise`` read as a user's model meets it: which eps a norm module says it uses, which
forms its parameters allow, and the eps recovered from its output when it says none. Every module here is built
with a known form and eps (torch's own ``nn.LayerNorm``/``nn.RMSNorm`` and small modules written out from the
formulas); the probe must name exactly that form, its creation arguments and eps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.policy.recognise import _config_eps, _eps_attr, find, probe_any

W = 64


class _HiddenRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * scale, eps kept under a name no probe reads (``_e``), unless ``attr`` names one."""

    def __init__(self, eps: float, offset: bool = False, attr: str | None = None, weight: bool = True):
        super().__init__()
        self._e, self.offset, self.normalized_shape = eps, offset, (W,)
        if weight:
            g = torch.Generator().manual_seed(3)
            self.weight = nn.Parameter(torch.rand(W, generator=g) + 0.5)
        if attr:
            setattr(self, attr, eps)

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self._e)
        if "weight" not in self._parameters:
            return y
        return y * ((1 + self.weight) if self.offset else self.weight)


class _HiddenLayerNorm(nn.Module):
    """LayerNorm over the last dim with eps under a hidden name; weight and bias as asked."""

    def __init__(self, eps: float, weight: bool = True, bias: bool = True):
        super().__init__()
        self._e = eps
        g = torch.Generator().manual_seed(4)
        if weight:
            self.weight = nn.Parameter(torch.rand(W, generator=g) + 0.5)
        if bias:
            self.bias = nn.Parameter(torch.randn(W, generator=g))
        self.normalized_shape = (W,)

    def forward(self, x):
        return nn.functional.layer_norm(x, (W,), self._parameters.get("weight"), self._parameters.get("bias"),
                                        self._e)


@pytest.mark.parametrize("attr", ["variance_epsilon", "eps", "epsilon", "rms_norm_eps", "layer_norm_eps"])
def test_each_named_eps_attribute_is_read(attr):
    m = nn.Module()
    setattr(m, attr, 3e-6)
    assert _eps_attr(m) == 3e-6 and isinstance(_eps_attr(m), float)
    setattr(m, attr, 2)   # an int is a number too
    assert _eps_attr(m) == 2.0


def test_eps_attributes_are_read_in_their_order_and_only_numbers_count():
    m = nn.Module()
    m.layer_norm_eps, m.rms_norm_eps, m.epsilon, m.eps, m.variance_epsilon = 5.0, 4.0, 3.0, 2.0, 1.0
    assert _eps_attr(m) == 1.0
    m.variance_epsilon = True            # a flag, not an eps
    assert _eps_attr(m) == 2.0
    m.eps = "1e-6"                       # a string is not read
    assert _eps_attr(m) == 3.0
    m.epsilon = None
    assert _eps_attr(m) == 4.0
    del m.rms_norm_eps
    assert _eps_attr(m) == 5.0
    assert _eps_attr(nn.Module()) is None


@pytest.mark.parametrize("module, want", [
    (nn.LayerNorm(W), ("layernorm", False, 1e-5, {})),
    (nn.LayerNorm(W, bias=False), ("layernorm", False, 1e-5, {"bias": False})),
    (nn.LayerNorm(W, elementwise_affine=False, eps=1e-6), ("layernorm", False, 1e-6, {"affine": False})),
    (nn.RMSNorm(W, eps=1e-6), ("rmsnorm", False, 1e-6, {})),
    (nn.RMSNorm(W, eps=1e-6, elementwise_affine=False), ("rmsnorm", False, 1e-6, {"affine": False})),
    (_HiddenRMSNorm(1e-6, offset=True, attr="eps"), ("rmsnorm", True, 1e-6, {})),
], ids=["ln", "ln-nobias", "ln-noaffine", "rms", "rms-noaffine", "rms-offset"])
def test_each_form_its_parameters_allow_is_named_with_its_creation_arguments(module, want):
    got, why = probe_any(module, None)
    assert why == "" and got is not None
    norm, offset, eps, create = got
    assert (norm, offset, create) == (want[0], want[1], want[3])
    assert eps == want[2]   # the module's own eps, read, not recovered


@pytest.mark.parametrize("module, norm, offset, eps", [
    (_HiddenRMSNorm(1e-6), "rmsnorm", False, 1e-6),
    (_HiddenRMSNorm(3e-4, offset=True), "rmsnorm", True, 3e-4),
    (_HiddenRMSNorm(2e-5, weight=False), "rmsnorm", False, 2e-5),
    (_HiddenLayerNorm(1e-5), "layernorm", False, 1e-5),
    (_HiddenLayerNorm(4e-6, bias=False), "layernorm", False, 4e-6),
    (_HiddenLayerNorm(1e-5, weight=False, bias=False), "layernorm", False, 1e-5),
], ids=["rms", "rms-offset", "rms-noaffine", "ln", "ln-nobias", "ln-noaffine"])
def test_an_unnamed_eps_is_recovered_from_the_output_within_one_percent(module, norm, offset, eps):
    got, why = probe_any(module, None)
    assert why == "" and got is not None
    assert got[:2] == (norm, offset)
    assert got[2] == pytest.approx(eps, rel=0.01)


def test_an_eps_from_the_models_config_is_used_when_the_module_has_none():
    class Config:
        rms_norm_eps = 1e-6

    got, why = probe_any(_HiddenRMSNorm(1e-6), Config())
    assert why == "" and got[2] == 1e-6          # exact: the config's, not recovered
    got, why = probe_any(_HiddenRMSNorm(1e-2), Config())   # config 1e-6, computed with 1e-2: refused
    assert got is None and "none of RMSNorm or LayerNorm" in why


def test_a_module_that_normalises_without_eps_is_not_given_one():
    """eps 0: what is recovered is rounding noise, which the check at rows of size sqrt(eps) refuses."""
    got, why = probe_any(_HiddenRMSNorm(0.0), None)
    assert got is None and why.startswith("its output on the probe is none of RMSNorm or LayerNorm")


def test_what_each_form_differs_by_is_said_when_none_matches():
    class Twice(_HiddenRMSNorm):
        def forward(self, x):
            return 2 * super().forward(x)

    got, why = probe_any(Twice(1e-6, attr="eps"), None)
    assert got is None
    assert why.startswith("its output on the probe is none of RMSNorm or LayerNorm over the last dim (differs from "
                          "rmsnorm by ")
    assert ", rmsnorm (1 + w) by " in why and ", layernorm by " in why


def test_find_reports_each_recovered_module_with_its_width_and_form():
    m = nn.Module()
    m.q_norm = _HiddenRMSNorm(1e-6, offset=True)
    m.out_norm = _HiddenLayerNorm(1e-5, bias=False)
    found, left = find(m)
    assert left == []
    got = {f.path: (f.norm, f.offset, f.width, f.create) for f in found}
    assert got == {"q_norm": ("rmsnorm", True, W, {}), "out_norm": ("layernorm", False, W, {"bias": False})}


def test_a_multimodal_configs_eps_is_read_from_its_text_config():
    """Gemma 3's ``Gemma3Config`` keeps ``rms_norm_eps`` in its text config (``get_text_config()``); a config's own
    ``rms_norm_eps`` comes first."""
    tr = pytest.importorskip("transformers")
    text = {"rms_norm_eps": 3e-6, "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 32, "intermediate_size": 64, "vocab_size": 128}
    config = tr.Gemma3Config(text_config=text)
    assert getattr(config, "rms_norm_eps", None) is None
    got, why = probe_any(_HiddenRMSNorm(3e-6), config)
    assert why == "" and got[2] == 3e-6   # exact: the text config's, not recovered

    class Both:
        rms_norm_eps = 1e-6

        def get_text_config(self):
            return config.get_text_config()

    got, why = probe_any(_HiddenRMSNorm(1e-6), Both())
    assert why == "" and got[2] == 1e-6
    assert _config_eps(Both()) == 1e-6 and _config_eps(config) == 3e-6 and _config_eps(None) is None

    class Neither:
        def get_text_config(self):
            return object()

    assert _config_eps(Neither()) is None and _config_eps(object()) is None


def test_a_recovered_eps_does_not_depend_on_the_global_random_state():
    """The probe draws its rows from its own seeded generator: the same module is recognised with the same eps
    whatever the caller's RNG did before (and the caller's RNG state is left as it was)."""
    eps = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        state = torch.get_rng_state()
        got, why = probe_any(_HiddenRMSNorm(1e-6), None)
        assert why == "" and torch.equal(torch.get_rng_state(), state)
        eps.append(got[2])
    assert eps[0] == eps[1]


def test_a_module_whose_recovered_eps_is_not_positive_is_refused_with_what_it_computes():
    """A module computing x / sqrt(mean(x^2) - 1e-7): the eps the probe recovers is negative, so no RMSNorm form is
    tried with it (a negative eps's square root made the probe fail instead of saying what differs)."""
    got, why = probe_any(_HiddenRMSNorm(-1e-7, weight=False), None)
    assert got is None
    assert why.startswith("its output on the probe is none of RMSNorm or LayerNorm over the last dim (differs from ")
    assert "rmsnorm" not in why
