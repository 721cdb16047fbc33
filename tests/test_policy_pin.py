"""#49 "free per call": ``apply_policy(..., pin=REGIME)`` chooses once, as vLLM's CustomOp does. Each site's
``forward`` is the implementation the policy names for that regime at the model's dtype, so a call goes from the
site's ``nn.Module.__call__`` straight into the implementation: the same Python calls as the implementation called
bare (counted with ``sys.setprofile``, not timed). Other shapes stay correct (every implementation computes the same
function); Gemma's ``1 + weight`` still gets its gradient."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from test_policy import _close, tiny
from test_policy_serving import SEEN, _graphs, _Same, _sites, split, split_policy  # noqa: F401  (split: a fixture)

from normbench.policy import apply_policy, restore

pytestmark = pytest.mark.usefixtures("split")   # rmsnorm gets backends a and b



def _pol_regimes(config):
    from normbench.policy import read

    return sorted({k[1] for k in read(split_policy(config)).by_site})


def _calls_before(fn, x, target_code) -> list[str]:
    """The Python functions entered after ``fn(x)`` starts and before ``target_code`` runs (None: never reached)."""
    seen: list[str] = []
    done = []

    def prof(frame, event, _arg):
        if event != "call" or done:
            return
        if frame.f_code is target_code:
            done.append(True)
        else:
            seen.append(frame.f_code.co_qualname)

    sys.setprofile(prof)
    try:
        fn(x)
    finally:
        sys.setprofile(None)
    return seen if done else None


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_a_pinned_site_runs_its_regimes_answer_for_every_call(family):
    """Decode names ``a``, prefill ``b``. Pinned to a decode regime every call runs ``a`` (prefill-shaped calls too),
    pinned to a prefill regime every call runs ``b``; outputs equal the original model's."""
    model, config = tiny(family)
    model.eval()
    ref = copy.deepcopy(model)
    regimes = _pol_regimes(config)
    decode = next(r for r in regimes if r.startswith("decode"))
    prefill = next(r for r in regimes if r.startswith("prefill"))
    for pin, want in ((decode, "a"), (prefill, "b")):
        report = apply_policy(model, split_policy(config), pin=pin)
        sites = _sites(model)
        assert sites and all(m.pinned == {"regime": pin, "backend": want, "dtype": "float32", "why": None}
                             for m in sites.values()), str(report)
        assert f"pinned to {pin}" in str(report)
        for ids in (torch.randint(0, 64, (1, 1)), torch.randint(0, 64, (2, 9))):
            SEEN.clear()
            with torch.no_grad():
                got, exp = model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits
            assert _close(got, exp)
            assert set(SEEN) == {want}, f"pinned {pin}, input {tuple(ids.shape)}: ran {dict(SEEN)}"
        restore(model)


def test_a_pinned_call_reaches_the_implementation_in_fewer_calls_than_a_bare_call():
    """The Python calls from a pinned site's call to the implementation's forward: the site's own lean ``__call__``
    (policy/lean.py) alone, where calling the implementation module bare goes through nn.Module.__call__'s two;
    PolicyNorm.forward never runs. With a forward hook on the site, nn.Module.__call__ runs it as it would."""
    model, config = tiny("llama")
    model.eval()
    decode = next(r for r in _pol_regimes(config) if r.startswith("decode"))
    apply_policy(model, split_policy(config), pin=decode)
    for name, site in _sites(model).items():
        impl = site.forward.__globals__["I0"].__self__   # the implementation the generated call holds
        assert isinstance(impl, _Same) and impl.tag == "a", name
        x = torch.randn(site.probe_shape)
        with torch.no_grad():
            pinned = _calls_before(site, x, _Same.forward.__code__)
            bare = _calls_before(impl, x, _Same.forward.__code__)
        assert pinned == ["__call__"], f"{name}: pinned {pinned}"
        assert bare == ["Module._wrapped_call_impl", "Module._call_impl"], bare
        seen = []
        hook = site.register_forward_hook(lambda _m, _a, y: seen.append(y))
        with torch.no_grad():
            y = site(x)
            hooked = _calls_before(site, x, _Same.forward.__code__)
        hook.remove()
        assert len(seen) == 2 and seen[0] is y, "the site's forward hook did not run at each call"
        assert hooked[:3] == ["__call__", "Module._wrapped_call_impl", "Module._call_impl"], hooked


def test_gemma_pinned_keeps_the_weights_gradient_and_follows_the_weight():
    """Gemma's ``1 + weight``: cached without autograd (and recomputed when the weight changes), per call with it,
    so the weight's gradient equals the original model's."""
    model, config = tiny("gemma3")
    ref = copy.deepcopy(model)
    decode = next(r for r in _pol_regimes(config) if r.startswith("decode"))
    apply_policy(model, split_policy(config), pin=decode)
    ids = torch.randint(0, 64, (2, 5))
    model(ids, use_cache=False).logits.square().mean().backward()
    ref(ids, use_cache=False).logits.square().mean().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if "norm" in n:
            assert p.grad is not None and _close(p.grad, q.grad, 1e-4), n
    with torch.no_grad():
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            if "norm" in n:
                p.add_(0.5), q.add_(0.5)
        assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)


