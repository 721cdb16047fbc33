"""What the check gate (``normbench.check``) runs: the contract every norm must meet, on the CPU in seconds (output
shapes and dtypes, state, layouts, train/eval, dtype conversion), and a backend's equality with eager on a device."""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

from normbench.registry import NormSpec

# Small shapes: the check must run on a laptop CPU in seconds per norm.
TOKENS_C = 32
IMAGES_C = 32
IMAGE_HW = 6
BF16_TOL = 0.06  # |y_bf16 − y_fp32| ≤ tol·(1 + max|y_fp32|): bf16 keeps 8 bits of mantissa


@dataclass
class CheckResult:
    """One check: ``backend`` on ``device`` (the contract's checks: eager on the CPU). ``available=False``: not run
    because the backend or its device is not available here (``detail`` says why; not a failure)."""

    norm: str
    check: str
    ok: bool
    detail: str = ""
    backend: str = "eager"
    device: str = "cpu"
    available: bool = True


def make_inputs(spec: NormSpec, layout: str, batch: int = 4, dtype=torch.float32, seed: int = 0):
    """Deterministic example inputs for ``spec`` in ``layout``: a tuple of tensors for ``module(*inputs)``."""
    g = torch.Generator().manual_seed(seed)
    if spec.kind == "attention":
        shape = (batch, 2, 5, TOKENS_C)  # [N, heads, T, head_dim]
        return tuple(torch.randn(shape, generator=g).to(dtype) for _ in range(2))
    if layout == "images":
        shape = (batch, IMAGES_C, IMAGE_HW, IMAGE_HW)
    else:
        shape = (batch, 5, TOKENS_C)
    x = (torch.randn(shape, generator=g) * 2 + 0.5).to(dtype)
    if spec.kind == "residual":
        return x, torch.randn(shape, generator=g).to(dtype)
    return (x,)


def num_features(layout: str) -> int:
    return IMAGES_C if layout == "images" else TOKENS_C


def _outputs(out) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def _expected_shapes(spec: NormSpec, inputs) -> list[tuple[int, ...]]:
    if spec.kind in ("attention", "residual"):
        return [tuple(t.shape) for t in inputs]
    return [tuple(inputs[0].shape)]


def _build(spec: NormSpec, layout: str, seed: int = 0, backend: str = "eager") -> nn.Module:
    torch.manual_seed(seed)
    return spec.create(num_features(layout), layout=layout, backend=backend)


def _run(module: nn.Module, inputs, train: bool):
    module.train(train)
    return _outputs(module(*inputs))


def _maxdiff(a, b) -> float:
    return max(float((x.detach().cpu().double() - y.detach().cpu().double()).abs().max()) for x, y in zip(a, b))


