"""#49: a policy a serving loop can ship. Decided at apply time (the regime read on each site's own sequence axis,
found by the apply-time probe: Gemma 3's q/k norms see (batch, heads, seq, head_dim)), free per call (counted in
Python call events, not timed), traced whole by ``torch.compile(fullgraph=True)`` with no more graphs than the
original model, and no host sync in a forward. Tiny random models from transformers' config classes."""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import sys
from collections import Counter

import pytest
import torch
from test_policy import CALLS, FAMILIES, HW, _close, _records, tiny  # noqa: F401  (the shared tiny models and policies)
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from normbench import best, catalog
from normbench.discovery import REGISTRY
from normbench.policy import PolicyNorm, _OffsetCall, apply_policy, restore
from normbench.registry import Backend, adopt_state

SEEN: Counter = Counter()   # backend tag -> eager (not traced) calls of its forward


class _Same(nn.Module):
    """A backend computing exactly what its eager module computes: an instance of a subclass of the eager module's
    class holding the parameters as its own slots (so a backend whose slots were not pointed at the model's
    parameters computes with the placeholders and the test sees it) and the eager module's other attributes; its
    forward is the eager class's. Traceable by Dynamo; backend ``b`` adds a ``clone`` so a compiled graph shows which
    backend it holds."""

    def forward(self, *args):
        if not torch.compiler.is_compiling():
            SEEN[self.tag] += 1
        out = super().forward(*args)
        return out.clone() if self.tag == "b" else out


def _same(eager: nn.Module, tag: str) -> nn.Module:
    cls = type(f"_Same{type(eager).__name__}", (_Same, type(eager)), {})
    obj = cls.__new__(cls)
    nn.Module.__init__(obj)
    adopt_state(obj, eager)
    plain = nn.Module().__dict__
    for k, v in vars(eager).items():
        if k not in plain:
            obj.__dict__[k] = v
    obj.__dict__["tag"] = tag
    return obj


@pytest.fixture
def split(monkeypatch):
    """rmsnorm gets backends ``a`` and ``b`` (both compute what eager computes)."""
    spec = REGISTRY.get("rmsnorm")
    extra = (Backend("a", build=lambda e, s: _same(e, "a")), Backend("b", build=lambda e, s: _same(e, "b")))
    monkeypatch.setitem(REGISTRY.specs, "rmsnorm", dataclasses.replace(
        spec, extra_backends=spec.extra_backends + extra))
    SEEN.clear()


def split_policy(config, decode="a", prefill="b", dtypes=("float32", "bfloat16"), passes=("fwd", "fwd+bwd")):
    """best's policy (through best's real schema) for the model of ``config``: ``decode`` wins every decode regime,
    ``prefill`` every prefill one."""
    family, arch, sites = catalog.sites_from_config(config.to_dict())
    model = catalog.Model("tiny", "tiny", family, arch, "", {}, tuple(sites))
    targets = best.model_targets(model)
    rows = best.answer(_records(targets, lambda r: decode if r.startswith("decode") else prefill, dtypes, passes),
                       targets)
    return best.to_policy(rows, {"model": "tiny", "shape": None})


def _sites(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, PolicyNorm)}


# --- (1) the regime: read on the site's own sequence axis ---------------------------------------------------------
@pytest.mark.parametrize("family", ["gemma3", "qwen3", "llama"])
def test_decode_and_prefill_run_their_own_answers_at_every_site(family, split):
    """Decode names backend ``a``, prefill ``b``: a one-token decode step runs ``a`` at every site, the q/k norms
    too (Gemma 3 hands them (batch, heads, seq, head_dim): read on axis 1, a head count of 2 looked like prefill)."""
    model, config = tiny(family)
    ref = copy.deepcopy(model)
    model.eval(), ref.eval()
    report = apply_policy(model, split_policy(config))
    sites = _sites(model)
    assert sites and not report.left, str(report)
    ran = Counter()
    hooks = [m.register_forward_hook(lambda mod, a, y, n=n: ran.update([n])) for n, m in sites.items()]
    for ids, want in ((torch.randint(0, 64, (1, 1)), "a"), (torch.randint(0, 64, (3, 1)), "a"),
                      (torch.randint(0, 64, (1, 5)), "b"), (torch.randint(0, 64, (2, 9)), "b")):
        SEEN.clear(), ran.clear()
        with torch.no_grad():
            got, exp = model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits
        assert _close(got, exp)
        calls = sum(ran.values())
        assert SEEN == Counter({want: calls}), f"{tuple(ids.shape)}: ran {dict(SEEN)}, every site should run {want}"
    for h in hooks:
        h.remove()
    if family == "gemma3":
        q = model.model.layers[0].self_attn.q_norm
        assert q.probe_shape[1] == config.num_attention_heads and q.seq_axis == 2


