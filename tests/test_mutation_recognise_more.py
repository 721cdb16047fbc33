"""#52: ``normbench.policy.recognise.probe_any`` on modules a user's model may hold that are *almost* a norm: each
must be left alone with the reason a person reads (or, for a true norm whose eps is unnamed, taken). Every module
is written out from its formula; none is a mirror of the probe's code."""

from __future__ import annotations

import pytest
import torch
from test_mutation_recognise import W, _HiddenRMSNorm
from torch import nn

from normbench.policy.recognise import probe, probe_any


class _Weighted(nn.Module):
    """A 1-d weight of width W and ``eps`` named as transformers names it."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.weight = nn.Parameter(torch.rand(W, generator=g) + 0.5)
        self.variance_epsilon = eps


class _ClampedRMSNorm(_Weighted):
    """x / sqrt(max(mean(x^2), eps)) * w: equal to RMSNorm where mean(x^2) is far from eps on either side, not where
    it is near eps (rows of size sqrt(eps)), which only a probe row of that size shows."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).clamp_min(self.variance_epsilon)) * self.weight


class _SecondDimNorm(_Weighted):
    """RMSNorm over dim 1 instead of the last: the same as the last dim's on a 2-d input, not on (batch, seq, W)."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + self.variance_epsilon) * self.weight


class _OffByAThousandth(_Weighted):
    """RMSNorm with its eps named, plus 1e-3 everywhere: close, but not what a drop-in replacement may compute."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight + 1e-3


