"""The contract every norm must meet, run on the CPU: ``normbench check``."""

from __future__ import annotations

import copy
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from normbench.discovery import REGISTRY
from normbench.registry import NormSpec

# Small shapes: the check must run on a laptop CPU in seconds per norm.
TOKENS_C = 32
IMAGES_C = 32
IMAGE_HW = 6
BF16_TOL = 0.06  # |y_bf16 − y_fp32| ≤ tol·(1 + max|y_fp32|): bf16 keeps 8 bits of mantissa


@dataclass
class CheckResult:
    norm: str
    check: str
    ok: bool
    detail: str = ""


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
    return max(float((x.detach().double() - y.detach().double()).abs().max()) for x, y in zip(a, b))


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

    # every other backend that can run here: same state_dict keys and the same output
    for backend in spec.backends:
        if backend in ("eager", "compile") or spec.backend_unavailable(backend):
            continue
        try:
            eager = _build(spec, layout)
            other = _build(spec, layout, backend=backend)
            same_keys = set(eager.state_dict()) == set(other.state_dict())
            add(f"backend/{backend}/state_dict", same_keys,
                f"keys {sorted(eager.state_dict())} vs {sorted(other.state_dict())}")
            with torch.no_grad():
                d = _maxdiff(_run(eager, inputs, True), _run(other, inputs, True))
            add(f"backend/{backend}/output", d < 1e-4 * scale, f"differs from eager by {d:.3g}")
        except Exception as exc:
            add(f"backend/{backend}", False, f"{type(exc).__name__}: {exc}")
    return res


def check_norm(spec: NormSpec) -> list[CheckResult]:
    """Run every contract check on ``spec``; exceptions become failed checks, never crashes."""
    results: list[CheckResult] = []
    try:
        spec.validate()
    except Exception as exc:
        return [CheckResult(spec.name, "spec", False, str(exc))]
    for layout in spec.layouts:
        try:
            for name, ok, detail in _check_layout(spec, layout):
                results.append(CheckResult(spec.name, name, ok, "" if ok else detail))
        except Exception as exc:
            results.append(CheckResult(spec.name, f"run[{layout}]", False, f"{type(exc).__name__}: {exc}"))
    return results


def _check_task(name: str) -> list[CheckResult]:
    """``check_norm`` by registry name: the form an executor's worker runs."""
    return check_norm(REGISTRY.get(name))


# --- check as a gate: results cached by implementation hash ---------------------------------------------------------

CACHE_ENV = "NORMBENCH_CACHE_DIR"
PASSED, FAILED, NOT_RUN = "passed", "failed", "not_run"


def cache_dir() -> Path:
    """normbench's per-user cache: ``$NORMBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/normbench``, else
    ``~/.cache/normbench``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "normbench"


def cache_path() -> Path:
    """The check cache: one entry per norm with the implementation hashes it was checked at."""
    return cache_dir() / "checks.json"


def impl_hashes(spec: NormSpec) -> dict[str, str]:
    """``{backend: NormSpec.impl_hash(backend)}`` for every backend of ``spec``."""
    return {b: spec.impl_hash(b) for b in spec.backends}


@dataclass
class CheckStatus:
    """The contract-check verdict for one norm's current implementation."""

    norm: str
    status: str                       # passed | failed | not_run
    detail: str | None
    hashes: dict                      # {backend: impl_hash} the verdict is for
    cached: bool = False

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def for_record(self, backend: str) -> dict:
        """The record's ``check`` field for a measurement of ``backend``."""
        return {"status": self.status, "impl_hash": self.hashes.get(backend, ""), "detail": self.detail}