def test_a_site_eager_everywhere_keeps_its_module(split):
    model, config = tiny("llama")
    report = apply_policy(model, split_policy(config, decode="eager", prefill="eager"))
    assert not report.replaced and not _sites(model)
    assert {r["reason"] for r in report.left} == {
        f"the policy's answer for site {s} is eager in every regime, dtype and pass"
        for s in ("input_layernorm", "post_attention_layernorm", "norm (final)")}


# --- (2) free per call: Python call events between a site's forward and its implementation's -----------------------
def _start(site: PolicyNorm):
    """The code a call of ``site`` starts its own work in: its class's lean ``__call__`` (policy/lean.py), else its
    ``forward`` (after nn.Module.__call__'s frames)."""
    call = type(site).__call__
    return site.forward.__code__ if call is nn.Module.__call__ else call.__code__


def _events_between(site: PolicyNorm, x: torch.Tensor, impl_code) -> int | None:
    """Python ``call`` events after ``site``'s own code (:func:`_start`) starts and before ``impl_code`` is called
    (None: never)."""
    start, count, out = _start(site), [None], []

    def prof(frame, event, _arg):
        if event != "call":
            return
        if frame.f_code is start and count[0] is None:
            count[0] = 0
        elif count[0] is not None and not out:
            if frame.f_code is impl_code:
                out.append(count[0])
            else:
                count[0] += 1

    sys.setprofile(prof)
    try:
        site(x)
    finally:
        sys.setprofile(None)
    return out[0] if out else None


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_at_most_two_call_events_to_the_implementation(family, dtype, split):
    """Every site, decode and prefill, no_grad and autograd recording: the site's forward reaches its implementation's
    forward through at most 2 Python calls (the issue's bound): none, or ``nn.Module.__call__``'s own two to an original
    module that has hooks. (Gemma's ``1 + weight`` while autograd records is computed per call by the implementation
    the policy runs, ``_OffsetCall``: it is differentiated through; without autograd it is cached, and the lean call
    checks the weight's version counter itself, after ``torch.compiler.is_dynamo_compiling()``: 1 call, then the
    backend's forward.)"""
    model, config = tiny(family)
    model.to(dtype)
    apply_policy(model, split_policy(config, decode="a", prefill="eager"))
    for name, site in _sites(model).items():
        shape = list(site.probe_shape)
        for seq, impl_code in ((1, _Same.forward.__code__), (5, type(site.original).forward.__code__)):
            shape[site.seq_axis] = seq
            for grad in (False, True):
                x = torch.randn(shape, dtype=dtype, requires_grad=grad)
                code, want = impl_code, 0
                if seq == 1 and site.found.offset and grad:   # Gemma's 1 + weight, per call
                    code = _OffsetCall.forward.__code__
                elif seq == 1 and site.found.offset:   # cached: is_dynamo_compiling() first
                    want = 1
                with torch.set_grad_enabled(grad):
                    n = _events_between(site, x, code)
                # the site's lean call (policy/lean.py) calls a backend's forward, or the original's (it has no
                # hooks), itself: no call between
                assert n == want, f"{name} seq {seq} grad {grad}: {n} call events"
    # an original module with a hook of its own is called as a module, so its hook runs
    site = next(iter(_sites(model).values()))
    seen = []
    site.original.register_forward_hook(lambda *_a: seen.append(1))
    site._resolve()
    shape = list(site.probe_shape)
    shape[site.seq_axis] = 5
    x = torch.randn(shape, dtype=dtype)
    site(x)
    assert seen == [1]


