"""Head to head: the backends of one norm at one shape, dtype and device, timed interleaved and paired.

A *set* is the cases that differ only in backend (and pass): :func:`set_key`. :func:`measure_set` builds every
backend's module on the same inputs (one set of tensors, copied to each), checks each against float64 (which also
compiles and warms it up), then times each pass with :func:`normbench.measure.timers.interleaved_timing`: every round
runs each backend once in a freshly shuffled order, so round ``i`` of one backend pairs with round ``i`` of another
and drift on a shared machine cancels in their ratio. Each record keeps its own samples' summary (as a group's) and,
in ``metrics.paired``, one entry per partner: the partner's record id and backend, the median per-round ratio
(this / partner), its 95 % interval, n and the verdict (``normbench.stats.paired_ratio``). None of it is in the
config, so a record's id is the same whether it was measured alone or head to head. The same-size copy of each pass
(``normbench.measure.reference``) is one more member of the rounds, so ``pct_of_same_size_copy`` is paired too.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from normbench.measure.group import (
    Context,
    FarAboveCeiling,
    Prepared,
    Unsupported,
    build_record,
    peak_memory,
)
from normbench.measure.planning import Case
from normbench.measure.timers import TimerSettings, interleaved_timing

#: Paired rounds: at least this many (the sign-test interval of a median needs them: 50 rounds give ranks 17 and
#: 32), at most ``MAX_ROUNDS``, and at least ``MIN_TIME`` seconds of each backend's work (docs/measurement.md,
#: "Head to head").
MIN_ROUNDS = 50
MAX_ROUNDS = 400
MIN_TIME = 0.25
#: Slow calls (over ``MAX_TIME`` seconds of each backend's work) stop after ``SLOW_ROUNDS`` rounds (ranks 9 and 20).
SLOW_ROUNDS = 30
MAX_TIME = 4.0
#: A rehearsal (``normbench.device``'s simulated GPU) proves the measurement path, not its numbers (its records are
#: flagged ``rehearsal`` and never ranked): its sets take exactly this many rounds, paired statistics included.
REHEARSAL_ROUNDS = 10


def set_key(case: Case) -> tuple:
    """What the cases of one set share: everything but backend and pass."""
    return (case.norm, case.shape.label, case.dtype, case.device, case.graphs, case.harness, case.mode, case.timing,
            case.threads, case.flush, case.keep_ahead)


def sets(cases) -> list[list[Case]]:
    """``cases`` by set, in the order they first appear."""
    out: dict[tuple, list[Case]] = {}
    for c in cases:
        out.setdefault(set_key(c), []).append(c)
    return list(out.values())


def paired_settings(settings: TimerSettings, rehearsal: bool = False) -> TimerSettings:
    """A set's timer settings: at least ``MIN_ROUNDS`` rounds and ``MIN_TIME`` of work; ``REHEARSAL_ROUNDS`` rounds in
    a rehearsal."""
    if rehearsal:
        return replace(settings, warmup=max(settings.warmup, 2), min_reps=REHEARSAL_ROUNDS,
                       max_reps=REHEARSAL_ROUNDS, min_time=0.0)
    return replace(settings, warmup=max(settings.warmup, 2), min_reps=max(settings.min_reps, MIN_ROUNDS),
                   max_reps=max(settings.max_reps, MAX_ROUNDS), min_time=max(settings.min_time, MIN_TIME),
                   max_time=max(settings.max_time, MAX_TIME))


def _share_inputs(preps: dict) -> None:
    """Give every backend copies of the first one's inputs (same values, dtype and device)."""
    first = next(iter(preps.values()))
    for p in list(preps.values())[1:]:
        p.inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in first.inputs]
        p.targets = p.inputs + p.params


#: The key of the same-size copy among a set's interleaved callables (no backend is named so).
COPY = "<same-size copy>"


def _copy_member(prep: Prepared, case: Case, pass_: str):
    """``(callable, source tensor)`` of the same-size copy that joins a set's interleaved rounds as one more member
    (docs/measurement.md, "Cache-resident cases"), or None where the pass moves no bytes or is not memory-bound."""
    from normbench.measure import bytes_model as bm
    from normbench.measure import reference
    from normbench.measure.planning import DTYPES

    model = prep.bytes_model()
    nbytes = bm.bytes_moved(model["formula"], pass_, model["params"])
    if not model["memory_bound"] or nbytes < 2:
        return None
    from normbench import device as seam

    src, dst = reference.copy_tensors(nbytes, DTYPES.get(case.dtype, torch.float32), seam.tensor_device(case.device))
    return (lambda: dst.copy_(src)), src


