"""The contract every norm must meet and the check gate: the norm's contract on the CPU, then each backend checked
against eager on every device kind it runs on (``normbench check``); verdicts cached per (norm, backend, device)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from normbench.contract import CheckResult, _check_layout, check_backend
from normbench.discovery import REGISTRY
from normbench.registry import DEVICE_KINDS, NormSpec, resolve

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
    from normbench import device as seam

    return seam.get().missing()


def _cuda_tensor(t: torch.Tensor) -> torch.Tensor:
    from normbench import device as seam

    return t.to(seam.tensor_device("cuda"))


DEVICES: dict[str, DeviceKind] = {"cpu": DeviceKind("cpu", "cpu", lambda: None),
                                  "cuda": DeviceKind("cuda", "cuda", _no_cuda, _cuda_tensor)}
_CUDA = DEVICES["cuda"]


def _kind(device: str) -> DeviceKind:
    """``DEVICES[device]``; the default CUDA entry in a rehearsal (``normbench.device``) puts tensors and modules on
    the CPU, where the simulated device runs them."""
    kind = DEVICES[device]
    if kind is _CUDA:
        from normbench import device as seam

        if seam.get().simulated:
            return replace(kind, torch_device=seam.tensor_device("cuda"))
    return kind


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
            checked = check_backend(spec, cand, _kind(device), layout, DEVICES["cpu"])
            out += [result(c, ok, detail) for c, ok, detail in checked]
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
    left to them. A rehearsal (``normbench.device``: its "cuda" is the CPU) keeps its own, so its CUDA verdicts never
    stand for a real GPU's."""
    from normbench import device as seam

    return cache_dir() / ("gate-rehearsal.json" if seam.get().simulated else "gate.json")


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