def _lines_before(site: PolicyNorm, x: torch.Tensor, impl_code) -> int | None:
    """Python lines executed from the call ``site(x)`` on (its first frame, whatever it is: nn.Module.__call__'s or
    the site's own lean ``__call__``) until ``impl_code`` is called, in every frame between (``sys.settrace`` line
    events; None: never reached): the per-call work of the module call and the dispatch, counted."""
    count, done = [None], [False]

    def local(frame, event, _arg):
        if event == "line" and not done[0]:
            count[0] += 1
        return local

    def glob(frame, event, _arg):
        if done[0]:
            return None
        if frame.f_code is impl_code and count[0] is not None:
            done[0] = True
            return None
        if count[0] is None:
            count[0] = 0
        return local

    sys.settrace(glob)
    try:
        site(x)
    finally:
        sys.settrace(None)
    return count[0] if done[0] else None


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_a_decode_call_runs_at_most_ten_lines_before_its_implementation(family, split):
    """No autograd, decode, each dtype: from the call of the site to its implementation's forward at most 10 lines
    of Python run, the module call included (the lean ``__call__``: nn.Module's hook checks on one line, then rank,
    dtype, grad state, sequence length, one comparison per regime boundary; through nn.Module.__call__ to the lean
    ``forward`` it took 22; the generic ``PolicyNorm.forward`` takes about twice that). Load-independent, where a
    timing would not be."""
    model, config = tiny(family)
    apply_policy(model, split_policy(config, decode="a", prefill="eager"))
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        for name, site in _sites(model).items():
            shape = list(site.probe_shape)
            shape[site.seq_axis] = 1
            with torch.no_grad():
                n = _lines_before(site, torch.randn(shape, dtype=dtype), _Same.forward.__code__)
            # Gemma's cached 1 + weight: torch.compiler.is_dynamo_compiling() (1 line of torch's), the weight's
            # version check and the branch's block, 4 more (through _CachedOffset.forward, 7 more and a frame)
            limit = 10 + 4 * bool(site.found.offset)
            assert n is not None and n <= limit, f"{name} {dtype}: {n} lines"
            x = torch.randn(shape, dtype=dtype)   # called by the original's keyword, as a model may call it
            arg = next(iter(inspect.signature(site.original.forward).parameters))
            with torch.no_grad():
                torch.testing.assert_close(site(**{arg: x}), site(x), rtol=0, atol=0)


def _frames_to(site, x, impl_code) -> list[str]:
    """The Python functions entered from the call ``site(x)`` until ``impl_code`` runs."""
    seen, done = [], []

    def prof(frame, event, _arg):
        if event == "call" and not done:
            (done if frame.f_code is impl_code else seen).append(frame.f_code.co_qualname)

    sys.setprofile(prof)
    try:
        site(x)
    finally:
        sys.setprofile(None)
    assert done, "the implementation was never called"
    return seen


def test_a_site_call_is_one_python_frame_and_keeps_every_hook(split):
    """A decode call of a site is one Python frame before its implementation (the site's lean ``__call__``; a call
    through nn.Module.__call__ would add its two and the lean ``forward``). Each of nn.Module.__call__'s reasons to do
    more still gets it: a forward pre-hook (which changes the input), a forward hook, a global forward hook and a full
    backward hook each run, and the output is what the hook asks for; a ``forward`` set on the site from outside
    (accelerate's ``add_hook_to_module``) is what a call runs."""
    model, config = tiny("llama")
    apply_policy(model, split_policy(config))
    site = model.model.norm
    shape = list(site.probe_shape)
    shape[site.seq_axis] = 1
    x = torch.randn(shape)
    with torch.no_grad():
        assert _frames_to(site, x, _Same.forward.__code__) == ["__call__"]
        plain = site(x)
        doubled = site(2 * x)
    ran = []
    for register, check in (
            (lambda: site.register_forward_pre_hook(lambda _m, a: (2 * a[0],)), lambda y: _close(y, doubled)),
            (lambda: site.register_forward_hook(lambda _m, _a, y: ran.append("fwd") or 3 * y),
             lambda y: _close(y, 3 * plain) and ran == ["fwd"]),
            (lambda: nn.modules.module.register_module_forward_hook(
                lambda m, _a, _y: ran.append("global") if m is site else None),
             lambda y: _close(y, plain) and ran == ["global"])):
        ran.clear()
        handle = register()
        try:
            with torch.no_grad():
                assert check(site(x)), f"hook {len(ran)} {ran}"
        finally:
            handle.remove()
    handle = site.register_full_backward_hook(lambda _m, gin, _gout: ran.append("bwd"))
    ran.clear()
    try:
        xg = x.clone().requires_grad_()
        site(xg).sum().backward()
    finally:
        handle.remove()
    assert ran == ["bwd"] and xg.grad is not None
    with torch.no_grad():   # every hook gone: one frame again
        assert _frames_to(site, x, _Same.forward.__code__) == ["__call__"]
    inner, called = site.forward, []
    site.forward = lambda h: called.append(1) or inner(h)   # a forward set from outside, as accelerate's hooks do
    with torch.no_grad():
        assert _close(site(x), plain) and called == [1], "the forward set on the site was not called"


