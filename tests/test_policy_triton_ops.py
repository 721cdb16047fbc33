"""#49: normbench's Triton backends as ``torch.library`` ops (``normbench.policy.ops``), so that a compiled model with
a policy naming the Triton backend traces whole: ``torch.compile(fullgraph=True)`` breaks no graph, each graph holds
``torch.ops.normbench.*`` where the policy's regime chose Triton, no more graphs than the original model; inductor
runs the op for one shape; eager calls keep the backend's direct path (no dispatcher).

Without a GPU the kernels run in Triton's CPU interpreter (tests/triton_interp.py: set up while pytest collects this
module; the whole file reruns in a fresh process if Triton was imported for the compiler first). Shapes are tiny.
The check gate is stubbed to pass (``gate``): its verdict for the Triton backend is the check's own business
(tests/test_triton_kernels.py, normbench check), and here it would run the whole contract check in the interpreter.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter

import pytest
import torch
import triton_interp

# before anything else can import Triton (transformers does): Triton and the kernels for the interpreter
MODE = triton_interp.prepare("_rownorm", "_pointwise", "_groupnorm")

from test_policy import _close, tiny  # noqa: E402
from test_policy_serving import SHAPES, split_policy  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from normbench.policy import PolicyNorm, apply_policy, dispatch, ops  # noqa: E402

pytestmark = pytest.mark.triton
OPS = torch.ops.normbench


@pytest.fixture(scope="module")
def tb():
    """normbench.kernels.triton_backend, with the interpreter on when there is no GPU."""
    yield from triton_interp.backend(MODE, "triton_backend")


@pytest.fixture(scope="module")
def dev(tb):
    return triton_interp.device(MODE)


@pytest.fixture
def gate(monkeypatch, tb):
    monkeypatch.setattr(dispatch, "_gate", lambda spec, backend, device: None)


_SEEDS = itertools.count(1)


def _t(dev, *shape, dtype=torch.float32, grad=True):
    g = torch.Generator().manual_seed(next(_SEEDS))
    return torch.randn(shape, generator=g).to(dev, dtype).requires_grad_(grad)


# --- (1) the ops: schema, fake implementation, autograd registration (opcheck), and the backend's own numbers -------
C = 24


def _cases(dev):
    x, w, b = _t(dev, 2, 3, C), _t(dev, C), _t(dev, C)
    img = _t(dev, 2, 6, 3, 3)
    cl = _t(dev, 2, 6, 3, 3, grad=False).to(memory_format=torch.channels_last).requires_grad_()
    return {
        "layer_norm": (OPS.layer_norm.default, (x, w, b, 1e-5, "tokens")),
        "layer_norm no affine": (OPS.layer_norm.default, (x, None, None, 1e-5, "tokens")),
        "layer_norm images in place": (OPS.layer_norm.default, (img, _t(dev, 6), _t(dev, 6), 1e-5, "images")),
        "layer_norm images channels-last": (OPS.layer_norm.default, (cl, _t(dev, 6), _t(dev, 6), 1e-5, "images")),
        "rms_norm": (OPS.rms_norm.default, (x, w, 1e-6, "tokens")),
        "rms_norm bfloat16": (OPS.rms_norm.default, (_t(dev, 5, C, dtype=torch.bfloat16), _t(dev, C), 1e-6,
                                                     "tokens")),
        "rms_norm no weight (SRMSNorm)": (OPS.rms_norm.default, (x, None, 1e-6, "tokens")),
        "crms_norm": (OPS.crms_norm.default, (x, w, 1e-6, "tokens")),
        "scale_norm": (OPS.scale_norm.default, (x, _t(dev), 1e-5, "tokens")),
        "add_layer_norm": (OPS.add_layer_norm.default, (x, _t(dev, 2, 3, C), w, b, 1e-5)),
        "add_rms_norm": (OPS.add_rms_norm.default, (x, _t(dev, 2, 3, C), w, 1e-6)),
        "add_rms_norm mixed dtypes": (OPS.add_rms_norm.default, (x, _t(dev, 2, 3, C, dtype=torch.bfloat16), w,
                                                                 1e-6)),
        "add_row_norm_backward": (OPS.add_row_norm_backward.default, (
            _t(dev, 2, 3, C, grad=False), _t(dev, 2, 3, C, grad=False), x.detach(), w.detach(), None, ops.RMSNORM,
            1e-6, True)),
        "dyt": (OPS.dyt.default, (x, _t(dev), w, b, "tokens")),
        "dyt images channels-last": (OPS.dyt.default, (cl, _t(dev), _t(dev, 6), _t(dev, 6), "images")),
        "derf": (OPS.derf.default, (x, _t(dev), _t(dev), w, b, "tokens")),
        "group_norm": (OPS.group_norm.default, (img, _t(dev, 6), _t(dev, 6), 3, 1e-5)),
        "group_norm no affine": (OPS.group_norm.default, (img, None, None, 2, 1e-5)),
        "pointwise_backward": (OPS.pointwise_backward.default, (
            _t(dev, 2, 3, C, grad=False), x.detach(), _t(dev, grad=False), _t(dev, grad=False), w.detach(), b.detach(),
            "tokens")),
        "row_norm_backward": (OPS.row_norm_backward.default, (
            _t(dev, 2, 3, C, grad=False), x.detach(), w.detach(), b.detach(), ops.LAYERNORM, 1e-5, "tokens", False,
            True)),
    }


CASES = ["layer_norm", "layer_norm no affine", "layer_norm images in place", "layer_norm images channels-last",
         "rms_norm", "rms_norm bfloat16", "rms_norm no weight (SRMSNorm)", "crms_norm", "scale_norm",
         "add_layer_norm", "add_rms_norm", "add_rms_norm mixed dtypes", "dyt", "dyt images channels-last", "derf",
         "group_norm", "group_norm no affine", "row_norm_backward", "add_row_norm_backward", "pointwise_backward"]


@pytest.mark.parametrize("case", CASES)
def test_opcheck(case, dev):
    """torch.library.opcheck: the schema, the fake implementation (shape, dtype, strides) against the real one, the
    autograd registration, and the op through AOT autograd with dynamic shapes."""
    op, args = _cases(dev)[case]
    torch.library.opcheck(op, args)


# name -> (the op, the backend's functional API, the inputs' shapes): the op computes what the backend computes
SAME = {
    "layer_norm": (lambda x, w, b: OPS.layer_norm(x, w, b, 1e-5, "tokens"),
                   lambda tb, x, w, b: tb.layer_norm(x, w, b, 1e-5), [(3, 5, C), (C,), (C,)]),
    "rms_norm": (lambda x, w: OPS.rms_norm(x, w, 1e-6, "tokens"), lambda tb, x, w: tb.rms_norm(x, w, 1e-6),
                 [(3, 5, C), (C,)]),
    "crms_norm": (lambda x, w: OPS.crms_norm(x, w, 1e-6, "tokens"), lambda tb, x, w: tb.crms_norm(x, w, 1e-6),
                  [(3, 5, C), (C,)]),
    "scale_norm": (lambda x, g: OPS.scale_norm(x, g, 1e-5, "tokens"), lambda tb, x, g: tb.scale_norm(x, g, 1e-5),
                   [(3, 5, C), ()]),
    "add_layer_norm": (lambda x, r, w, b: OPS.add_layer_norm(x, r, w, b, 1e-5),
                       lambda tb, x, r, w, b: tb.add_layer_norm(x, r, w, b, 1e-5), [(3, 5, C), (3, 5, C), (C,), (C,)]),
    "add_rms_norm": (lambda x, r, w: OPS.add_rms_norm(x, r, w, 1e-6),
                     lambda tb, x, r, w: tb.add_rms_norm(x, r, w, 1e-6), [(3, 5, C), (3, 5, C), (C,)]),
    "dyt": (lambda x, a, w, b: OPS.dyt(x, a, w, b, "tokens"), lambda tb, x, a, w, b: tb.dyt(x, a, w, b),
            [(3, 5, C), (), (C,), (C,)]),
    "derf": (lambda x, a, s, w, b: OPS.derf(x, a, s, w, b, "tokens"),
             lambda tb, x, a, s, w, b: tb.derf(x, a, s, w, b), [(3, 5, C), (), (), (C,), (C,)]),
    "group_norm": (lambda x, w, b: OPS.group_norm(x, w, b, 3, 1e-5)[0],
                   lambda tb, x, w, b: tb.group_norm(x, 3, w, b, 1e-5), [(2, 6, 3, 3), (6,), (6,)]),
}


@pytest.mark.parametrize("name", sorted(SAME))
def test_op_computes_what_the_backend_computes(name, tb, dev):
    """Outputs (strides too) and every gradient of the op equal the Triton backend's own (same kernels, same launch
    path)."""
    op, direct, shapes = SAME[name]
    inputs = [_t(dev, *s) for s in shapes]
    got, want = op(*inputs), direct(tb, *inputs)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    dys = [_t(dev, *o.shape, grad=False) for o in want]
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w) and g.stride() == w.stride(), f"output {i} of {name}"
    grads, wgrads = torch.autograd.grad(got, inputs, dys), torch.autograd.grad(want, inputs, dys)
    for i, (g, w) in enumerate(zip(grads, wgrads)):
        assert torch.equal(g, w), f"gradient {i} of {name}"


# (norm, layout, its op, inputs' shapes besides x's): every Triton module a policy can run, through ``traceable``
KINDS = [("layernorm", "tokens", "layer_norm", ()), ("rmsnorm", "tokens", "rms_norm", ()),
         ("srmsnorm", "tokens", "rms_norm", ()), ("crmsnorm", "tokens", "crms_norm", ()),
         ("scalenorm", "tokens", "scale_norm", ()), ("add_layernorm", "tokens", "add_layer_norm", ((2, 3, C),)),
         ("add_rmsnorm", "tokens", "add_rms_norm", ((2, 3, C),)), ("dyt", "tokens", "dyt", ()),
         ("derf", "images", "derf", ()), ("layernorm", "images", "layer_norm", ()),
         ("groupnorm", "images", "group_norm", ())]


@pytest.mark.parametrize("norm, layout, op, extra", KINDS, ids=[f"{k[0]}-{k[1]}" for k in KINDS])
def test_each_triton_module_traces_to_its_op(norm, layout, op, extra, tb, dev):
    """``ops.traceable`` of the Triton backend's module of each norm: eagerly its own forward (no op dispatched), in a
    fullgraph compile one call of its op; the same numbers both ways, gradients too."""
    from normbench.discovery import REGISTRY

    module = REGISTRY.get(norm).create(C, layout=layout, backend="triton").to(dev)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(_t(dev, *p.shape, grad=False) * 0.3)
    site = ops.traceable(module)
    assert isinstance(site, ops.Traceable)
    args = [_t(dev, 2, 3, C) if layout == "tokens" else _t(dev, 2, C, 3, 2)] + [_t(dev, *s) for s in extra]
    with _Dispatched() as seen:
        want = site(*args)
    assert not [k for k in seen.ops if k.startswith("normbench.")], seen.ops
    graphs = []

    def counting(gm, _example):
        graphs.append(_normbench_ops(gm))
        return gm.forward

    torch._dynamo.reset()
    got = torch.compile(site, fullgraph=True, backend=counting)(*args)
    torch._dynamo.reset()
    assert graphs == [Counter({f"normbench.{op}": 1})], graphs
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    leaves = [*args, *module.parameters()]
    dys = [_t(dev, *w.shape, grad=False) for w in want]
    for g, w in zip(torch.autograd.grad(got, leaves, dys), torch.autograd.grad(want, leaves, dys)):
        assert torch.equal(g, w)


# --- (2) a policy naming the Triton backend: compiled whole, the op in the graph; eager keeps the direct path -------
def _model(decode="triton", prefill="eager", passes=("fwd",)):
    model, config = tiny("llama")
    model.eval()
    ref = copy.deepcopy(model)
    apply_policy(model, split_policy(config, decode=decode, prefill=prefill, dtypes=("float32",), passes=passes),
                 warmup=False)
    sites = [m for m in model.modules() if isinstance(m, PolicyNorm)]
    assert sites
    return model, ref, len(sites)


def _normbench_ops(gm) -> Counter:
    """The graph's calls of normbench ops, by name (Dynamo's graph calls the op, AOT autograd's its overload)."""
    return Counter(str(n.target).removesuffix(".default") for n in gm.graph.nodes
                   if n.op == "call_function" and str(n.target).startswith("normbench."))