def _check_layout(spec: NormSpec, layout: str) -> list[tuple[str, bool, str]]:
    res: list[tuple[str, bool, str]] = []
    tag = f"[{layout}]"

    def add(name, ok, detail=""):
        res.append((f"{name}{tag}", bool(ok), detail))

    # shape and finiteness, train and eval
    module = _build(spec, layout)
    inputs = make_inputs(spec, layout)
    for train in (True, False):
        out = _run(module, inputs, train)
        mode = "train" if train else "eval"
        shapes = [tuple(o.shape) for o in out]
        add(f"shape/{mode}", shapes == _expected_shapes(spec, inputs),
            f"expected {_expected_shapes(spec, inputs)}, got {shapes}")
        bad = sum(int((~torch.isfinite(o)).sum()) for o in out)
        add(f"finite/{mode}", bad == 0, f"{bad} non-finite output values")

    # gradients reach the input and every parameter
    module = _build(spec, layout)
    inputs = tuple(t.clone().requires_grad_(True) for t in make_inputs(spec, layout))
    out = _run(module, inputs, True)
    g = torch.Generator().manual_seed(1)
    loss = sum((o * torch.randn(o.shape, generator=g)).sum() for o in out)
    loss.backward()
    for i, t in enumerate(inputs):
        ok = t.grad is not None and bool(torch.isfinite(t.grad).all()) and float(t.grad.abs().max()) > 0
        add(f"grad/input{i}", ok, "no gradient" if t.grad is None else f"max|grad|={float(t.grad.abs().max()):.3g}")
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        ok = p.grad is not None and bool(torch.isfinite(p.grad).all()) and float(p.grad.abs().max()) > 0
        detail = "no gradient reached it" if p.grad is None else f"max|grad|={float(p.grad.abs().max()):.3g}"
        add(f"grad/{name}", ok, detail)

    # train/eval behaviour as declared
    # The LAST sample: order-dependent norms (Online Norm) let sample n see samples 0..n-1 only.
    big = make_inputs(spec, layout, batch=6, seed=3)
    last = tuple(t[-1:] for t in big)
    for train in (True, False):
        mode = "train" if train else "eval"
        m = _build(spec, layout)
        if not train and spec.running_state:
            _run(m, make_inputs(spec, layout, batch=6, seed=4), True)  # populate running statistics
        with torch.no_grad():
            alone = _run(copy.deepcopy(m), last, train)
            batched = tuple(o[-1:] for o in _run(copy.deepcopy(m), big, train))
        d = _maxdiff(alone, batched)
        # Relative bound: a different batch size may take another float32 kernel path (conv, matmul).
        tol = 1e-5 * (1 + max(float(o.detach().abs().max()) for o in batched))
        if train and spec.batch_dependent:
            add("batch_dependence/train", d > tol,
                f"declared batch-dependent but the last sample changed by only {d:.3g}")
        else:
            add(f"batch_independence/{mode}", d < tol,
                f"the last sample alone vs in a batch of 6 differs by {d:.3g}" + ("" if train else " in eval mode"))
    if spec.running_state:
        m = _build(spec, layout)
        before = {k: v.clone() for k, v in m.state_dict().items()}
        with torch.no_grad():
            _run(m, make_inputs(spec, layout, batch=6, seed=5), True)
        changed = [k for k, v in m.state_dict().items() if not torch.equal(before[k], v)]
        add("running_state/updates_in_train", bool(changed), "declared running state but no buffer changed in train")
        before = {k: v.clone() for k, v in m.state_dict().items()}
        with torch.no_grad():
            _run(m, make_inputs(spec, layout, batch=6, seed=6), False)
        changed = [k for k, v in m.state_dict().items() if not torch.equal(before[k], v)]
        add("running_state/frozen_in_eval", not changed, f"eval changed {changed}")
    else:
        m = _build(spec, layout)
        with torch.no_grad():
            d = _maxdiff(_run(m, inputs, True), _run(m, inputs, False))
        add("train_equals_eval", d < 1e-6, f"no running state declared, but train and eval differ by {d:.3g}")

    # deterministic under a seed
    with torch.no_grad():
        a = _run(_build(spec, layout, seed=7), inputs, True)
        b = _run(_build(spec, layout, seed=7), inputs, True)
    add("deterministic", _maxdiff(a, b) == 0.0, f"two builds with seed 7 differ by {_maxdiff(a, b):.3g}")

    # float32 vs bfloat16
    m32 = _build(spec, layout)
    m16 = copy.deepcopy(m32).to(torch.bfloat16)
    with torch.no_grad():
        y32 = _run(m32, inputs, False)
        y16 = _run(m16, tuple(t.detach().to(torch.bfloat16) for t in inputs), False)
    dtypes = {o.dtype for o in y16}
    add("bfloat16/dtype", dtypes == {torch.bfloat16}, f"bfloat16 input gave outputs of {dtypes}")
    scale = 1 + max(float(o.detach().abs().max()) for o in y32)
    d = _maxdiff(y32, y16)
    add("bfloat16/close", d <= BF16_TOL * scale, f"bf16 vs fp32 max diff {d:.3g} > {BF16_TOL * scale:.3g}")

    # state_dict round trip
    src = _build(spec, layout, seed=11)
    with torch.no_grad():
        _run(src, make_inputs(spec, layout, batch=6, seed=12), True)
        for p in src.parameters():
            p.add_(0.01 * torch.randn_like(p))
    dst = _build(spec, layout, seed=13)
    try:
        dst.load_state_dict(src.state_dict(), strict=True)
        with torch.no_grad():
            d = _maxdiff(_run(src, inputs, False), _run(dst, inputs, False))
        add("state_dict/round_trip", d < 1e-6, f"outputs differ by {d:.3g} after load_state_dict")
    except Exception as exc:
        add("state_dict/round_trip", False, f"{type(exc).__name__}: {exc}")

    # .to(dtype) moves every floating parameter and buffer
    m = _build(spec, layout).to(torch.float64)
    left = [n for n, t in list(m.named_parameters()) + list(m.named_buffers())
            if t.is_floating_point() and t.dtype != torch.float64]
    with torch.no_grad():
        y = _run(m, tuple(t.detach().double() for t in inputs), False)
    add("to_dtype", not left and all(o.dtype == torch.float64 for o in y),
        f"still not float64 after .to(float64): {left or [o.dtype for o in y]}")

    return res