def test_a_forward_set_from_outside_survives_a_re_resolve(split):
    """accelerate's ``add_hook_to_module`` keeps the forward it found as ``_old_forward`` and sets a wrapper as
    ``forward``. After ``.to(torch.bfloat16)`` (the site resolves again: new implementations, new generated
    dispatch) the wrapper still runs (a re-resolve dropped it), and what it wraps is the new dispatch: the function it
    holds took the new code and constants, so it reaches the site's current implementations, not the ones before."""
    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model).to(torch.bfloat16)
    apply_policy(model, split_policy(config))
    site = model.model.norm
    called = []
    site._old_forward = site.forward
    site.forward = functools.update_wrapper(
        functools.partial(lambda m, h: called.append(1) or m._old_forward(h), site), site._old_forward)
    before = {id(m) for m in site._impls.values()}
    model.to(torch.bfloat16)
    now = {id(m) for m in site._impls.values()}
    reached = {id(v.__self__) for v in site._old_forward.__globals__.values()
               if isinstance(getattr(v, "__self__", None), _Same)}
    assert reached and reached <= now and not reached & before
    shape = list(site.probe_shape)
    shape[site.seq_axis] = 1
    x = torch.randn(shape, dtype=torch.bfloat16)
    SEEN.clear()
    with torch.no_grad():
        y = site(x)
    assert called == [1], "the forward set from outside was dropped when the site resolved again"
    assert SEEN == {"a": 1} and y.dtype == torch.bfloat16
    with torch.no_grad():
        assert _close(y, ref.model.norm(x), tol=1e-2)


def test_a_deep_copy_computes_with_its_own_parameters(split):
    """``copy.deepcopy`` of a policy-applied model (a serving engine's replica, an EMA copy): the copy's sites resolve
    again, so their implementations hold the copy's parameters, not the model's it was copied from."""
    model, config = tiny("llama")
    apply_policy(model, split_policy(config))
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in twin.named_parameters():
            if "norm" in n:
                p.mul_(2.0)
    for (name, site), (_, copied) in zip(_sites(model).items(), _sites(twin).items()):
        shape = list(site.probe_shape)
        for seq in (1, 5):
            shape[site.seq_axis] = seq
            x = torch.randn(shape)
            with torch.no_grad():
                assert _close(copied(x), 2 * site(x)), f"{name} seq {seq}: the copy computes with the original's weight"


# --- (3) compiles and captures --------------------------------------------------------------------------------------
SHAPES = [(1, L) for L in range(8, 37, 4)] + [(B, 1) for B in (1, 2, 4, 8, 16)]


def _graphs(model, dynamic):
    graphs = []

    def counting(gm, _example):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=counting, dynamic=dynamic)
    clones = {}
    with torch.no_grad():
        for s in SHAPES:
            before = len(graphs)
            compiled(torch.zeros(s, dtype=torch.long), use_cache=False)
            if len(graphs) > before:
                clones[s] = sum(n.target == "clone" or getattr(n.target, "__name__", "") == "clone"
                                for n in graphs[-1].graph.nodes)
    torch._dynamo.reset()
    return len(graphs), clones