def test_pin_follows_the_dtype_and_refuses_an_unknown_regime():
    """``.to(bfloat16)`` re-pins to the bfloat16 answer; a regime the policy does not answer for is refused with the
    ones it does; restore puts the original modules back."""
    model, config = tiny("llama")
    pol = split_policy(config, dtypes=("float32",))
    with pytest.raises(ValueError, match="decode-1"):
        apply_policy(model, pol, pin="decode-9999")
    assert not _sites(model)
    decode = next(r for r in _pol_regimes(config) if r.startswith("decode"))
    apply_policy(model, pol, pin=decode)
    model.to(torch.bfloat16)
    for site in _sites(model).values():
        assert site.pinned["backend"] == "eager" and site.pinned["dtype"] == "bfloat16"
        assert "no answer in bfloat16" in site.pinned["why"]
        assert site.forward is site.original
    assert len(restore(model)) == 5 and not _sites(model)


def test_a_forward_set_from_outside_a_pinned_site_is_kept_and_a_stale_one_said():
    """A pinned site whose ``forward`` is the original module (no answer at its dtype) is not a generated function,
    so a wrapper set on it from outside (accelerate's ``_old_forward``) cannot take the new dispatch's code when the
    site resolves again. The wrapper is kept and still runs; where what it wraps is no longer what the site would
    run (here: after ``.to(float32)`` the policy's ``a``) a ``PolicyFallbackWarning`` says so; where it is the same
    (``.half()``: no answer in float16 either, the original again) nothing is said."""
    from normbench.policy import PolicyFallbackWarning

    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model)
    decode = next(r for r in _pol_regimes(config) if r.startswith("decode"))
    apply_policy(model, split_policy(config, dtypes=("float32",)), pin=decode)
    model.to(torch.bfloat16)
    site = model.model.norm
    assert site.forward is site.original
    called = []
    site._old_forward = site.forward
    site.forward = lambda h: called.append(1) or site._old_forward(h)
    outside = site.forward
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PolicyFallbackWarning)
        model.half()                                   # the original again: the wrapper wraps what the site runs
    assert site.forward is outside and site.pinned["backend"] == "eager"
    with pytest.warns(PolicyFallbackWarning, match=r"norm \(final\): the forward set on it from outside is kept, but "
                                                   "what it wraps was not made again") as said:
        model.to(torch.float32)
    assert [w.filename for w in said] == [__file__]   # it names the user's .to(), not a frame inside torch
    assert site.forward is outside and site.pinned["backend"] == "a"
    x = torch.randn(1, 1, config.hidden_size)
    SEEN.clear()
    with torch.no_grad():
        y = site(x)
    assert called == [1] and not SEEN                 # the wrapper ran what it wraps: the original, not a
    ref.to(torch.bfloat16).half().to(torch.float32)   # the same roundings of the weights
    with torch.no_grad():
        assert _close(y, ref.model.norm(x))


def test_fullgraph_compile_of_a_pinned_model():
    """A pinned model traces whole (``fullgraph=True``) over the 13 shapes with no more graphs than the original, and
    every graph holds the pinned backend (``b``'s clones, one per site), decode shapes too."""
    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model)
    prefill = next(r for r in _pol_regimes(config) if r.startswith("prefill"))
    apply_policy(model, split_policy(config), pin=prefill)
    n_sites = len(_sites(model))
    want, _ = _graphs(ref, None)
    got, clones = _graphs(model, None)
    assert got <= want and clones and set(clones.values()) == {n_sites}, (got, want, clones)
    ids = torch.randint(0, 64, (1, 1))
    with torch.no_grad():
        assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)


def test_gemma_pinned_traces_whole_and_follows_the_weight_compiled():
    """Gemma pinned (its ``1 + weight`` written out in the site's call): ``torch.compile(fullgraph=True)`` traces it
    whole, the compiled model equals the original, and after the weights change (in place, as an optimizer does) the
    compiled model follows them: inside a graph the scale is computed per call, not read from the eager cache."""
    model, config = tiny("gemma3")
    model.eval()
    ref = copy.deepcopy(model)
    decode = next(r for r in _pol_regimes(config) if r.startswith("decode"))
    apply_policy(model, split_policy(config), pin=decode)
    assert {s.pinned["backend"] for s in _sites(model).values()} == {"a"}
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    ids = torch.randint(0, 64, (1, 1))
    try:
        with torch.no_grad():
            assert _close(compiled(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
            for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
                if "norm" in n:
                    p.add_(0.5), q.add_(0.5)
            assert _close(compiled(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
            assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
    finally:
        torch._dynamo.reset()
