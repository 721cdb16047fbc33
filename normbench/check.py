"""The contract every norm must meet and the check gate: the norm's contract on the CPU, then each backend checked
against eager on every device kind it runs on (``normbench check``); verdicts cached per (norm, backend, device)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from normbench.discovery import REGISTRY
from normbench.registry import DEVICE_KINDS, NormSpec, resolve

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


# --- devices and backends under check -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceKind:
    """A kind of device backends are checked on: the torch device its tensors go to and whether this machine has it.

    :data:`DEVICES` is the seam tests replace: a fake ``"cuda"`` whose ``put`` keeps tensors on the CPU (as a tensor
    subclass a test backend can recognise) drives the CUDA verdicts on a machine without a GPU."""

    name: str
    torch_device: str
    missing: Callable[[], str | None]                     # None when this machine has it, else why not
    put_tensor: Callable[[torch.Tensor], torch.Tensor] | None = None  # how a CPU tensor goes there (default: .to)

    def put(self, t: torch.Tensor) -> torch.Tensor:
        return self.put_tensor(t) if self.put_tensor is not None else t.to(self.torch_device)


def _no_cuda() -> str | None:
    return None if torch.cuda.is_available() else "no CUDA device here (torch.cuda.is_available() is False)"


DEVICES: dict[str, DeviceKind] = {"cpu": DeviceKind("cpu", "cpu", lambda: None),
                                  "cuda": DeviceKind("cuda", "cuda", _no_cuda)}


def device_kind(device: str) -> str:
    """``"cuda:1"`` -> ``"cuda"``: the kind of device a case or run names, as verdicts are kept."""
    kind = str(device).partition(":")[0]
    if kind not in DEVICE_KINDS:
        raise ValueError(f"unknown device {device!r}; device kinds are {', '.join(DEVICE_KINDS)}")
    return kind


@dataclass(frozen=True)
class Candidate:
    """A backend as the gate checks it: the device kinds it runs on, its implementation hash, and how it is built
    around the eager module (sharing its parameters). The norm's own backends come from its spec
    (:func:`candidates`); the external baselines from a provider the commands above this layer name
    (``normbench.measure.baselines:gate_candidates``). ``compile`` is not one: it is the eager module compiled, so it
    carries eager's verdict on each device (compiling every norm in the gate would cost seconds per norm)."""

    name: str
    devices: tuple[str, ...]
    impl_hash: Callable[[], str]
    build: Callable[[nn.Module], nn.Module]
    unavailable: Callable[[str, str], str | None]       # (layout, device kind) -> why it cannot run there, or None
    layouts: tuple[str, ...] | None = None              # None: every layout of the norm
    dtype: torch.dtype = torch.float32                  # bfloat16 for a library without float32
    forward_only: bool = False                          # no autograd: outputs only
    inplace_inputs: bool = False                        # overwrites its inputs: it gets copies


def _spec_candidates(spec: NormSpec) -> list[Candidate]:
    out = [Candidate("eager", DEVICE_KINDS, lambda: spec.impl_hash("eager"), lambda m: m, lambda layout, d: None)]
    for b in spec.extra_backends:
        out.append(Candidate(
            b.name, spec.backend_devices(b.name), lambda b=b: spec.impl_hash(b.name),
            lambda m, b=b: resolve(b.build)(m, spec), lambda layout, d, b=b: spec.backend_unavailable(b.name)))
    return out


def candidates(spec: NormSpec, provider: str | Callable | None = None) -> dict[str, Candidate]:
    """``{backend: Candidate}``: eager (checked on devices other than the CPU against eager on the CPU), the spec's
    extra backends, and what ``provider(spec)`` (a callable or ``"module:attr"``) adds: the external baselines."""
    found = _spec_candidates(spec) + (list(resolve(provider)(spec)) if provider else [])
    return {c.name: c for c in found}


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