@pytest.mark.parametrize("dynamic", [None, True])
def test_fullgraph_compile_right_after_apply_no_more_graphs(dynamic, split):
    """Straight after apply_policy, torch.compile(fullgraph=True) over the issue's 13 shapes (prefill (1, L), decode
    (B, 1)) builds no more graphs than the original model; each graph holds its regime's backend (prefill ``b``'s
    clones, none in decode)."""
    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config, dtypes=("float32",), passes=("fwd",)))
    n_sites = len(_sites(model))
    want, base = _graphs(ref, dynamic)
    got, clones = _graphs(model, dynamic)
    assert got <= want, f"{got} graphs after apply_policy, the original model needs {want}"
    for s, c in clones.items():
        extra = c - base.get(s, base[min(base, key=lambda k: (k[1] == 1) != (s[1] == 1))])
        assert extra == (n_sites if s[1] > 1 else 0), f"graph for {s}: {extra} clones of backend b"


def test_compile_backend_steps_aside_inside_an_outer_compile(split):
    """A policy naming the ``compile`` backend: eager calls run its compiled module; an outer fullgraph compile
    traces the module it compiled (a compile inside a compile fails)."""
    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config, decode="compile", prefill="compile", dtypes=("float32",),
                                     passes=("fwd",)), warmup=False)
    graphs = []

    def counting(gm, _example):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    ids = torch.randint(0, 64, (1, 4))
    with torch.no_grad():
        got = torch.compile(model, fullgraph=True, backend=counting)(ids, use_cache=False).logits
        want = ref(ids, use_cache=False).logits
    torch._dynamo.reset()
    assert len(graphs) == 1 and _close(got, want)


# --- no host sync ---------------------------------------------------------------------------------------------------
class _NoSync(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            raise AssertionError("a host sync (aten._local_scalar_dense) in a policy forward")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("family", ["gemma3", "qwen3"])
def test_no_host_sync_in_a_policy_forward(family, split):
    model, config = tiny(family)
    apply_policy(model, split_policy(config))
    for name, site in _sites(model).items():
        shape = list(site.probe_shape)
        for seq in (1, 5):
            shape[site.seq_axis] = seq
            for grad in (False, True):
                x = torch.randn(shape, requires_grad=grad)
                with torch.set_grad_enabled(grad), _NoSync():
                    site(x)
    restore(model)


# --- re-resolved when the weights change -----------------------------------------------------------------------------
def test_gemma_scale_follows_the_weight_eager_and_compiled(split):
    """Gemma's 1 + weight is cached without autograd: an in-place update of the weight (an optimizer step, a load)
    is seen by the next eager call (version counter) and by a compiled graph (computed in the graph)."""
    model, config = tiny("gemma3")
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config, dtypes=("float32",), passes=("fwd",)))
    graphs = []

    def counting(gm, _example):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=counting)
    ids = torch.randint(0, 64, (1, 1))
    with torch.no_grad():
        for step in range(2):
            for m in (model, ref):
                m.model.norm.weight.add_(0.5)
                m.model.layers[0].self_attn.q_norm.weight.mul_(-1)
            want = ref(ids, use_cache=False).logits
            assert _close(model(ids, use_cache=False).logits, want), f"eager, step {step}"
            assert _close(compiled(ids, use_cache=False).logits, want), f"compiled, step {step}"
    torch._dynamo.reset()
    assert len(graphs) == 1


def test_assigned_parameters_are_followed(split):
    """load_state_dict(assign=True) puts new Parameter objects in: the backends and the original read them."""
    model, config = tiny("qwen3")
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config, dtypes=("float32",), passes=("fwd",)))
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1)
    model.load_state_dict(copy.deepcopy(ref.state_dict()), assign=True)
    ids = torch.randint(0, 64, (1, 1))
    with torch.no_grad():
        assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
        ids = torch.randint(0, 64, (1, 6))
        assert _close(model(ids, use_cache=False).logits, ref(ids, use_cache=False).logits)