@contextlib.contextmanager
def _ieee_float32():
    """TF32 off while backends are compared: cuDNN convolutions use TF32 by default (about 1e-3 relative), which the
    float32 tolerance would read as a wrong implementation (a weight-standardised convolution on a GPU, say)."""
    flags = (torch.backends.cudnn, torch.backends.cuda.matmul)
    try:
        saved = [f.allow_tf32 for f in flags]
    except RuntimeError:  # precision set through the newer fp32_precision API: left as the user set it
        yield
        return
    try:
        for f in flags:
            f.allow_tf32 = False
        yield
    finally:
        for f, v in zip(flags, saved):
            f.allow_tf32 = v


def check_backend(spec: NormSpec, cand, dev, layout: str, cpu) -> list[tuple[str, bool, str]]:
    """``cand`` on ``dev`` against eager on the same device (eager itself: against eager on the CPU): the same
    ``state_dict`` keys, outputs and (unless forward-only) input and parameter gradients within tolerance.
    ``cand``: a ``check.Candidate``; ``dev``, ``cpu``: ``check.DeviceKind``s (the device checked, and the CPU)."""
    res: list[tuple[str, bool, str]] = []
    where = "the CPU" if cand.name == "eager" else dev.name

    def add(name, ok, detail=""):
        res.append((f"backend/{cand.name}@{dev.name}/{name}[{layout}]", bool(ok), detail))

    ref_dev = cpu if cand.name == "eager" else dev
    eager = _build(spec, layout)
    other = cand.build(copy.deepcopy(eager))
    add("state_dict", set(eager.state_dict()) == set(other.state_dict()),
        f"keys {sorted(eager.state_dict())} vs {sorted(other.state_dict())}")
    eager = eager.to(device=ref_dev.torch_device, dtype=cand.dtype).train(True)
    other = other.to(device=dev.torch_device, dtype=cand.dtype).train(True)
    base = make_inputs(spec, layout, dtype=cand.dtype)
    grad = not cand.forward_only
    # float32: the same arithmetic in another order; bfloat16 (a library without float32): its rounding
    rel = 1e-4 if cand.dtype == torch.float32 else BF16_TOL

    def run(module, d):
        xs = tuple(d.put(t.clone()).detach().requires_grad_(grad) for t in base)
        with torch.set_grad_enabled(grad):
            out = _run(module, tuple(x.clone() for x in xs) if cand.inplace_inputs else xs, True)
            if not grad:
                return out, [], {}
            g = torch.Generator().manual_seed(1)
            loss = sum((o.float() * d.put(torch.randn(o.shape, generator=g))).sum() for o in out)
            loss.backward()
        params = {n: p.grad for n, p in module.named_parameters() if p.requires_grad}
        return out, [x.grad for x in xs], params

    with _ieee_float32():
        y_ref, dx_ref, dw_ref = run(eager, ref_dev)
        y, dx, dw = run(other, dev)

    def close(name, a, b):
        if a is None or b is None:
            add(name, a is None and b is None, f"a gradient on one side only (eager: {a is not None}, "
                                                f"{cand.name}: {b is not None})")
            return
        tol = rel * (1 + max(float(t.detach().cpu().double().abs().max()) for t in a))
        d = _maxdiff(a, b)
        add(name, d <= tol, f"differs from eager on {where} by {d:.3g} (tolerance {tol:.3g})")

    close("output", y_ref, y)
    for i, (a, b) in enumerate(zip(dx_ref, dx)):
        close(f"grad/input{i}", None if a is None else (a,), None if b is None else (b,))
    for name, a in dw_ref.items():
        b = dw.get(name)
        close(f"grad/{name}", None if a is None else (a,), None if b is None else (b,))
    return res
