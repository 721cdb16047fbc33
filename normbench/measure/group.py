"""Measuring one group of cases and building their records.

Cases that share a module (everything but pass and timing: norm, backend, shape, dtype, device, mode) form a group:
:class:`Prepared` builds the module once, :func:`measure_group` checks it against float64 once (which also compiles
and warms it up), then times each pass and turns it into a record (:func:`build_record`). A :class:`Context` is what
every group of a sweep shares: the copy ceiling, the provenance, the timer settings.
"""

from __future__ import annotations

import mmap
import statistics
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from normbench.measure import baselines
from normbench.measure import bytes_model as bm
from normbench.measure.planning import DTYPES, Case, backends_for
from normbench.measure.shapes import Shape, input_shape
from normbench.measure.summary import summarize
from normbench.measure.timers import TimerSettings, cpu_time, cuda_timing
from normbench.records.schema import FAR_ABOVE_CEILING, above_reference, make_record


class Unsupported(Exception):
    """This case cannot run here (backend unavailable, layout not supported, ...); the message says why."""



# --- building one group ---------------------------------------------------------------------------------------------

def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    raise TypeError(f"a norm must return a tensor or a tuple of tensors, got {type(out).__name__}")


def _inputs_for(kind: str, dims: tuple[int, ...], dtype, device) -> list[torch.Tensor]:
    n = 2 if kind in ("residual", "attention") else 1
    return [torch.randn(dims, dtype=dtype, device=device).requires_grad_(True) for _ in range(n)]


def _num_groups(module: torch.nn.Module, c: int) -> int:
    inner = getattr(module, "inner", module)
    for attr in ("num_groups", "groups", "G"):
        g = getattr(inner, attr, None)
        if isinstance(g, int) and g > 0:
            return g
    return c  # none named (InstanceNorm, EvoNorm-B0's instance variance): one group per channel


