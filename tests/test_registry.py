"""The registry: public interface, metadata, discovery and errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import normbench
from normbench.registry import NormSpec, Paper

EXPECTED = {
    "layernorm", "rmsnorm", "crmsnorm", "srmsnorm", "scalenorm", "layernorm_scaling", "add_layernorm", "add_rmsnorm",
    "groupnorm", "instancenorm", "evonorm_s0", "evonorm_b0", "batchnorm", "ghost_batchnorm", "powernorm",
    "unified_norm", "online_norm", "batch_channel_norm", "dyt", "derf", "none", "weight_norm", "weight_std",
    "scaled_ws", "spectral_norm", "sigma_reparam", "qk_norm", "fixnorm", "ngpt",
}


def test_every_builtin_is_registered_through_entry_points():
    from importlib import metadata

    eps = {ep.name for ep in metadata.entry_points().select(group="normbench.norms")
           if ep.value.startswith("normbench.")}
    assert EXPECTED <= eps, f"built-ins missing from the entry-point group: {EXPECTED - eps}"
    assert EXPECTED <= set(normbench.list_norms())


def test_metadata_is_complete_and_valid():
    for name in EXPECTED:
        spec = normbench.get_norm(name)
        spec.validate()
        assert spec.paper.url.startswith("https://arxiv.org/abs/")
        assert 2014 <= spec.paper.year <= 2026
        d = spec.to_dict()
        json.dumps(d)
        assert d["name"] == name and d["paper"]["title"]


def test_unknown_name_lists_close_matches():
    with pytest.raises(KeyError, match="rmsnorm"):
        normbench.get_norm("rmsnrom")
    with pytest.raises(KeyError, match="layernorm"):
        normbench.get_norm("layer_norm")


def test_name_is_normalised():
    assert normbench.get_norm("LayerNorm").name == "layernorm"
    assert normbench.get_norm("ghost-batchnorm").name == "ghost_batchnorm"


def test_create_layouts_and_errors():
    ln = normbench.get_norm("layernorm")
    assert ln.create(24)(torch.randn(2, 3, 24)).shape == (2, 3, 24)
    assert ln.create(8, layout="images")(torch.randn(2, 8, 4, 5)).shape == (2, 8, 4, 5)
    with pytest.raises(ValueError, match="layouts"):
        normbench.get_norm("qk_norm").create(8, layout="images")
    with pytest.raises(KeyError, match="backend"):
        ln.create(8, backend="cuda-magic")


def test_layernorm_scaling_needs_depth():
    lns = normbench.get_norm("layernorm_scaling")
    x = torch.randn(3, 16)
    y1 = lns.create(16, depth=1)(x)
    y4 = lns.create(16, depth=4)(x)
    torch.testing.assert_close(y4, y1 / 2)
    with pytest.raises(ValueError, match="depth"):
        lns.create(16, depth=0)


def test_compile_backend_keeps_parameters_and_state_dict():
    spec = normbench.get_norm("rmsnorm")
    torch.manual_seed(0)
    eager = spec.create(16)
    torch.manual_seed(0)
    compiled = spec.create(16, backend="compile")
    assert list(eager.state_dict()) == list(compiled.state_dict())
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in eager.named_parameters()]


def test_triton_backend_unavailable_is_reported_not_crashing(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    spec = normbench.get_norm("layernorm")
    assert "triton" in spec.backends
    if not torch.cuda.is_available():
        reason = spec.backend_unavailable("triton")
        assert reason
        with pytest.raises(normbench.BackendUnavailable, match="unavailable"):
            spec.create(16, backend="triton")


@pytest.mark.parametrize("bad, match", [
    (dict(name="Bad Name"), "name"),
    (dict(kind="magic"), "kind"),
    (dict(layouts=("sequences",)), "layouts"),
    (dict(family="misc"), "family"),
    (dict(formula=""), "formula"),
    (dict(paper=Paper("t", "a", 2020, "javascript:alert(1)")), "url"),
])
def test_invalid_specs_are_rejected(bad, match):
    good = dict(name="ok", title="Ok", paper=Paper("t", "a", 2020, "https://example.org"), family="features",
                kind="activation", layouts=("tokens",), formula="y = x", factory=lambda c, layout="tokens": None)
    with pytest.raises(ValueError, match=match):
        NormSpec(**{**good, **bad}).validate()


def test_import_is_light():
    heavy = "('triton', 'timm', 'datasets', 'pandas')"
    code = f"import sys, normbench; normbench.list_norms(); print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_whole_zoo_passes_the_contract():
    from normbench.check import check_norm

    failures = [f"{r.norm}: {r.check}: {r.detail}" for name in sorted(EXPECTED)
                for r in check_norm(normbench.get_norm(name)) if not r.ok]
    assert not failures, "\n".join(failures)


def test_uninstalled_source_tree_still_finds_the_builtins(monkeypatch):
    """With no entry points visible (PYTHONPATH=. on a machine without an install), the built-ins still load."""
    from importlib import metadata

    from normbench.discovery import Registry

    class NoEntryPoints:
        def select(self, group):
            return []

    monkeypatch.setattr(metadata, "entry_points", lambda: NoEntryPoints())
    reg = Registry()
    assert EXPECTED <= set(reg.names()) and reg.errors == []


def test_adopt_state_shares_parameters_buffers_and_none_slots():
    from torch import nn

    from normbench.registry import adopt_state

    bn = nn.BatchNorm1d(4, affine=False)
    bn.register_parameter("extra", nn.Parameter(torch.ones(2)))
    wrapper = nn.Module()
    adopt_state(wrapper, bn)
    assert list(wrapper.state_dict()) == list(bn.state_dict())
    assert wrapper.extra is bn.extra and wrapper.running_mean is bn.running_mean
    assert "weight" in wrapper._parameters and wrapper.weight is None
