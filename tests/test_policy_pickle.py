"""A policy-applied model pickles (``torch.save(model)``, a process pool, a Ray task) as the model it was: each
site as its original module with the site's own parameters (the policy's backends, tables and generated calls
belong to the process that made them: compiled code, Triton launchers). It said ``PicklingError: Can't pickle <class
'normbench.policy.dispatch.PolicyNorm'>`` (each site's class of its own). A deep copy stays a policy-applied model."""

from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch
from test_policy import _close, tiny
from test_policy_serving import SEEN, _sites, split, split_policy  # noqa: F401  (split: a fixture)

from normbench.policy import PolicyFallbackWarning, apply_policy


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_policy_applied_model_saves_and_loads_as_the_original(family, split):  # noqa: F811
    model, config = tiny(family)
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config))
    sites = _sites(model)
    assert sites
    with torch.no_grad():   # the lean path runs, Gemma's cached 1 + w made
        model(torch.randint(0, 64, (1, 1)), use_cache=False)
    buf = io.BytesIO()
    with pytest.warns(PolicyFallbackWarning, match="call normbench.apply_policy on the model again"):
        torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    # the model as it was before the policy: its own module classes, the same parameters (Gemma's weight, not 1 + w)
    assert not _sites(loaded)
    assert [(n, type(m)) for n, m in loaded.named_modules()] == [(n, type(m)) for n, m in ref.named_modules()]
    want = _state(model)
    got = _state(loaded)
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    ids = torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        assert _close(loaded(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
    # the loaded model takes the policy again, and runs it
    apply_policy(loaded, split_policy(config))
    one = torch.randint(0, 64, (1, 1))
    SEEN.clear()
    with torch.no_grad():
        assert _close(loaded(one, use_cache=False).logits, ref(one, use_cache=False).logits)
    assert set(SEEN) == {"a"}   # a one-token decode step: the decode answer at every site
    # a deep copy is still policy-applied, resolved on its own parameters (none shared with the model)
    dup = copy.deepcopy(model)
    assert len(_sites(dup)) == len(sites)
    assert not {id(p) for p in dup.parameters()} & {id(p) for p in model.parameters()}
    SEEN.clear()
    with torch.no_grad():
        assert _close(dup(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
    assert SEEN


def test_pickling_warns_once_not_once_per_site(split):  # noqa: F811
    """A 2-layer Llama has 5 sites; under Python's default warning filter pickling it says so once (it said it 5 times:
    each site's message named the site)."""
    model, config = tiny("llama")
    apply_policy(model, split_policy(config))
    assert len(_sites(model)) > 1
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        torch.save(model, io.BytesIO())
    said = [w for w in seen if issubclass(w.category, PolicyFallbackWarning)]
    assert len(said) == 1, [str(w.message) for w in said]
    assert "LlamaRMSNorm sites pickle as the original modules" in str(said[0].message)
    assert said[0].filename == __file__   # it names the torch.save line, not a frame inside torch or pickle