def _check_backend(spec: NormSpec, cand: Candidate, dev: DeviceKind, layout: str) -> list[tuple[str, bool, str]]:
    """``cand`` on ``dev`` against eager on the same device (eager itself: against eager on the CPU): the same
    ``state_dict`` keys, outputs and (unless forward-only) input and parameter gradients within tolerance."""
    res: list[tuple[str, bool, str]] = []
    where = "the CPU" if cand.name == "eager" else dev.name

    def add(name, ok, detail=""):
        res.append((f"backend/{cand.name}@{dev.name}/{name}[{layout}]", bool(ok), detail))

    ref_dev = DEVICES["cpu"] if cand.name == "eager" else dev
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

    def run(module, d: DeviceKind):
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


def _backend_results(spec: NormSpec, cand: Candidate, device: str) -> list[CheckResult]:
    """``cand`` on one device kind, every layout it supports; "not available here" results when it cannot run."""
    name = f"backend/{cand.name}@{device}"

    def result(check, ok, detail="", available=True):
        return CheckResult(spec.name, check, ok, "" if ok and available else detail, cand.name, device, available)

    if device not in cand.devices:
        return [result(name, True, f"{cand.name} does not run on {device} (it declares "
                                   f"{', '.join(cand.devices)})", available=False)]
    missing = DEVICES[device].missing()
    if missing:
        return [result(name, True, missing, available=False)]
    out = []
    for layout in (lay for lay in spec.layouts if cand.layouts is None or lay in cand.layouts):
        why = cand.unavailable(layout, device)
        if why:
            out.append(result(f"{name}[{layout}]", True, why, available=False))
            continue
        try:
            out += [result(c, ok, detail) for c, ok, detail in _check_backend(spec, cand, DEVICES[device], layout)]
        except Exception as exc:
            out.append(result(f"{name}[{layout}]", False, f"{type(exc).__name__}: {exc}"))
    return out


def check_norm(spec: NormSpec, pairs=None, contract: bool = True, provider=None) -> list[CheckResult]:
    """Run the contract checks on ``spec`` (eager, on the CPU) and check each backend against eager on each device
    kind: ``pairs`` ``[(backend, device kind)]`` (default: every backend on every kind it declares). Exceptions
    become failed checks, never crashes; a backend or device not available here gives "not available" results."""
    results: list[CheckResult] = []
    try:
        spec.validate()
    except Exception as exc:
        return [CheckResult(spec.name, "spec", False, str(exc))]
    if contract:
        for layout in spec.layouts:
            try:
                for name, ok, detail in _check_layout(spec, layout):
                    results.append(CheckResult(spec.name, name, ok, "" if ok else detail))
            except Exception as exc:
                results.append(CheckResult(spec.name, f"run[{layout}]", False, f"{type(exc).__name__}: {exc}"))
    try:
        cands = candidates(spec, provider)
    except Exception as exc:  # a broken devices declaration or baseline provider fails the check, never crashes it
        return results + [CheckResult(spec.name, "backends", False, f"{type(exc).__name__}: {exc}")]
    if pairs is None:
        pairs = [(c.name, d) for c in cands.values() for d in c.devices if (c.name, d) != ("eager", "cpu")]
    for backend, device in pairs:
        if backend not in cands:
            results.append(CheckResult(spec.name, f"backend/{backend}@{device}", False,
                                       f"{spec.name} has no backend {backend!r} the check knows", backend, device))
            continue
        results += _backend_results(spec, cands[backend], device)
    return results


def _check_task(name: str, pairs=None, contract: bool = True, provider=None) -> list[CheckResult]:
    """``check_norm`` by registry name: the form an executor's worker runs."""
    return check_norm(REGISTRY.get(name), pairs, contract, provider)


# --- check as a gate: verdicts per (norm, backend, device kind), cached by implementation hash ----------------------

CACHE_ENV = "NORMBENCH_CACHE_DIR"
PASSED, FAILED, NOT_RUN, UNAVAILABLE = "passed", "failed", "not_run", "unavailable"