class Prepared:
    """A built module, its inputs and output gradients for one group of cases."""

    def __init__(self, spec, backend: str, shape: Shape, dtype: str, device: str, seed: int = 0,
                 mode: str = "train"):
        self.spec, self.backend, self.shape, self.dtype_name, self.device = spec, backend, shape, dtype, device
        self.mode = mode
        from normbench import device as seam

        self.tdev = seam.tensor_device(device)  # where the tensors live (a rehearsal's "cuda": the CPU)
        self.dtype = DTYPES[dtype]
        if shape.layout not in spec.layouts:
            raise Unsupported(f"{spec.name} does not support the {shape.layout} layout")
        if backend in backends_for(spec) and backend not in spec.backends:
            reason = baselines.unavailable(backend, spec.name, shape.layout, device, dtype)
        elif backend in spec.backends:
            reason = spec.backend_unavailable(backend)
        else:
            raise Unsupported(f"{spec.name} has no backend {backend!r}")
        if reason:
            raise Unsupported(f"backend {backend} unavailable: {reason}")
        self.dims = input_shape(shape, spec.kind)
        c = self.dims[-1] if shape.layout == "tokens" else self.dims[1]
        self.num_features = c
        torch.manual_seed(seed)
        if backend == "compile":
            # A fresh Dynamo cache per group: a sweep's widths and dtypes must not share one recompile limit.
            from normbench.kernels.compile_watch import fresh_compile_state

            fresh_compile_state()
        self.baseline = None
        if backend in spec.backends:
            module = spec.create(c, layout=shape.layout, backend=backend)
        else:
            module = baselines.build(backend, spec.name, spec.create(c, layout=shape.layout))
            self.baseline = baselines.get(backend, spec.name)
        self.module = module.to(device=self.tdev, dtype=self.dtype).train(mode == "train")
        self.inputs = _inputs_for(spec.kind, self.dims, self.dtype, self.tdev)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.targets = self.inputs + self.params
        self.state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        self._gouts: list[torch.Tensor] | None = None

    # the callables a pass is made of
    def forward(self) -> list[torch.Tensor]:
        return _tensors(self.module(*self.inputs))

    def _grad_pairs(self, outs):
        if self._gouts is None:
            g = torch.Generator(device=self.tdev).manual_seed(1)
            self._gouts = [torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=g) for o in outs]
        pairs = [(o, g) for o, g in zip(outs, self._gouts) if o.requires_grad]
        if not pairs:
            raise Unsupported("no output of this norm requires grad, so it has no backward pass")
        return [o for o, _ in pairs], [g for _, g in pairs]

    def backward(self, outs) -> tuple:
        o, g = self._grad_pairs(outs)
        return torch.autograd.grad(o, self.targets, g, allow_unused=True)

    @property
    def watch(self):
        """The compile backend's :class:`~normbench.kernels.compile_watch.CompileWatch`, else ``None``."""
        return getattr(self.module, "watch", None) if self.backend == "compile" else None

    def retained_backward(self) -> Callable[[], object]:
        """A backward over one forward's graph, kept alive (``retain_graph``) so it can be called repeatedly.

        For harnesses that cannot run untimed code before every repetition (ASV's timer). The core itself never
        retains a graph: it rebuilds it untimed before each repetition (see :meth:`pass_fns`). A compiled
        backward whose saved buffers AOTAutograd donated refuses ``retain_graph``; :func:`prepare_retained`
        turns donation off before the module is first compiled, so this path is safe on CUDA too.
        """
        o, g = self._grad_pairs(self.forward())
        return lambda: torch.autograd.grad(o, self.targets, g, retain_graph=True, allow_unused=True)

    def pass_fns(self, pass_: str) -> tuple[Callable[[], object], Callable[[], object] | None]:
        """(timed callable, untimed callable run before each repetition or ``None``)."""
        if self.baseline is not None and self.baseline.forward_only and pass_ != "fwd":
            raise Unsupported(f"{self.backend}'s {self.spec.name} is forward-only (no autograd)")
        if self.baseline is not None and self.baseline.inplace_inputs:
            # The kernel overwrites its inputs: restore them untimed before each call, so every repetition
            # normalises the same data.
            originals = [x.detach().clone() for x in self.inputs]

            def restore():
                with torch.no_grad():
                    for x, o in zip(self.inputs, originals, strict=True):
                        x.copy_(o)

            return self.forward, restore
        if pass_ == "fwd":
            return self.forward, None
        if pass_ == "fwd+bwd":
            return (lambda: self.backward(self.forward())), None
        holder = {}

        def pre():
            holder["outs"] = None
            holder["outs"] = self.forward()

        return (lambda: self.backward(holder["outs"])), pre

    # derived quantities
    def bytes_model(self) -> dict:
        spec = self.spec
        formula = bm.formula_for(spec.family, spec.kind, spec.name)
        n = self.inputs[0].numel()
        k = len(self.inputs)
        c = self.num_features
        if formula == "groupwise":
            stat_rows = self.dims[0] * _num_groups(self.module, c)
        elif formula == "channelwise":
            stat_rows = c
        elif formula in ("rowwise", "residual_rowwise"):
            stat_rows = (k if formula == "rowwise" else 1) * (n // c)
        else:
            stat_rows = 0
        param_bytes = sum(p.numel() * p.element_size() for p in self.module.parameters())
        running = sum(b.numel() for b in self.module.buffers() if b.is_floating_point())
        extra = {}
        if self.mode == "eval" and spec.running_state:
            extra["eval_mode"] = 1
            if formula == "channelwise":
                stat_rows = 0  # eval normalises with the running statistics: no batch statistics to save
        return bm.make_model(formula, n_elements=n, inputs=k, elem_bytes=self.inputs[0].element_size(),
                             param_bytes=param_bytes, stat_rows=stat_rows,
                             stats_per_row=bm.stats_per_row(formula, spec.name), running_values=running, **extra)

    def flops(self, pass_: str) -> int | None:
        """Multiply-adds x2 of the Linear/Conv2d a weight-kind norm wraps (its real cost); ``None`` otherwise."""
        if self.spec.kind != "weight":
            return None
        n = self.inputs[0].numel()
        per_out = self.num_features * (9 if self.shape.layout == "images" else 1)
        fwd = 2 * n * per_out
        return {"fwd": fwd, "bwd": 2 * fwd, "fwd+bwd": 3 * fwd}[pass_]

    def errors(self) -> dict:
        """Error of y, dx and dw against the eager module in float64 (see ``normbench.measure.error``)."""
        from normbench.measure.error import compare

        spec = self.spec
        ref = spec.create(self.num_features, layout=self.shape.layout)
        ref.load_state_dict(self.state)
        ref = ref.to(device=self.tdev, dtype=torch.float64).train(self.mode == "train")
        xs = [x.detach().to(torch.float64).requires_grad_(True) for x in self.inputs]
        ref_params = [p for p in ref.parameters() if p.requires_grad]
        ref_outs = _tensors(ref(*xs))
        if self.baseline is not None and self.baseline.inplace_inputs:
            # The kernel writes into its inputs: give it copies, so the inputs stay what the reference saw.
            saved = self.inputs
            self.inputs = [x.detach().clone() for x in saved]
            try:
                outs = self.forward()
            finally:
                self.inputs = saved
            return {"y": compare(outs, ref_outs), "dx": None, "dw": None}
        outs = self.forward()
        err = {"y": compare(outs, ref_outs), "dx": None, "dw": None}
        try:
            o, g = self._grad_pairs(outs)
        except Unsupported:
            return err
        # The tested backward gets its own copy of the upstream gradient: an in-place backward (Liger's default)
        # would otherwise overwrite the one the float64 reference is about to use.
        grads = torch.autograd.grad(o, self.targets, [t.clone() for t in g], allow_unused=True)
        pairs = [(a, b) for a, b in zip(ref_outs, outs) if b.requires_grad]
        ref_grads = torch.autograd.grad([a for a, _ in pairs], xs + ref_params,
                                        [gg.to(torch.float64) for gg in g], allow_unused=True)
        k = len(self.inputs)
        err["dx"] = compare(grads[:k], ref_grads[:k])
        if len(self.params) == len(ref_params):
            err["dw"] = compare(grads[k:], ref_grads[k:])
        return err


# --- measuring ------------------------------------------------------------------------------------------------------

@dataclass
class Context:
    """What a sweep shares: the ceiling, provenance, timer settings."""

    ceiling_gbps: float
    ceiling_method: str
    provenance: dict
    settings: TimerSettings = field(default_factory=TimerSettings)
    datasheet_peak_gbps: float | None = None
    impl_hashes: dict = field(default_factory=dict)
    #: Relative IQR of the repeated ceiling measurements (see ``normbench.measure.noise``); None if not measured.
    ceiling_spread: float | None = None
    #: Names this run: same-size copy references are shared within it (``normbench.measure.reference``).
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: ``time.monotonic()`` when the ceiling was measured (``refresh_context`` measures it again when old).
    ceiling_at: float = field(default_factory=time.monotonic)
    #: The highest ceiling measured in this run so far (None: only ``ceiling_gbps``): a later measurement far below
    #: it means the memory system is shared now (``noise.CEILING_DROP_LIMIT``).
    ceiling_best_gbps: float | None = None


def make_context(device: str, settings: TimerSettings | None = None, command=None) -> Context:
    from normbench.measure import ceiling
    from normbench.records.provenance import provenance

    prov = provenance(command=command, device=device)
    ceil = ceiling.measure(device)
    return Context(ceil.gbps, ceil.method, prov, settings or TimerSettings(),
                   ceiling.datasheet_peak_gbps(prov["hardware"].get("gpu")), ceiling_spread=ceil.spread,
                   ceiling_at=time.monotonic() - ceil.age_s())


def refresh_context(ctx: Context, device: str, every_s: float | None = None, now=time.monotonic) -> Context:
    """``ctx`` with the ceiling measured again when the last measurement is more than ``every_s`` seconds old
    (default ``ceiling.RECHECK_S``), else ``ctx`` itself. Everything else is kept (provenance, run id, hashes), so a
    long sweep's records are judged by a ceiling measured shortly before them (``normbench.measure.ceiling``)."""
    from normbench.measure import ceiling

    every_s = ceiling.RECHECK_S if every_s is None else every_s
    if now() - ctx.ceiling_at <= every_s:
        return ctx
    ceil = ceiling.measure(device, fresh=True)
    best = max(ceil.gbps, ctx.ceiling_best_gbps or ctx.ceiling_gbps)
    return replace(ctx, ceiling_gbps=ceil.gbps, ceiling_method=ceil.method, ceiling_spread=ceil.spread,
                   ceiling_at=now() - ceil.age_s(), ceiling_best_gbps=best)


def time_pass(prep: Prepared, case: Case, settings: TimerSettings,
              faults: list | None = None) -> tuple[list[float], bool, dict | None]:
    """(seconds per repetition, whether a CUDA graph was used, on a GPU the host's time per call and the keep-ahead
    check: ``timers.CudaTiming.host_info``); on a CPU ``faults`` receives each repetition's minor page faults (see
    ``timers.cpu_time``)."""
    fn, pre = prep.pass_fns(case.pass_)
    settings = case.settings(settings)
    if case.device.startswith("cuda"):
        from normbench.measure import syncs

        found = syncs.probe(fn, pre)  # one call under a dispatch mode: does the timed call wait for the device?
        t = cuda_timing(fn, settings, case.device, cold=case.timing == "cold", pre=pre,
                        graphs=case.graphs and case.pass_ != "bwd")
        return t.samples, t.used_graph, {**t.host_info(), "host_syncs": found,
                                         "host_sync": syncs.host_sync_reason(found)}
    return cpu_time(fn, settings, pre, faults), False, None


def peak_memory(prep: Prepared, pass_: str) -> int | None:
    from normbench.measure.memory import peak_above

    fn, pre = prep.pass_fns(pass_)
    if pre is not None:
        pre()
    return peak_above(fn, prep.device)


#: Bytes per (base) page: a minor fault maps one.
PAGE_BYTES = mmap.PAGESIZE


class FarAboveCeiling(Exception):
    """A measured bandwidth so far above the ceiling that it can only be a broken measurement."""


class MislabelledTiming(ValueError):
    """A record whose ``config.timing`` would say something other than what the timer did (a hot timing as cold)."""


def check_timing_label(case: Case, host: dict | None) -> None:
    """Refuse to record ``case`` when its planned timing is not what was measured: ``cold`` needs the timer's report
    (``host``) of an L2 flush before every timed call, and a flushed timing is not ``hot``."""
    flushed = (host or {}).get("l2_flush")
    if case.timing == "cold" and not flushed:
        raise MislabelledTiming(f"{case.describe()}: planned cold (L2 flushed before each call) but the timer flushed "
                                "nothing: a hot timing is never recorded as cold")
    if case.timing == "cold" and flushed != case.flush:
        raise MislabelledTiming(f"{case.describe()}: planned the {case.flush!r} flush, the timer ran {flushed!r}")
    if case.timing != "cold" and flushed:
        raise MislabelledTiming(f"{case.describe()}: planned {case.timing} but the timer flushed L2 ({flushed})")


def nonfinite_parts(err: dict) -> list[str]:
    """The parts (y, dx, dw) of an error report whose tested values were NaN or infinite."""
    return [part for part, stats in (err or {}).items() if isinstance(stats, dict) and stats.get("nonfinite")]


def cache_metrics(case: Case, nbytes: int, memory_bound: bool, ctx: Context,
                  copy_ref: dict | None = None) -> dict:
    """The same-size copy reference (timed now unless ``copy_ref`` is given) and the cache residency of a case moving
    ``nbytes``, as record metrics (see ``normbench.measure.reference``)."""
    from normbench.measure import reference

    if copy_ref is None and memory_bound and nbytes > 0:
        copy_ref = reference.same_size_copy(ctx.run_id, nbytes, case.dtype, case, ctx.settings)
    caches = reference.cache_sizes(case.device)
    return {
        "copy_same_size_gbps": copy_ref["gbps"] if copy_ref else None,
        "copy_same_size": {k: v for k, v in copy_ref.items() if k != "gbps"} if copy_ref else None,
        "working_set_bytes": nbytes,
        "cache_bytes": caches,
        "cache_resident": reference.residency(nbytes, caches, device=case.device, timing=case.timing,
                                              pass_=case.pass_, threads=case.threads),
    }


def build_record(prep: Prepared, case: Case, ctx: Context, samples: list[float], used_graph: bool,
                 err: dict, peak: int | None, saved: int | None, load: dict | None = None,
                 compile_report=None, faults: list[int] | None = None, copy_ref: dict | None = None,
                 host: dict | None = None) -> dict:
    """The record of one timed case. Flags (schema v2): ``suspect`` above the copy ceiling, ``non_finite`` when the
    output or a gradient this pass computes is NaN/inf (the record is then invalid: kept, shown failed, never
    ranked), ``noisy`` when the machine was busy or the repetitions spread (``normbench.measure.noise``; GPU records
    by their own limit), ``host_bound`` when a GPU timing could not keep the GPU ahead of the host (``host``:
    ``timers.CudaTiming.host_info``, whose ``host_s`` and ``keep_ahead`` the metrics keep), ``fell_back`` when
    torch.compile did not stay compiled.

    Beside the DRAM ceiling's percentage: the run's same-size copy reference (``copy_ref``, else timed here in the
    case's timing mode, shared per size, dtype and mode) with ``pct_of_same_size_copy``, and ``cache_resident``."""
    from normbench.measure import noise

    check_timing_label(case, host)
    spec = prep.spec
    model = prep.bytes_model()
    config = case.config(spec)
    config["bytes_model"] = model
    st = summarize(samples)
    nbytes = bm.bytes_moved(model["formula"], case.pass_, model["params"])
    gbps = nbytes / st["median"] / 1e9
    pct = 100.0 * gbps / ctx.ceiling_gbps if model["memory_bound"] else None
    flags: dict[str, str] = {}
    if pct is not None and gbps > FAR_ABOVE_CEILING * ctx.ceiling_gbps:
        raise FarAboveCeiling(f"{gbps:.3g} GB/s is more than {FAR_ABOVE_CEILING:g}x the measured ceiling "
                              f"{ctx.ceiling_gbps:.3g} GB/s: a broken timing, not recorded")
    cache = cache_metrics(case, nbytes, model["memory_bound"], ctx, copy_ref)
    above = above_reference(gbps, ctx.ceiling_gbps, cache["copy_same_size_gbps"], cache["cache_resident"]) \
        if pct is not None else None
    if above and above[0] == "copy ceiling":
        flags["suspect"] = (f"{gbps:.3g} GB/s is above the measured copy ceiling {ctx.ceiling_gbps:.3g} GB/s: the "
                            "data was likely cache-resident" + (" (hot timing)" if case.timing == "hot" else ""))
    elif above:
        flags["suspect"] = (f"{gbps:.3g} GB/s is above a copy of the same bytes timed in the same place "
                            f"({above[1]:.3g} GB/s, {cache['cache_resident']}-resident): more than a copy's speed "
                            "means a broken timing or skipped work")
    rec_err = {"y": err.get("y"), "dx": err.get("dx") if case.pass_ != "fwd" else None,
               "dw": err.get("dw") if case.pass_ != "fwd" else None}
    bad = nonfinite_parts(rec_err)
    if bad:
        names = {"y": "the output", "dx": "the input gradient", "dw": "the parameter gradient"}
        flags["non_finite"] = (" and ".join(names.get(p, p) for p in bad) + " contain NaN or inf: the timing is of "
                               "a broken computation, not a result")
    if load is None:
        load = noise.machine_load(noise.own_load(case.device, case.threads))
    best = ctx.ceiling_best_gbps
    noise_info = {**load, "ceiling_spread": ctx.ceiling_spread,
                  "ceiling_drop": (1.0 - ctx.ceiling_gbps / best) if best and best > 0 else None,
                  "rel_iqr": st["iqr"] / st["median"] if st["median"] > 0 else None}
    why = noise.reasons(noise_info, case.device, st["iqr"])
    if why:
        flags["noisy"] = "; ".join(why)
    if host and host.get("host_bound"):
        flags["host_bound"] = host["host_bound"]
    if host and host.get("low_clock"):
        flags["low_clock"] = host["low_clock"]
    if host and host.get("host_sync"):
        flags["host_sync"] = host["host_sync"]
    from normbench import device as seam

    rehearsal = seam.rehearsal_reason() if seam.is_cuda(case.device) else None
    if rehearsal:
        flags["rehearsal"] = rehearsal
    metrics = {
        "time_median_s": st["median"],
        "time_iqr_s": st["iqr"],
        "time_q25_s": st["q25"],
        "time_q75_s": st["q75"],
        "time_min_s": st["min"],
        "reps": st["reps"],
        "bytes_moved": nbytes,
        "gbps": gbps,
        "ceiling_gbps": ctx.ceiling_gbps,
        "ceiling_method": ctx.ceiling_method,
        "pct_of_ceiling": pct,
        "datasheet_peak_gbps": ctx.datasheet_peak_gbps,
        "pct_of_datasheet": (100.0 * gbps / ctx.datasheet_peak_gbps
                             if ctx.datasheet_peak_gbps and model["memory_bound"] else None),
        **cache,
        "pct_of_same_size_copy": (100.0 * gbps / cache["copy_same_size_gbps"]
                                  if cache["copy_same_size_gbps"] and model["memory_bound"] else None),
        "peak_mem_bytes": peak,
        "saved_bytes": saved,
        "err": rec_err,
        "err_reference": "eager module in float64 on the same inputs",
        "graph_used": used_graph,
        "noise": noise_info,
    }
    if host is not None:  # GPU timings: the host's time in one call beside the GPU's, and the keep-ahead check
        metrics["host_s"] = host.get("host_s")
        metrics["keep_ahead"] = host.get("keep_ahead")
        if host.get("clock") is not None:
            metrics["clock"] = host["clock"]
        if host.get("host_syncs") is not None:  # the probe's synchronising operators ({}: none)
            metrics["host_syncs"] = host["host_syncs"]
    if spec.kind == "softmax":  # reads of each row beside the GB/s (None: an implementation normbench does not own)
        from normbench.softmax import row_passes

        metrics["row_passes"] = row_passes(prep.module, case.pass_)
    if faults:
        # CPU: minor page faults per timed repetition (median): fresh pages of outputs allocated by the call
        # (glibc maps blocks above 32 MiB anew each time). The copy ceiling writes to a preallocated buffer, so a
        # kernel paying them reads lower against it; see docs/measurement.md, "CPU: page faults".
        per_rep = int(statistics.median(faults))
        metrics["page_faults_per_rep"] = per_rep
        metrics["page_fault_bytes_per_rep"] = per_rep * PAGE_BYTES
    flops = prep.flops(case.pass_)
    if flops is not None:
        metrics["flops"] = flops
        metrics["tflops"] = flops / st["median"] / 1e12
    prov = dict(ctx.provenance)
    from normbench.records.provenance import utc_now

    prov["timestamp"] = utc_now()
    if prep.baseline is not None:
        prov["baseline"] = prep.baseline.provenance()
    if compile_report is not None:
        metrics["compile"] = compile_report.to_dict()
        if not compile_report.stayed_compiled:
            flags["fell_back"] = compile_report.reason()
    return make_record("kernel", spec.to_dict(), config, metrics, prov,
                       impl_hash=baselines.impl_hash(spec, case.backend, ctx.impl_hashes), flags=flags,
                       flag_reasons=flags)


def measure_group(cases: list[Case], ctx: Context, refused: list | None = None) -> list[dict]:
    """Measure cases that share norm, backend, shape, dtype and device; returns their records.

    Raises :class:`Unsupported` when the group cannot run here. A case whose bandwidth comes out far above
    the ceiling is left out; ``refused`` (if given) collects ``(case, reason)`` for it.
    """
    from normbench.discovery import REGISTRY
    from normbench.measure.memory import saved_bytes

    first = cases[0]
    assert all(c.group == first.group for c in cases), "measure_group needs cases of one group"
    spec = REGISTRY.get(first.norm)
    torch.set_num_threads(first.threads)
    prep = Prepared(spec, first.backend, first.shape, first.dtype, first.device, mode=first.mode)
    err = prep.errors()  # also compiles (torch.compile) and warms up the module
    saved = saved_bytes(prep.forward, prep.params) if any(c.pass_ != "fwd" for c in cases) else None
    records = []
    from normbench.measure import noise

    for case in cases:
        watch = prep.watch
        if watch is not None:
            watch.mark()  # the report covers exactly the timed repetitions (and their warm-up)
        try:
            faults: list[int] = []
            samples, used_graph, host = time_pass(prep, case, ctx.settings, faults)
        except Unsupported as exc:  # e.g. bwd of a forward-only baseline; the group's other passes still run
            if refused is None:
                raise
            refused.append((case, str(exc)))
            continue
        report = watch.report() if watch is not None else None
        # the load average right after timing: it covers the minute the samples were taken in
        load = noise.machine_load(noise.own_load(case.device, case.threads))
        peak = peak_memory(prep, case.pass_)
        try:
            records.append(build_record(prep, case, ctx, samples, used_graph, err, peak, saved, load, report,
                                        faults=faults, host=host))
        except FarAboveCeiling as exc:
            if refused is None:
                raise
            refused.append((case, str(exc)))
    return records