def _read_cache() -> dict:
    try:
        data = json.loads(cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cached_status(spec: NormSpec) -> CheckStatus | None:
    """The cached verdict for ``spec`` if it was checked at exactly its current implementation, else ``None``."""
    entry = _read_cache().get(spec.name)
    hashes = impl_hashes(spec)
    if not isinstance(entry, dict) or entry.get("hashes") != hashes or entry.get("status") not in (PASSED, FAILED):
        return None
    return CheckStatus(spec.name, entry["status"], entry.get("detail"), hashes, cached=True)


def store_status(status: CheckStatus) -> None:
    """Remember a verdict (read-merge-write, atomic; a lost race only means a check runs again)."""
    from normbench.records.provenance import utc_now
    from normbench.records.store import atomic_write_text
    from normbench.versions import __version__ as _nb_version

    data = _read_cache()
    data[status.norm] = {"status": status.status, "detail": status.detail, "hashes": status.hashes,
                         "checked_at": utc_now(), "normbench_version": _nb_version}
    try:
        atomic_write_text(cache_path(), json.dumps(dict(sorted(data.items())), indent=1) + "\n")
    except OSError as exc:  # an unwritable cache costs re-checks, never a result
        print(f"normbench: could not write the check cache {cache_path()}: {exc}", file=sys.stderr)


def _summarise(results: list[CheckResult]) -> tuple[str, str | None]:
    bad = [r for r in results if not r.ok]
    if not bad:
        return PASSED, None
    shown = "; ".join(f"{r.check}: {r.detail}" for r in bad[:3])
    return FAILED, f"{len(bad)}/{len(results)} checks failed: {shown}" + (" ..." if len(bad) > 3 else "")


def _outcome_results(name: str, outcome) -> list[CheckResult]:
    if outcome.ok:
        return outcome.value
    return [CheckResult(name, outcome.broke or "raised", False, outcome.error)]


def harness_failed(outcome) -> bool:
    """True when a check task raised: ``check_norm`` catches every error of the norm itself, so an exception that
    reaches the executor came from normbench (a hang or a crash of the worker is still the norm's verdict)."""
    return outcome.status == "error"


def check_task(name: str, time_limit: float | None):
    """The executor task that checks the norm called ``name``."""
    from normbench.executor import Task

    return Task(_check_task, (name,), label=name, timeout=time_limit)


def ensure_checked(names, executor=None, time_limit: float | None = None, log=None) -> dict[str, CheckStatus]:
    """The verdict for each norm: from the cache when its implementation was checked before, else by running the
    check now (through ``executor``, so a hang or crash is a failed check, not a stuck command)."""
    from normbench.executor import InProcessExecutor

    log = log or (lambda msg: print(msg, file=sys.stderr))
    out: dict[str, CheckStatus] = {}
    for name in dict.fromkeys(names):
        spec = REGISTRY.get(name)
        status = cached_status(spec)
        if status is None:
            log(f"checking {name}: no check verdict for its current implementation in {cache_path()}")
            outcome = (executor or InProcessExecutor()).submit(check_task(name, time_limit)).result()
            verdict, detail = _summarise(_outcome_results(name, outcome))
            status = CheckStatus(name, verdict, detail, impl_hashes(spec))
            if harness_failed(outcome):
                # check_norm turns every error of the norm into a failed check; an exception escaping it is the
                # harness's own (e.g. normbench's code edited under a running sweep): a verdict for this run
                # only, never remembered as the norm's.
                status.detail = (f"the check harness itself failed, not the norm (verdict not cached; run "
                                 f"`normbench check {name}`): {outcome.error}")
                log(f"checking {name}: {status.detail}")
            else:
                store_status(status)
        out[name] = status
    return out


def stamp(record: dict, status: CheckStatus | None, backend: str, forced: bool) -> dict:
    """Put the check verdict on a record; flag it ``forced`` (measured despite a failed check) or ``unchecked``."""
    from normbench.records.schema import add_flag

    if status is None:
        record["check"] = {"status": NOT_RUN, "impl_hash": record.get("impl_hash", ""), "detail": None}
        add_flag(record, "unchecked", "no contract check was run for this implementation")
        return record
    record["check"] = status.for_record(backend)
    if record.get("impl_hash"):  # the hash the record was measured at (an external baseline's included)
        record["check"]["impl_hash"] = record["impl_hash"]
    if not status.passed:
        why = f"the norm's contract check {status.status}" + (f": {status.detail}" if status.detail else "")
        if forced:
            add_flag(record, "forced", f"measured with --force although {why}")
        else:
            add_flag(record, "unchecked", why)
    return record


def refusal(status: CheckStatus, command: str) -> str:
    """The message for a norm a command refuses because it has not passed its check."""
    return (f"refusing to {command} {status.norm}: its contract check {status.status}"
            + (f" ({status.detail})" if status.detail else "")
            + f"; run `normbench check {status.norm}` to see why and fix the norm, or pass --force to "
              "measure it anyway (its records are flagged 'forced' and never ranked)")


def run_checks(names: list[str], all_norms: bool = False, as_json: bool = False, executor=None,
               time_limit: float | None = None) -> int:
    """``normbench check``: load errors first, then each norm (isolated by ``executor``); exit 1 if any fails.

    Always runs the checks (never the cache) and refreshes the cache that ``bench``, ``train`` and the suites read.
    """
    from normbench._stdout import document_stream
    from normbench.executor import InProcessExecutor

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
        outcome = executor.submit(check_task(spec.name, time_limit)).result()
        res = _outcome_results(spec.name, outcome)
        bad = [r for r in res if not r.ok]
        failed += bool(bad)
        verdict, detail = _summarise(res)
        hashes = impl_hashes(spec)
        store_status(CheckStatus(spec.name, verdict, detail, hashes))
        report.append({"norm": spec.name, "package": spec.package, "package_version": spec.package_version,
                       "passed": not bad, "checks": len(res), "status": verdict, "outcome": outcome.status,
                       "impl_hash": hashes.get("eager", ""),
                       "failures": [{"check": r.check, "detail": r.detail} for r in bad]})
        if not as_json:
            status = "ok  " if not bad else "FAIL"
            print(f"{status} {spec.name:<22} {len(res) - len(bad)}/{len(res)} checks")
            for r in bad:
                print(f"     {spec.name}: {r.check}: {r.detail}")
            sys.stdout.flush()
    if as_json:
        print(json.dumps({"passed": failed == 0, "norms": report}, indent=2), file=document_stream())
    else:
        print(f"\n{len(report) - failed}/{len(report)} norms pass the contract")
    return 1 if failed else 0