def cache_dir() -> Path:
    """normbench's per-user cache: ``$NORMBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/normbench``, else
    ``~/.cache/normbench``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "normbench"


def cache_path() -> Path:
    """The check cache: per norm, one entry per ``backend@device`` with the implementation hash it was checked at
    (``eager@cpu`` is the norm's contract). A new file name: the per-norm ``checks.json`` of earlier versions is
    left to them."""
    return cache_dir() / "gate.json"


@dataclass
class Verdict:
    """The gate's verdict on one backend of one norm on one device kind."""

    norm: str
    backend: str
    device: str
    status: str                       # passed | failed | unavailable | not_run
    detail: str | None
    impl_hash: str = ""
    cached: bool = False
    of_contract: bool = False         # the norm's contract (eager on the CPU) decided it, not this backend's check

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    @property
    def key(self) -> str:
        return f"{self.backend}@{self.device}"

    def for_record(self) -> dict:
        """The record's ``check`` field (a record's statuses: passed, failed, not_run)."""
        status = self.status if self.status in (PASSED, FAILED) else NOT_RUN
        return {"status": status, "impl_hash": self.impl_hash, "detail": self.detail}


@dataclass
class CheckStatus:
    """The gate's verdicts for one norm: its contract (eager, on the CPU) and each backend checked on a device kind.

    :meth:`verdict` answers for a (backend, device) pair: a failed contract fails every backend (they are all
    compared with eager); ``compile`` carries eager's verdict on that device; a failing backend fails only itself."""

    norm: str
    contract: Verdict
    verdicts: dict = field(default_factory=dict)  # (backend, device kind) -> Verdict

    def verdict(self, backend: str, device: str = "cpu") -> Verdict:
        kind = device_kind(device)
        c = self.contract
        if not c.passed:
            return replace(c, backend=backend, device=kind, of_contract=True)
        own = "eager" if backend == "compile" else backend
        v = replace(c, of_contract=True) if (own, kind) == ("eager", "cpu") else self.verdicts.get((own, kind))
        if v is None:
            v = Verdict(self.norm, own, kind, NOT_RUN, f"{own} has not been checked on {kind}")
        if backend == "compile" and v.detail:
            v = replace(v, detail=f"compile carries eager's verdict: {v.detail}")
        return replace(v, backend=backend)

    def refused(self, backend: str, device: str = "cpu") -> bool:
        """Whether the gate refuses ``backend`` on ``device``: its verdict failed or is missing. "Not available
        here" is no refusal: the measuring core skips such a case with its own reason."""
        return self.verdict(backend, device).status in (FAILED, NOT_RUN)

    @property
    def failed(self) -> list[Verdict]:
        """Every failed verdict: the contract's, or each backend's that failed on its device."""
        if not self.contract.passed:
            return [self.contract]
        return [v for v in self.verdicts.values() if v.status == FAILED]

    @property
    def passed(self) -> bool:
        """The contract and every backend checked passed (unavailable ones aside)."""
        return not self.failed

    @property
    def status(self) -> str:
        return PASSED if self.passed else FAILED

    @property
    def detail(self) -> str | None:
        bad = self.failed
        return "; ".join(v.detail if v is self.contract else f"{v.key}: {v.detail}" for v in bad) or None

    @property
    def cached(self) -> bool:
        return self.contract.cached and all(v.cached for v in self.verdicts.values() if v.status in (PASSED, FAILED))

    def for_record(self, backend: str, device: str = "cpu") -> dict:
        """The record's ``check`` field for a measurement of ``backend`` on ``device``."""
        return self.verdict(backend, device).for_record()


def _read_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _cached(entry, norm: str, backend: str, device: str, impl_hash: str) -> Verdict | None:
    if (not isinstance(entry, dict) or entry.get("impl_hash") != impl_hash
            or entry.get("status") not in (PASSED, FAILED)):
        return None
    return Verdict(norm, backend, device, entry["status"], entry.get("detail"), impl_hash, cached=True)


def _hash(cand: Candidate) -> str:
    try:
        return cand.impl_hash()
    except Exception as exc:  # e.g. a plugin backend whose sources are gone: never a cache hit
        return f"unhashable: {type(exc).__name__}: {exc}"


def cached_status(spec: NormSpec, pairs=(), provider=None) -> CheckStatus | None:
    """The cached verdicts for ``spec``'s contract and for each (backend, device kind) of ``pairs``, if each was
    checked at exactly its current implementation, else ``None``."""
    entries = _read_cache().get(spec.name)
    entries = entries if isinstance(entries, dict) else {}
    cands = candidates(spec, provider)
    contract = _cached(entries.get("eager@cpu"), spec.name, "eager", "cpu", _hash(cands["eager"]))
    if contract is None:
        return None
    status = CheckStatus(spec.name, contract)
    for backend, device in _own_pairs(pairs):
        cand = cands.get(backend)
        v = None if cand is None else _cached(entries.get(f"{backend}@{device}"), spec.name, backend, device,
                                               _hash(cand))
        if v is None:
            return None
        status.verdicts[(backend, device)] = v
    return status


def store_status(status: CheckStatus) -> None:
    """Remember the passed and failed verdicts (read-merge-write, atomic; a lost race only means a check runs
    again). "Not available here" is never cached: installing a library or a GPU changes it, not the code."""
    from normbench.records.provenance import utc_now
    from normbench.records.store import atomic_write_text
    from normbench.versions import __version__ as _nb_version

    data = _read_cache()
    entries = data.get(status.norm) if isinstance(data.get(status.norm), dict) else {}
    # a norm's entries from the cache format before per-device verdicts have no "@": dropped
    entries = {k: v for k, v in entries.items() if "@" in k}
    for v in [status.contract, *status.verdicts.values()]:
        if v.status in (PASSED, FAILED) and not v.cached:
            entries[v.key] = {"status": v.status, "detail": v.detail, "impl_hash": v.impl_hash,
                              "checked_at": utc_now(), "normbench_version": _nb_version}
    data[status.norm] = dict(sorted(entries.items()))
    try:
        atomic_write_text(cache_path(), json.dumps(dict(sorted(data.items())), indent=1) + "\n")
    except OSError as exc:  # an unwritable cache costs re-checks, never a result
        print(f"normbench: could not write the check cache {cache_path()}: {exc}", file=sys.stderr)


def _summarise(results: list[CheckResult]) -> tuple[str, str | None]:
    bad = [r for r in results if not r.ok]
    ran = [r for r in results if r.available]
    if not bad:
        if results and not ran:
            return UNAVAILABLE, f"not available here: {results[0].detail}"
        return PASSED, None
    shown = "; ".join(f"{r.check}: {r.detail}" for r in bad[:3])
    return FAILED, f"{len(bad)}/{len(ran)} checks failed: {shown}" + (" ..." if len(bad) > 3 else "")


def _verdicts(spec: NormSpec, results: list[CheckResult], cands: dict) -> tuple[Verdict | None, dict]:
    """(the contract's verdict if its checks are among ``results``, {(backend, device): Verdict})."""
    by: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        by.setdefault((r.backend, r.device), []).append(r)
    out = {}
    contract = None
    for (backend, device), rs in by.items():
        status, detail = _summarise(rs)
        cand = cands.get(backend)
        v = Verdict(spec.name, backend, device, status, detail, _hash(cand) if cand else "")
        if (backend, device) == ("eager", "cpu"):
            contract = v
        else:
            out[(backend, device)] = v
    return contract, out


def _outcome_results(name: str, outcome) -> list[CheckResult]:
    if outcome.ok:
        return outcome.value
    return [CheckResult(name, outcome.broke or "raised", False, outcome.error)]


def harness_failed(outcome) -> bool:
    """True when a check task raised: ``check_norm`` catches every error of the norm itself, so an exception that
    reaches the executor came from normbench (a hang or a crash of the worker is still the norm's verdict)."""
    return outcome.status == "error"


def check_task(name: str, time_limit: float | None, pairs=None, contract: bool = True, provider=None):
    """The executor task that checks the norm called ``name`` (its contract, and ``pairs`` of (backend, device))."""
    from normbench.executor import Task

    label = name if contract and not pairs else f"{name} " + " ".join(f"{b}@{d}" for b, d in pairs or ())
    return Task(_check_task, (name, pairs, contract, provider), label=label.strip(), timeout=time_limit)


def _own_pairs(pairs) -> list[tuple[str, str]]:
    """The (backend, device kind) pairs a verdict is kept for: compile is eager's, eager on the CPU the contract's."""
    out = []
    for backend, device in pairs:
        pair = ("eager" if backend == "compile" else backend, device_kind(device))
        if pair != ("eager", "cpu") and pair not in out:
            out.append(pair)
    return out


def _run_check(spec: NormSpec, executor, time_limit, pairs, contract: bool, provider):
    """Run one check task: (its results, the harness's own error or None, the task's outcome status). A task that
    hung or crashed fails what it was checking (the contract, or each of its pairs): that is the norm's verdict."""
    outcome = executor.submit(check_task(spec.name, time_limit, pairs, contract, provider)).result()
    if outcome.ok:
        return outcome.value, None, outcome.status
    targets = ([("eager", "cpu")] if contract else []) + list(pairs or [])
    results = [CheckResult(spec.name, outcome.broke or "raised", False, outcome.error, b, d) for b, d in targets]
    return results, (outcome.error if harness_failed(outcome) else None), outcome.status


def _probe(spec: NormSpec, cand: Candidate | None, backend: str, device: str) -> str | None:
    """Why ``backend`` cannot run on ``device`` on this machine (so no check task need start), or ``None``."""
    if cand is None:
        return None
    layouts = [lay for lay in spec.layouts if cand.layouts is None or lay in cand.layouts]
    if device not in cand.devices:
        also = next((r for r in (cand.unavailable(lay, device) for lay in layouts) if r), None)
        return (f"{backend} does not run on {device} (it declares {', '.join(cand.devices)})"
                + (f"; {also}" if also else ""))
    missing = DEVICES[device].missing()
    if missing:
        return missing
    reasons = [cand.unavailable(lay, device) for lay in layouts]
    return reasons[0] if reasons and all(reasons) else None


@dataclass
class _Run:
    """What one norm's checking produced: its verdicts, every check result, and the harness's own error if any."""

    status: CheckStatus
    results: list = field(default_factory=list)
    harness: str | None = None
    outcome: str = "ok"


def _check_spec(spec: NormSpec, pairs, executor, time_limit, provider, use_cache: bool, log) -> _Run:
    """The contract (cached or checked now, in its own task), then, if it passed, each (backend, device) pair:
    cached, "not available here" when this machine cannot run it (probed here unless the executor is remote), else
    checked in one task per backend (a backend that hangs fails only itself)."""
    from normbench.executor import InProcessExecutor

    executor = executor or InProcessExecutor()
    remote = getattr(executor, "remote", False)
    try:
        cands = candidates(spec, provider)
    except Exception as exc:  # a broken devices declaration or baseline provider: the norm's failure
        contract = Verdict(spec.name, "eager", "cpu", FAILED, f"its backends: {type(exc).__name__}: {exc}")
        return _Run(CheckStatus(spec.name, contract), [CheckResult(spec.name, "backends", False, contract.detail)])
    entries = _read_cache().get(spec.name) if use_cache else None
    entries = entries if isinstance(entries, dict) else {}
    run = _Run(CheckStatus(spec.name, None))
    contract = _cached(entries.get("eager@cpu"), spec.name, "eager", "cpu", _hash(cands["eager"]))
    if contract is None:
        if use_cache:
            log(f"checking {spec.name}: no check verdict for its current implementation in {cache_path()}")
        run.results, run.harness, run.outcome = _run_check(spec, executor, time_limit, [], True, provider)
        contract, _ = _verdicts(spec, run.results, cands)
        if contract is None:  # an invalid spec (its one result is "spec"): the norm's verdict
            contract = Verdict(spec.name, "eager", "cpu", FAILED, _summarise(run.results)[1], _hash(cands["eager"]))
    run.status.contract = contract
    todo: dict[str, list[tuple[str, str]]] = {}
    for backend, device in pairs if contract.passed else ():
        cand = cands.get(backend)
        v = None if cand is None else _cached(entries.get(f"{backend}@{device}"), spec.name, backend, device,
                                               _hash(cand))
        if v is None and cand is None:
            v = Verdict(spec.name, backend, device, NOT_RUN, f"the gate has no check for backend {backend!r}")
        why = None if v is not None or remote else _probe(spec, cand, backend, device)
        if why:
            v = Verdict(spec.name, backend, device, UNAVAILABLE, f"not available here: {why}", _hash(cand))
        if v is None:
            todo.setdefault(backend, []).append((backend, device))
        else:
            run.status.verdicts[(backend, device)] = v
    for backend, bpairs in todo.items():
        if use_cache:
            log(f"checking {spec.name}'s {backend} backend on {', '.join(d for _, d in bpairs)}: no verdict for "
                f"its current implementation in {cache_path()}")
        results, err, _ = _run_check(spec, executor, time_limit, bpairs, False, provider)
        run.results += results
        run.harness = run.harness or err
        run.status.verdicts.update(_verdicts(spec, results, cands)[1])
    if run.harness:
        # check_norm turns every error of the norm into a failed check; an exception escaping it is the
        # harness's own (e.g. normbench's code edited under a running sweep): a verdict for this run only,
        # never remembered as the norm's.
        msg = (f"the check harness itself failed, not the norm (verdict not cached; run `normbench check "
               f"{spec.name}`): {run.harness}")
        for v in [run.status.contract, *run.status.verdicts.values()]:
            if v.status == FAILED and not v.cached:
                v.detail = msg
        log(f"checking {spec.name}: {msg}")
    else:
        store_status(run.status)
    return run


def ensure_checked(needs, executor=None, time_limit: float | None = None, log=None,
                   provider=None) -> dict[str, CheckStatus]:
    """The verdicts for each norm of ``needs`` (norm names, or ``(norm, backend, device)`` triples): its contract
    and each backend named on each device kind, from the cache when that implementation was checked before, else by
    checking now (through ``executor``, so a hang or crash is a failed check, not a stuck command).

    ``provider``: what adds the external baselines to the norm's own backends
    (``normbench.measure.baselines.GATE``); without it a baseline named in ``needs`` is not checked (refused)."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    wanted: dict[str, list[tuple[str, str]]] = {}
    for need in needs:
        name, pair = (need, None) if isinstance(need, str) else (need[0], (need[1], need[2]))
        wanted.setdefault(name, [])
        if pair is not None:
            wanted[name].append(pair)
    return {name: _check_spec(REGISTRY.get(name), _own_pairs(pairs), executor, time_limit, provider, True,
                              log).status
            for name, pairs in wanted.items()}


def stamp(record: dict, status: CheckStatus | None, backend: str, forced: bool) -> dict:
    """Put the gate's verdict for the record's backend on its device on a record; flag it ``forced`` (measured
    despite a failed check) or ``unchecked``."""
    from normbench.records.schema import add_flag

    if status is None:
        record["check"] = {"status": NOT_RUN, "impl_hash": record.get("impl_hash", ""), "detail": None}
        add_flag(record, "unchecked", "no contract check was run for this implementation")
        return record
    device = (record.get("config") or {}).get("device") or "cpu"
    verdict = status.verdict(backend, device)
    record["check"] = verdict.for_record()
    if record.get("impl_hash"):  # the hash the record was measured at (an external baseline's included)
        record["check"]["impl_hash"] = record["impl_hash"]
    if not verdict.passed:
        what = "the norm's contract check" if verdict.of_contract else f"the check of {backend} on {verdict.device}"
        why = f"{what} {verdict.status}" + (f": {verdict.detail}" if verdict.detail else "")
        if forced:
            add_flag(record, "forced", f"measured with --force although {why}")
        else:
            add_flag(record, "unchecked", why)
    return record


def refusal(status: CheckStatus | Verdict, command: str) -> str:
    """The message for what a command refuses: a norm whose contract failed, or one backend on one device kind."""
    v = status if isinstance(status, Verdict) else (status.failed or [status.contract])[0]
    if v.of_contract or (v.backend, v.device) == ("eager", "cpu"):
        what, why, device_opt = v.norm, f"its contract check {v.status}", ""
    else:
        what = f"{v.norm}'s {v.backend} backend on {v.device}"
        why, device_opt = f"its check against eager on {v.device} {v.status}", f" --device {v.device}"
    return (f"refusing to {command} {what}: {why}" + (f" ({v.detail})" if v.detail else "")
            + f"; run `normbench check {v.norm}{device_opt}` to see why and fix it, or pass --force to "
              "measure it anyway (its records are flagged 'forced' and never ranked)")


def run_checks(names: list[str], all_norms: bool = False, as_json: bool = False, executor=None,
               time_limit: float | None = None, device: str = "auto", provider=None) -> int:
    """``normbench check``: load errors first, then each norm (isolated by ``executor``): its contract on the CPU,
    then each backend against eager on each device kind it runs on (``device``: ``cpu``, ``cuda``, or ``auto``:
    every kind, "not available here" where this machine lacks it); exit 1 if any check fails.

    Always runs the checks (never the cache) and refreshes the cache that ``bench``, ``train`` and the suites read.
    """
    from normbench._stdout import document_stream
    from normbench.executor import InProcessExecutor

    if device not in ("auto", *DEVICE_KINDS):
        raise ValueError(f"--device takes auto, {', '.join(DEVICE_KINDS)}; got {device!r}")
    if device != "auto" and DEVICES[device].missing():
        raise ValueError(f"--device {device}: {DEVICES[device].missing()}; use --device auto or cpu")
    kinds = DEVICE_KINDS if device == "auto" else (device,)
    specs = [REGISTRY.get(n) for n in (REGISTRY.names() if all_norms else names)]
    errors = REGISTRY.errors if all_norms else [e for e in REGISTRY.errors if e.name in names]
    executor = executor or InProcessExecutor()
    report = []
    failed = 0
    for e in errors:
        failed += 1
        report.append({"norm": e.name, "package": e.package, "source": e.source, "passed": False, "checks": 0,
                       "status": "load_error", "failures": [{"check": "load", "detail": e.error}]})
        if not as_json:
            print(f"FAIL {e.name:<22} plugin failed to load from {e.source}: {e.error}")
            sys.stdout.flush()
    for spec in specs:
        try:
            pairs = [(c.name, d) for c in candidates(spec, provider).values() for d in kinds
                     if (c.name, d) != ("eager", "cpu")]
        except Exception:  # reported as the norm's failure by _check_spec
            pairs = []
        run = _check_spec(spec, pairs, executor, time_limit, provider, False, lambda msg: None)
        status = run.status
        bad = [r for r in run.results if not r.ok]
        if status.contract.status == FAILED and not bad:
            bad = [CheckResult(spec.name, "contract", False, status.contract.detail or "")]
        ran = [r for r in run.results if r.available]
        failed += bool(bad)
        verdicts = [{"backend": v.backend, "device": v.device, "status": v.status, "detail": v.detail,
                     "impl_hash": v.impl_hash} for v in [status.contract, *status.verdicts.values()]]
        report.append({"norm": spec.name, "package": spec.package, "package_version": spec.package_version,
                       "passed": not bad, "checks": len(ran), "status": PASSED if not bad else FAILED,
                       "outcome": run.outcome, "impl_hash": status.contract.impl_hash,
                       "failures": [{"check": r.check, "detail": r.detail} for r in bad], "verdicts": verdicts})
        if not as_json:
            mark = "ok  " if not bad else "FAIL"
            absent = [v for v in status.verdicts.values() if v.status == UNAVAILABLE]
            print(f"{mark} {spec.name:<22} {len(ran) - len(bad)}/{len(ran)} checks"
                  + (f" ({len(absent)} backend/device pair(s) not available here: "
                     f"{', '.join(v.key for v in absent)})" if absent and device == "auto" else ""))
            for v in absent if device != "auto" else ():
                print(f"     {spec.name}: {v.key}: {v.detail}")
            for r in bad:
                print(f"     {spec.name}: {r.check}: {r.detail}")
            sys.stdout.flush()
    if as_json:
        print(json.dumps({"passed": failed == 0, "devices": list(kinds), "norms": report}, indent=2),
              file=document_stream())
    else:
        print(f"\n{len(report) - failed}/{len(report)} norms pass the contract")
    return 1 if failed else 0