def _graphs(model, dynamic, ref=None):
    """Graphs a fullgraph compile of ``model`` builds over the issue's 13 shapes (a counting backend), the normbench
    ops each new graph holds, and (with ``ref``) each output checked against ``ref``'s."""
    graphs, held = [], {}

    def counting(gm, _example):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=counting, dynamic=dynamic)
    with torch.no_grad():
        for s in SHAPES:
            ids = torch.randint(0, 64, s)
            before = len(graphs)
            got = compiled(ids, use_cache=False).logits
            if len(graphs) > before:
                held[s] = _normbench_ops(graphs[-1])
            if ref is not None:
                assert _close(got, ref(ids, use_cache=False).logits), f"compiled output at {s}"
    torch._dynamo.reset()
    return len(graphs), held


@pytest.mark.parametrize("dynamic", [None, True])
def test_fullgraph_compile_holds_the_op_where_the_policy_chose_triton(dynamic, gate):
    """Decode names the Triton backend, prefill eager: over the 13 shapes, no graph break (fullgraph), no more graphs
    than the original model, every decode graph holds one ``normbench.rms_norm`` per site and no prefill graph holds
    one; each compiled output matches the original model's."""
    model, ref, n_sites = _model()
    want, _ = _graphs(ref, dynamic)
    got, held = _graphs(model, dynamic, ref)
    assert got <= want, f"{got} graphs after apply_policy, the original model needs {want}"
    assert any(s[1] == 1 for s in held) and any(s[1] > 1 for s in held), held
    for s, found in held.items():
        expect = Counter({"normbench.rms_norm": n_sites}) if s[1] == 1 else Counter()
        assert found == expect, f"graph for {s}: {dict(found)}"