def _copy_reference(samples: list[float], src: torch.Tensor, case: Case) -> dict:
    """The set's same-size copy reference, as a record stores it, from its interleaved rounds."""
    from normbench.measure import reference

    clock = (f"CUDA events, L2 flushed ({case.flush}) before each call" if case.timing == "cold" else
             "CUDA events, no flush") if str(case.device).startswith("cuda") else \
        f"perf_counter, nothing flushed, {case.threads} threads"
    return reference.copy_reference(samples, reference.copy_bytes(src), src.dtype,
                                    f"one more member of the head-to-head set: timed in the same shuffled rounds "
                                    f"as the backends ({clock})")


def measure_set(cases: list[Case], ctx: Context, refused: list | None = None, seed: int = 0) -> list[dict]:
    """Measure a set (see the module docstring); returns its records, each with ``metrics.paired`` against the
    others of its pass. A backend that cannot run here is refused (``refused`` gets its cases and the reason) and
    the others still run."""
    from normbench.discovery import REGISTRY
    from normbench.measure import noise
    from normbench.measure.memory import saved_bytes
    from normbench.stats import paired_ratio

    refused = refused if refused is not None else []
    first = cases[0]
    assert all(set_key(c) == set_key(first) for c in cases), "measure_set needs cases of one set"
    spec = REGISTRY.get(first.norm)
    torch.set_num_threads(first.threads)
    by_backend: dict[str, list[Case]] = {}
    for c in cases:
        by_backend.setdefault(c.backend, []).append(c)
    preps: dict[str, Prepared] = {}
    for backend, bcases in by_backend.items():
        try:
            preps[backend] = Prepared(spec, backend, first.shape, first.dtype, first.device, mode=first.mode)
        except Unsupported as exc:
            refused.extend((c, str(exc)) for c in bcases)
    if not preps:
        return []
    _share_inputs(preps)
    errs = {b: p.errors() for b, p in preps.items()}  # also compiles and warms each backend
    need_saved = any(c.pass_ != "fwd" for c in cases)
    saved = {b: saved_bytes(p.forward, p.params) if need_saved else None for b, p in preps.items()}
    from normbench import device as seam

    settings = paired_settings(ctx.settings, rehearsal=seam.is_cuda(first.device) and seam.get().simulated)
    records: list[dict] = []
    passes = list(dict.fromkeys(c.pass_ for c in cases))
    for pass_ in passes:
        here = {b: next(c for c in bc if c.pass_ == pass_) for b, bc in by_backend.items()
                if b in preps and any(c.pass_ == pass_ for c in bc)}
        fns, pres = {}, {}
        for b, case in here.items():
            try:
                fns[b], pres[b] = preps[b].pass_fns(pass_)
            except Unsupported as exc:
                refused.append((case, str(exc)))
        if not fns:
            continue
        for b in fns:
            if preps[b].watch is not None:
                preps[b].watch.mark()
        found = {}
        if str(first.device).startswith("cuda"):  # one probe call each: does the timed call wait for the device?
            from normbench.measure import syncs

            found = {b: syncs.probe(fns[b], pres.get(b)) for b in fns}
        copy = _copy_member(preps[next(iter(fns))], first, pass_)
        if copy is not None:
            fns[COPY] = copy[0]
        order: list = []
        timed = interleaved_timing(fns, here[next(iter(fns))].settings(settings), pres, first.device, seed, order,
                                   slow_rounds=SLOW_ROUNDS, cold=first.timing == "cold")
        samples = timed.samples
        copy_ref = _copy_reference(samples.pop(COPY), copy[1], first) if copy is not None else None
        fns.pop(COPY, None)
        reports = {b: preps[b].watch.report() if preps[b].watch is not None else None for b in fns}
        load = noise.machine_load(noise.own_load(first.device, first.threads))
        built = {}
        for b in fns:
            host = timed.host_info(b)
            if host is not None:
                from normbench.measure.syncs import host_sync_reason

                host = {**host, "host_syncs": found.get(b, {}), "host_sync": host_sync_reason(found.get(b, {}))}
            try:
                built[b] = build_record(preps[b], here[b], ctx, samples[b], False, errs[b],
                                        peak_memory(preps[b], pass_), saved[b], load, reports[b], copy_ref=copy_ref,
                                        host=host)
            except FarAboveCeiling as exc:
                refused.append((here[b], str(exc)))
        for b, rec in built.items():
            rec["metrics"]["paired"] = [
                {"partner": other["id"], "partner_backend": ob,
                 **paired_ratio(samples[b], samples[ob]).to_dict()}
                for ob, other in built.items() if ob != b]
            rec["metrics"]["interleaved"] = {"rounds": len(samples[b]), "backends": sorted(built), "seed": seed,
                                             "order": "shuffled every round"}
        records += built.values()
    return records