class _CountingRMSNorm(_Weighted):
    """RMSNorm that counts its calls in a buffer (as a module with running statistics updates its buffers)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("absent", None)

    def forward(self, x):
        self.calls += 1
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight


class _Returns(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(W))
        self.eps = 1e-6
        self.what = what

    def forward(self, x):
        return self.what(x)


def test_a_module_with_no_weight_and_no_width_is_left_alone_with_the_reason():
    class Bare(nn.Module):
        def forward(self, x):
            return x

    assert probe_any(Bare(), None) == (None, "it has no weight and no normalized_shape: its width is unknown")


def test_clamping_the_mean_square_at_eps_is_not_adding_eps():
    found, why = probe_any(_ClampedRMSNorm(1e-6), None)
    assert found is None, found
    assert why.startswith("its output on the probe is none of RMSNorm or LayerNorm over the last dim"), why


def test_a_norm_over_another_dim_than_the_last_is_left_alone():
    found, why = probe_any(_SecondDimNorm(), None)
    assert found is None, found
    assert "none of RMSNorm or LayerNorm over the last dim" in why


def test_a_module_that_names_its_eps_must_match_tightly():
    """1e-3 off is within the loose tolerance a recovered eps gets (5e-3), not within the one a named eps gets."""
    found, why = probe_any(_OffByAThousandth(), None)
    assert found is None, found
    assert "rmsnorm by 0.001" in why, why


def test_a_true_rmsnorm_with_an_unnamed_eps_is_taken_with_the_eps_it_recovers():
    """No eps attribute, no config: eps recovered from the output (within 1 %), then checked with the loose
    tolerance that a recovered eps needs (the tight one would refuse the module for the recovery's own error)."""
    for eps in (1e-6, 1e-5):
        found, why = probe_any(_HiddenRMSNorm(eps), None)
        assert found is not None, why
        norm, offset, got, create = found
        assert (norm, offset) == ("rmsnorm", False) and got == pytest.approx(eps, rel=0.01)


def test_the_probe_gives_back_every_buffer_it_changed():
    m = _CountingRMSNorm()
    found, why = probe_any(m, None)
    assert found is not None, why
    assert float(m.calls) == 0.0   # the probe ran the module, and put its buffer back


#: a forward that is not one tensor of its input's shape -> what the probes say of it
NOT_ONE_TENSOR = [
    (lambda x: (x, x), "it returns tuple () for input (2, 3, 64)"),
    (lambda x: x[..., :1], "it returns Tensor (2, 3, 1) for input (2, 3, 64)"),
    (lambda x: None, "it returns NoneType () for input (2, 3, 64)"),
]


@pytest.mark.parametrize("what, said", NOT_ONE_TENSOR)
def test_a_module_that_does_not_return_one_tensor_of_its_inputs_shape_is_told_what_it_returned(what, said):
    assert probe_any(_Returns(what), None) == (None, said)


class _RoundedRMSNorm(_HiddenRMSNorm):
    """RMSNorm whose output is rounded to bfloat16 (as a model run in bfloat16 hands it on), eps unnamed."""

    def forward(self, x):
        return super().forward(x).bfloat16().float()


def test_a_recovered_eps_is_checked_with_the_tolerance_its_recovery_allows():
    """eps recovered from a bfloat16-rounded output is within 1 %, and the output within bfloat16's rounding of the
    reference: taken, where the tight tolerance of a named eps would refuse it for the rounding alone."""
    found, why = probe_any(_RoundedRMSNorm(1e-5), None)
    assert found is not None, why
    assert found[:2] == ("rmsnorm", False) and found[2] == pytest.approx(1e-5, rel=0.01)


def test_the_reason_does_not_depend_on_the_global_random_state():
    """The probe draws from its own seeded generator: what it says of a module is the same whatever the caller's
    random state (a model's set-up code seeds torch as it likes)."""
    said = set()
    for seed in (1, 2):
        torch.manual_seed(seed)
        found, why = probe_any(_SecondDimNorm(), None)
        assert found is None
        said.add(why)
    assert len(said) == 1, said


class _Amplifier(_Weighted):
    """x times a million: no eps makes it a norm (the eps it would need is negative), and it names none."""

    def __init__(self):
        super().__init__()
        del self.variance_epsilon

    def forward(self, x):
        return x * 1e6


class _Broken(_Weighted):
    def forward(self, x):
        raise ValueError("no probe for me")


def test_a_module_no_eps_can_explain_says_so():
    assert probe_any(_Amplifier(), None) == (
        None, "its output on the probe is none of RMSNorm or LayerNorm over the last dim (differs from (eps unknown))")


def test_a_module_that_fails_on_the_probe_is_left_alone_with_its_error():
    assert probe_any(_Broken(), None) == (None, "it failed on a probe input: ValueError: no probe for me")


# --- probe(): a module of a known RMSNorm class (transformers') checked against what its class should compute ------

def test_probe_tells_a_clamped_mean_square_from_an_added_eps():
    said = probe(_ClampedRMSNorm(1e-6), 1e-6, False)
    assert said is not None and said.startswith("its output differs from x / sqrt(mean(x^2) + 1e-06) * weight by ")
    assert said.endswith("(rows of size 0.001): not the RMSNorm it looks like"), said


def test_probe_tells_a_norm_over_another_dim():
    said = probe(_SecondDimNorm(), 1e-6, False)
    assert said is not None and "(rows of size 1): not the RMSNorm it looks like" in said


def test_probe_passes_the_rmsnorm_its_class_computes():
    m = _Weighted()
    m.forward = lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.weight
    assert probe(m, 1e-6, False) is None


@pytest.mark.parametrize("what, said", NOT_ONE_TENSOR)
def test_probe_says_what_a_module_returned_instead_of_one_tensor(what, said):
    assert probe(_Returns(what), 1e-6, False) == said


def test_probes_reason_does_not_depend_on_the_global_random_state():
    said = set()
    for seed in (1, 2):
        torch.manual_seed(seed)
        said.add(probe(_SecondDimNorm(), 1e-6, False))
    assert len(said) == 1 and None not in said, said


def test_probe_names_the_scale_it_checked():
    said = probe(_ClampedRMSNorm(1e-6), 1e-6, True)   # Gemma's form: scale 1 + weight
    assert said is not None
    assert said.startswith("its output differs from x / sqrt(mean(x^2) + 1e-06) * (1 + weight) by "), said


class _NearlyRMSNorm(_Weighted):
    """RMSNorm plus 1e-5: float32 rounding's size for outputs of size ~1, inside the tolerance (1e-5 of 1 + the
    largest output), which is relative to the output's size and never tighter than 1e-5."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight + 1e-5


def test_probes_tolerance_grows_with_the_outputs_size():
    assert probe(_NearlyRMSNorm(), 1e-6, False) is None