def test_compiled_training_step_runs_the_ops_forward_and_backward(gate):
    """Autograd recording (the policy's fwd+bwd answer): AOT autograd's forward graph holds the forward op per site,
    its backward graph ``row_norm_backward`` per site; gradients match the original model's."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    model, ref, n_sites = _model(decode="triton", prefill="triton", passes=("fwd+bwd",))
    seen = []

    def keep(gm, _example):
        seen.append(_normbench_ops(gm))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    ids = torch.randint(0, 64, (2, 3))
    compiled(ids, use_cache=False).logits.square().sum().backward()
    ref(ids, use_cache=False).logits.square().sum().backward()
    torch._dynamo.reset()
    assert seen == [Counter({"normbench.rms_norm": n_sites}),
                    Counter({"normbench.row_norm_backward": n_sites})], seen
    got, want = dict(model.named_parameters()), dict(ref.named_parameters())
    for name, p in want.items():
        assert _close(got[name].grad, p.grad, 1e-4), name


def test_inductor_one_shape_matches_eager(gate):
    """``backend="inductor"`` for one shape (decode, the Triton backend's regime): the op runs in inductor's code
    and the logits match the original model's."""
    model, ref, _ = _model()
    torch._dynamo.reset()
    ids = torch.randint(0, 64, (4, 1))
    with torch.no_grad():
        got = torch.compile(model, fullgraph=True, backend="inductor")(ids, use_cache=False).logits
        want = ref(ids, use_cache=False).logits
    torch._dynamo.reset()
    assert _close(got, want)


class _Dispatched(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def test_eager_calls_keep_the_direct_path(gate):
    """Called eagerly, a site the policy runs on Triton launches the backend's kernel directly: one launch per site
    and no ``normbench`` op through the dispatcher; the logits match the original model's."""
    from normbench.kernels import _env

    class Counting(_env.Launcher):
        launches = 0

        def launch(self, kernel, grid, args, kwargs):
            Counting.launches += 1
            super().launch(kernel, grid, args, kwargs)

    model, ref, n_sites = _model()
    ids = torch.randint(0, 64, (2, 1))
    with torch.no_grad(), _env.use_launcher(Counting()):
        with _Dispatched() as seen:
            got = model(ids, use_cache=False).logits
        assert Counting.launches == n_sites
    assert not [k for k in seen.ops if k.startswith("normbench.")], seen.ops
    assert _close(got, ref(ids, use_cache=False).logits)


def test_in_a_fresh_interpreter_process():
    """Fallback when something imported Triton before this module could switch on the interpreter."""
    triton_interp.rerun_in_fresh_process(MODE, __file__)
