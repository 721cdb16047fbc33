"""The measurement core shared by ``normbench bench``, the ASV suite and the pytest-benchmark suite.

A :class:`Case` is one measurement (norm, backend, shape, dtype, pass, device, timing). Cases that share a module
(everything but pass and timing) form a group: the module is built, compiled and checked against float64 once, then
each pass is timed. :func:`measure_group` returns result records; :func:`run_sweep` writes them as it goes.
"""

from __future__ import annotations

import mmap
import statistics
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from normbench.measure import baselines
from normbench.measure import bytes_model as bm
from normbench.measure.shapes import Shape, input_shape, shapes_for
from normbench.measure.stats import summarize
from normbench.measure.timers import FLUSHES, TimerSettings, cpu_time, cuda_time
from normbench.records.schema import FAR_ABOVE_CEILING, make_record

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PASSES = ("fwd", "bwd", "fwd+bwd")
QUICK_DTYPES = ("float32", "bfloat16")
QUICK_PASSES = ("fwd", "fwd+bwd")
#: train: batch statistics, running state updated; eval: running statistics (a different, cheaper kernel).
MODES = ("train", "eval")


class Unsupported(Exception):
    """This case cannot run here (backend unavailable, layout not supported, ...); the message says why."""


@dataclass(frozen=True)
class Case:
    """One measurement."""

    norm: str
    backend: str
    shape: Shape
    dtype: str
    pass_: str
    device: str = "cpu"
    timing: str = "hot"
    threads: int = 1
    graphs: bool = False
    harness: str = "cli"
    mode: str = "train"
    flush: str = "zero"
    keep_ahead: bool = False

    @property
    def group(self) -> tuple:
        return (self.norm, self.backend, self.shape.label, self.dtype, self.device, self.graphs, self.harness,
                self.mode)

    def describe(self) -> str:
        mode = "" if self.mode == "train" else f"/{self.mode}"
        return f"{self.norm}/{self.backend}/{self.shape.label}/{self.dtype}/{self.pass_}/{self.timing}{mode}"

    def settings(self, base: TimerSettings) -> TimerSettings:
        """``base`` with this case's flush kind and keep-ahead choice."""
        from dataclasses import replace

        return replace(base, flush=self.flush, keep_ahead=self.keep_ahead)

    def config(self, spec) -> dict:
        """The record config (without ``bytes_model``, which needs the built module)."""
        dims = list(input_shape(self.shape, spec.kind))
        cfg = {
            "backend": self.backend,
            "layout": self.shape.layout,
            "shape": dims,
            "num_features": dims[-1] if self.shape.layout == "tokens" else dims[1],
            "dtype": self.dtype,
            "pass": self.pass_,
            "device": self.device,
            "timing": self.timing,
            "threads": self.threads,
            "shape_class": self.shape.shape_class,
            "shape_label": self.shape.label,
            "graphs": self.graphs,
            "harness": self.harness,
            "kwargs": {k: v for k, v in dict(spec.default_kwargs).items()},
        }
        # Keys that only some records have are added only there, so other records keep their ids.
        if self.backend not in spec.backends and (self.backend, spec.name) in baselines.REGISTRY:
            b = baselines.get(self.backend, spec.name)
            cfg["baseline_version"] = f"{b.dist} {b.version() or 'not installed'}"  # a new release is re-measured
        if spec.running_state:
            cfg["mode"] = self.mode          # train and eval run different kernels
        if self.timing == "cold":
            cfg["l2_flush"] = self.flush     # how L2 was flushed between repetitions
        if self.device.startswith("cuda") and self.keep_ahead:
            cfg["keep_ahead"] = True         # a spin kernel kept the GPU ahead of the host
        return cfg


def impl_hash(spec, backend: str, cache: dict | None = None, libraries: dict | None = None) -> str:
    """The implementation hash of ``spec`` run by ``backend`` (``NormSpec.impl_hash``); for an external baseline
    (Liger, quack, TE, FlashInfer, Apex, native) the eager norm's hash (its sources, torch and Triton versions)
    combined with the baseline's adapter sources (the adapters' shared base and its library's adapter module), what
    its registry entry tells the core, and the library's version.

    ``libraries`` (``{"torch": ..., "triton": ..., "baseline": ...}``, from a record) replaces this process's
    versions: the hash today's code would have had where the record was made (``results.prune.stale_reason``)."""
    key = (spec.name, spec.package, spec.package_version, backend, repr(sorted((libraries or {}).items())))
    if cache is not None and key in cache:
        return cache[key]
    if backend in spec.backends:
        h = spec.impl_hash(backend, libraries)
    else:
        import hashlib
        from importlib import metadata

        from normbench.registry import source_lines

        b = baselines.REGISTRY.get((backend, spec.name))
        lines = [f"eager {spec.impl_hash('eager', libraries)}", f"baseline {backend}"]
        if b is not None:
            lines += [b.declared(), *source_lines(b.sources())]
            pkg, version = b.dist, (libraries["baseline"] if libraries and "baseline" in libraries else b.version())
        else:
            try:
                pkg, version = backend, metadata.version(backend)
            except metadata.PackageNotFoundError:
                pkg, version = backend, None
        lines.append(f"{pkg}={version}")
        h = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    if cache is not None:
        cache[key] = h
    return h


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def backends_for(spec) -> tuple[str, ...]:
    """The spec's backends plus the external baselines (native, liger, quack, te, flashinfer, apex) for this norm."""
    return tuple(spec.backends) + baselines.backends_for(spec.name)


def device_dtypes(device: str) -> tuple[str, ...]:
    if device.startswith("cuda"):
        out = ["float32"]
        if torch.cuda.is_bf16_supported():
            out.append("bfloat16")
        return tuple(out + ["float16"])
    return ("float32", "bfloat16")


def plan(norms: Iterable[str] | None = None, backends: Iterable[str] | None = None,
         dtypes: Iterable[str] | None = None, passes: Iterable[str] | None = None,
         layouts: Iterable[str] | None = None, shapes: Iterable[Shape] | None = None, quick: bool = False,
         shape_class: str | None = None, device: str | None = None, timings: Iterable[str] | None = None,
         threads: int | None = None, graphs: bool = False, harness: str = "cli",
         modes: Iterable[str] | None = None, flush: str = "zero", keep_ahead: bool = False,
         here: bool = True) -> list[Case]:
    """Every case of a sweep, grouped by norm; availability is checked when a case runs, not here.

    ``here=False``: the cases run on other machines (a Ray cluster), so this one need not have the device; the
    CUDA dtypes are then float32, bfloat16 and float16 without asking this machine's GPU.

    ``quick`` (the defaults below when an argument is ``None``): the quick shapes, float32 and bfloat16,
    fwd and fwd+bwd, every backend, except that ``compile`` runs float32 on one layout per norm (tokens
    when the norm has it). Otherwise the llm and vision shape classes, every dtype the device supports and
    all three passes. Norms with running statistics are timed in both ``modes`` (train and eval) unless
    ``modes`` is given; other norms in train mode only. Unknown names raise ``ValueError``/``KeyError`` naming what
    exists.
    """
    from normbench.discovery import REGISTRY

    device = device or default_device()
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if device.startswith("cuda") and here and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA device here; use --device cpu")
    names = list(norms) if norms else REGISTRY.names()
    specs = [REGISTRY.get(n) for n in names]
    dtypes_given = bool(dtypes)
    if not dtypes and not quick and not here and device.startswith("cuda"):
        dtypes = ("float32", "bfloat16", "float16")
    dtypes = tuple(dtypes) if dtypes else (QUICK_DTYPES if quick else device_dtypes(device))
    for d in dtypes:
        if d not in DTYPES:
            raise ValueError(f"unknown dtype {d!r}; use {', '.join(DTYPES)}")
    passes = tuple(passes) if passes else (QUICK_PASSES if quick else PASSES)
    for p in passes:
        if p not in PASSES:
            raise ValueError(f"unknown pass {p!r}; use {', '.join(PASSES)}")
    is_cuda = device.startswith("cuda")
    timings = tuple(timings) if timings else (("cold",) if is_cuda else ("hot",))
    for t in timings:
        if t not in ("cold", "hot"):
            raise ValueError(f"unknown timing {t!r}; use cold or hot")
        if t == "cold" and not is_cuda:
            raise ValueError("cold timing (L2 flushed between repetitions) needs CUDA; CPU timing is hot")
    modes = tuple(modes) if modes else None
    for m in modes or ():
        if m not in MODES:
            raise ValueError(f"unknown mode {m!r}; use {', '.join(MODES)}")
    if flush not in FLUSHES:
        raise ValueError(f"unknown L2 flush {flush!r}; use {', '.join(FLUSHES)}")
    default_shapes = shapes is None and shape_class is None and not quick
    shapes = list(shapes) if shapes is not None else shapes_for(shape_class, quick)
    if layouts:
        layouts = tuple(layouts)
        shapes = [s for s in shapes if s.layout in layouts]
    if not norms:  # softmax norms have their own shape set and stay out of the other sweeps (docs/softmax.md)
        want_softmax = any(s.shape_class == "softmax" for s in shapes)
        specs = [s for s in specs if (s.kind == "softmax") == want_softmax]
    threads = threads or torch.get_num_threads()
    # torch.compile costs seconds of compilation per (norm, layout, dtype) on a CPU; the quick sweep therefore
    # compiles float32 on one layout per norm (tokens when it has it) unless dtypes or layouts were chosen.
    trim_compile = quick and not dtypes_given and not layouts
    known_backends = set()
    cases = []
    for spec in specs:
        spec_backends = backends_for(spec)
        known_backends.update(spec_backends)
        wanted = [b for b in (backends or spec_backends) if b in spec_backends]
        first_layout = "tokens" if "tokens" in spec.layouts else spec.layouts[0]
        spec_modes = (modes or MODES) if spec.running_state else ("train",)
        spec_shapes = shapes
        if spec.kind == "softmax" and default_shapes:
            spec_shapes = [s for s in shapes_for("softmax") if not layouts or s.layout in layouts]
        for shape in spec_shapes:
            if shape.layout not in spec.layouts or (shape.shape_class == "softmax") != (spec.kind == "softmax"):
                continue
            for backend in wanted:
                if trim_compile and backend == "compile" and shape.layout != first_layout:
                    continue
                if (backend in baselines.backends_for(spec.name)
                        and shape.layout not in baselines.layouts(backend, spec.name)):
                    continue  # e.g. Liger's RMSNorm normalises the last dimension only
                for dtype in dtypes:
                    if trim_compile and backend == "compile" and dtype != "float32":
                        continue
                    for mode in spec_modes:
                        for timing in timings:
                            for p in passes:
                                cases.append(Case(spec.name, backend, shape, dtype, p, device, timing, threads,
                                                  graphs and is_cuda, harness, mode, flush,
                                                  keep_ahead and is_cuda))
    if backends:
        unknown = [b for b in backends if b not in known_backends]
        if unknown:
            raise ValueError(f"unknown backend(s) {', '.join(unknown)} for the selected norms; "
                             f"they have {', '.join(sorted(known_backends))}")
    return cases


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
    return min(32, c)


class Prepared:
    """A built module, its inputs and output gradients for one group of cases."""

    def __init__(self, spec, backend: str, shape: Shape, dtype: str, device: str, seed: int = 0,
                 mode: str = "train"):
        self.spec, self.backend, self.shape, self.dtype_name, self.device = spec, backend, shape, dtype, device
        self.mode = mode
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
        self.module = module.to(device=device, dtype=self.dtype).train(mode == "train")
        self.inputs = _inputs_for(spec.kind, self.dims, self.dtype, device)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.targets = self.inputs + self.params
        self.state = {k: v.detach().clone() for k, v in self.module.state_dict().items()}
        self._gouts: list[torch.Tensor] | None = None

    # the callables a pass is made of
    def forward(self) -> list[torch.Tensor]:
        return _tensors(self.module(*self.inputs))

    def _grad_pairs(self, outs):
        if self._gouts is None:
            g = torch.Generator(device=self.device).manual_seed(1)
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
        ref = ref.to(device=self.device, dtype=torch.float64).train(self.mode == "train")
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


def make_context(device: str, settings: TimerSettings | None = None, command=None) -> Context:
    from normbench.measure import ceiling
    from normbench.records.provenance import provenance

    prov = provenance(command=command, device=device)
    ceil = ceiling.measure(device)
    return Context(ceil.gbps, ceil.method, prov, settings or TimerSettings(),
                   ceiling.datasheet_peak_gbps(prov["hardware"].get("gpu")), ceiling_spread=ceil.spread)


def time_pass(prep: Prepared, case: Case, settings: TimerSettings,
              faults: list | None = None) -> tuple[list[float], bool]:
    """(seconds per repetition, whether a CUDA graph was used); on a CPU ``faults`` receives each repetition's
    minor page faults (see ``timers.cpu_time``)."""
    fn, pre = prep.pass_fns(case.pass_)
    settings = case.settings(settings)
    if case.device.startswith("cuda"):
        return cuda_time(fn, settings, case.device, cold=case.timing == "cold", pre=pre,
                         graphs=case.graphs and case.pass_ != "bwd")
    return cpu_time(fn, settings, pre, faults), False


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


def nonfinite_parts(err: dict) -> list[str]:
    """The parts (y, dx, dw) of an error report whose tested values were NaN or infinite."""
    return [part for part, stats in (err or {}).items() if isinstance(stats, dict) and stats.get("nonfinite")]


def build_record(prep: Prepared, case: Case, ctx: Context, samples: list[float], used_graph: bool,
                 err: dict, peak: int | None, saved: int | None, load: dict | None = None,
                 compile_report=None, faults: list[int] | None = None) -> dict:
    """The record of one timed case. Flags (schema v2): ``suspect`` above the copy ceiling, ``non_finite`` when the
    output or a gradient this pass computes is NaN/inf (the record is then invalid: kept, shown failed, never
    ranked), ``noisy`` when the machine was busy (``normbench.measure.noise``), ``fell_back`` when torch.compile
    did not stay compiled."""
    from normbench.measure import noise

    spec = prep.spec
    model = prep.bytes_model()
    config = case.config(spec)
    config["bytes_model"] = model
    st = summarize(samples)
    nbytes = bm.bytes_moved(model["formula"], case.pass_, model["params"])
    gbps = nbytes / st["median"] / 1e9
    pct = 100.0 * gbps / ctx.ceiling_gbps if model["memory_bound"] else None
    flags: dict[str, str] = {}
    if pct is not None and gbps > ctx.ceiling_gbps:
        if gbps > FAR_ABOVE_CEILING * ctx.ceiling_gbps:
            raise FarAboveCeiling(f"{gbps:.3g} GB/s is more than {FAR_ABOVE_CEILING:g}x the measured ceiling "
                                  f"{ctx.ceiling_gbps:.3g} GB/s: a broken timing, not recorded")
        flags["suspect"] = (f"{gbps:.3g} GB/s is above the measured copy ceiling {ctx.ceiling_gbps:.3g} GB/s: the "
                            "data was likely cache-resident" + (" (hot timing)" if case.timing == "hot" else ""))
    rec_err = {"y": err.get("y"), "dx": err.get("dx") if case.pass_ != "fwd" else None,
               "dw": err.get("dw") if case.pass_ != "fwd" else None}
    bad = nonfinite_parts(rec_err)
    if bad:
        names = {"y": "the output", "dx": "the input gradient", "dw": "the parameter gradient"}
        flags["non_finite"] = (" and ".join(names.get(p, p) for p in bad) + " contain NaN or inf: the timing is of "
                               "a broken computation, not a result")
    if load is None:
        load = noise.machine_load(noise.own_load(case.device, case.threads))
    noise_info = {**load, "ceiling_spread": ctx.ceiling_spread,
                  "rel_iqr": st["iqr"] / st["median"] if st["median"] > 0 else None}
    why = noise.reasons(noise_info)
    if why:
        flags["noisy"] = "; ".join(why)
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
        "peak_mem_bytes": peak,
        "saved_bytes": saved,
        "err": rec_err,
        "err_reference": "eager module in float64 on the same inputs",
        "graph_used": used_graph,
        "noise": noise_info,
    }
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
                       impl_hash=impl_hash(spec, case.backend, ctx.impl_hashes), flags=flags, flag_reasons=flags)


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
            samples, used_graph = time_pass(prep, case, ctx.settings, faults)
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
                                        faults=faults))
        except FarAboveCeiling as exc:
            if refused is None:
                raise
            refused.append((case, str(exc)))
    return records


def case_id(case: Case, hardware_id: str, cache: dict | None = None) -> str:
    """The id the record of ``case`` will get here (it includes the implementation hash of the code now)."""
    from normbench.discovery import REGISTRY
    from normbench.records.schema import record_id

    spec = REGISTRY.get(case.norm)
    return record_id("kernel", case.norm, case.config(spec), hardware_id, impl_hash(spec, case.backend, cache))


# --- sweeping -------------------------------------------------------------------------------------------------------

@dataclass
class SweepSummary:
    written: int = 0
    already_done: int = 0
    skipped: list = field(default_factory=list)   # (case description, reason)
    failed: list = field(default_factory=list)    # (case description, error)
    files: set = field(default_factory=set)
    interrupted: bool = False
    out_of_time: bool = False


def _skip_log(out, hardware_id: str, entries: list[dict], measured: list[str] = ()) -> None:
    """Merge skip reasons into ``<out>/kernel/<hardware_id>/_skipped.json`` (not a record file).

    Cases measured since (``measured``) leave the log.
    """
    import json
    from pathlib import Path

    from normbench.records.store import atomic_write_text

    path = Path(out) / "kernel" / hardware_id / "_skipped.json"
    if not entries and not (measured and path.exists()):
        return
    try:
        current = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(current, dict):
            current = {}
    except (OSError, ValueError):
        current = {}
    for e in entries:
        current[e["case"]] = e
    for case in measured:
        current.pop(case, None)
    atomic_write_text(path, json.dumps(dict(sorted(current.items())), indent=1) + "\n")


def _group_task(cases: list[Case], ctx: Context) -> dict:
    """One group measured where an executor runs it: its records and the cases it refused, with reasons."""
    refused: list = []
    try:
        records = measure_group(cases, ctx, refused)
    except Unsupported as exc:
        return {"records": [], "refused": [(c, str(exc)) for c in cases]}
    return {"records": records, "refused": refused}


_NODE_CONTEXTS: dict = {}  # a worker process's context per (device, settings, command): measured once there


def _node_group_task(cases: list[Case], settings: TimerSettings, command, done: frozenset) -> dict:
    """One group measured on whichever node a remote executor chose, with that node's ceiling and provenance.

    The ids are computed here, with this node's hardware, so a case measured on any node of the same hardware gets
    the same id; cases whose id is in ``done`` are not measured again.
    """
    import platform

    from normbench.records.provenance import hardware, hardware_id

    device = cases[0].device
    # The ceiling is measured with the cases' thread count, as `normbench bench --threads` does in one process
    # (a Ray worker starts with as many threads as CPUs it holds).
    torch.set_num_threads(cases[0].threads)
    key = (device, cases[0].threads, repr(settings), repr(command))
    ctx = _NODE_CONTEXTS.get(key)
    busy = None
    if ctx is None:
        from normbench.measure import noise

        busy = noise.busy_warning(device, cases[0].threads)  # once per worker process, as once per sweep
        ctx = _NODE_CONTEXTS[key] = make_context(device, settings, command)
    hw_id = hardware_id(hardware(device))
    todo = [c for c in cases if case_id(c, hw_id, ctx.impl_hashes) not in done]
    out = {"records": [], "refused": [], "already": len(cases) - len(todo), "hardware_id": hw_id,
           "node": platform.node(), "ceiling": f"{ctx.ceiling_gbps:.1f} GB/s ({ctx.ceiling_method})", "busy": busy}
    if todo:
        out.update(_group_task(todo, ctx))
    return out


def _store_group(records: list, refused: list, group: list, out, summary: "SweepSummary", on_record) -> list[str]:
    """Write one finished group's records (after ``on_record`` amends each) and count them in ``summary``; returns
    the descriptions of the group's cases that were measured (not refused). Both sweep paths write through here."""
    from normbench.records.store import write_records

    if not records:
        return []
    for rec in records:
        if on_record is not None:
            on_record(rec)
    summary.files.update(str(p) for p in write_records(records, out))
    summary.written += len(records)
    refused_ids = {c.describe() for c, _ in refused}
    return [c.describe() for c in group if c.describe() not in refused_ids]


def _run_sweep_remote(cases, out, force, settings, progress, command, log, executor, time_limit, on_record):
    """``run_sweep`` over an executor that runs many groups at once on other machines (Ray).

    Every group is submitted at once with the resources its timing needs (a whole GPU; a CPU node's every core);
    the node measures its own ceiling and computes the record ids with its own hardware. This process writes every
    record as its group finishes (the only writer of ``out``). When a group of a norm hangs or kills its worker,
    that norm's unfinished groups are cancelled.
    """
    from collections import defaultdict

    from normbench.executor import Task
    from normbench.records.provenance import utc_now
    from normbench.records.store import iter_records

    summary = SweepSummary()
    if command is None:  # the driver's command line, not the Ray worker's
        command = [__import__("os").path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python",
                   *sys.argv[1:]]
    done: dict[str, set] = defaultdict(set)
    if not force and __import__("os").path.exists(out):
        for _, rec in iter_records(out, "kernel", errors="ignore"):
            done[rec["norm"]["name"]].add(rec["id"])
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)
    resources = {"num_gpus": 1} if cases[0].device.startswith("cuda") else {"node_cpus": True}
    settings = settings or TimerSettings()
    futures = {}
    for group in groups.values():
        first = group[0]
        where = f"{first.norm}/{first.backend}/{first.shape.label}/{first.dtype}"
        task = Task(_node_group_task, (group, settings, command, frozenset(done.get(first.norm, ()))),
                    label=where, timeout=time_limit, resources=resources)
        futures[executor.submit(task)] = group
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cases), unit="case", dynamic_ncols=True, file=sys.stderr)
    say = (lambda m: bar.write(m)) if bar is not None else log
    skips: dict[str, list] = defaultdict(list)
    measured: dict[str, list] = defaultdict(list)
    ceilings: set = set()
    broken: dict[str, str] = {}
    import concurrent.futures as cf

    try:
        for fut in cf.as_completed(futures):
            group = futures[fut]
            first = group[0]
            where = f"{first.norm}/{first.backend}/{first.shape.label}/{first.dtype}"
            if bar is not None:
                bar.update(len(group))
            if fut.cancelled():
                for c in group:
                    summary.failed.append((c.describe(), f"not attempted: {broken.get(first.norm, 'cancelled')}"))
                continue
            outcome = fut.result()
            if not outcome.ok:
                msg = outcome.error
                if outcome.broke:
                    msg = f"{first.norm} {outcome.broke} in {where}: {outcome.error}"
                    if first.norm not in broken:
                        broken[first.norm] = msg
                        for other, g in futures.items():
                            if g[0].norm == first.norm and not other.done():
                                other.cancel()
                for c in group:
                    summary.failed.append((c.describe(), msg))
                say(f"failed {where}: {msg}")
                continue
            value = outcome.value
            if value.get("busy"):
                say(f"{value['node']}: {value['busy']}")
            if value["node"] + value["ceiling"] not in ceilings:
                ceilings.add(value["node"] + value["ceiling"])
                say(f"ceiling on {value['node']}: {value['ceiling']}")
            summary.already_done += value["already"]
            refused = value["refused"]
            measured[value["hardware_id"]] += _store_group(value["records"], refused, group, out, summary, on_record)
            for c, reason in refused:
                summary.skipped.append((c.describe(), reason))
                skips[value["hardware_id"]].append(
                    {"case": c.describe(), "norm": c.norm, "backend": c.backend, "shape": c.shape.label,
                     "dtype": c.dtype, "pass": c.pass_, "reason": reason, "timestamp": utc_now()})
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if bar is not None:
            bar.close()
        for hw in set(skips) | set(measured):
            _skip_log(out, hw, skips.get(hw, []), measured.get(hw, []))
    return summary


def run_sweep(cases: list[Case], out="results", *, force: bool = False, settings: TimerSettings | None = None,
              progress: bool = True, command=None, log=None, executor=None, time_limit: float | None = None,
              on_record=None, deadline: float | None = None, group_log: list | None = None) -> SweepSummary:
    """Measure ``cases`` group by group, writing each group's records to ``out`` as soon as they exist.

    Cases whose record id is already in ``out`` are skipped unless ``force``. Unsupported cases are recorded
    (with the reason) in ``_skipped.json`` next to the records. Ctrl-C stops after the records already written.
    Each group runs through ``executor`` (default: in this process) with the wall-clock ``time_limit``; a group
    that hangs or kills its process fails, and the rest of that norm's groups are not attempted.
    ``on_record(record)`` may amend each record before it is written (the check verdict, say).
    ``deadline`` (a ``time.monotonic()`` value): no group starts after it; the sweep stops with ``out_of_time``
    set, everything measured so far written. ``group_log`` (a list) receives each group's wall time and case count
    (the campaign's cost model is calibrated from it).
    A remote executor (Ray) runs the groups at once on its nodes instead (``_run_sweep_remote``).
    """
    import time

    from normbench.executor import InProcessExecutor, Task

    if cases and getattr(executor, "remote", False):
        return _run_sweep_remote(cases, out, force, settings, progress, command,
                                 log or (lambda msg: print(msg, file=sys.stderr)), executor, time_limit, on_record)
    from normbench.records.provenance import utc_now
    from normbench.records.store import existing_ids

    log = log or (lambda msg: print(msg, file=sys.stderr))
    summary = SweepSummary()
    if not cases:
        return summary
    device = cases[0].device
    from normbench.records.provenance import hardware, hardware_id

    hw_id = hardware_id(hardware(device))
    done = set() if force else existing_ids(out, "kernel")
    groups: dict[tuple, list[Case]] = {}
    hashes: dict = {}
    for case in cases:
        if case_id(case, hw_id, hashes) in done:
            summary.already_done += 1
            continue
        groups.setdefault(case.group, []).append(case)
    if not groups:
        return summary
    from normbench.measure import noise

    busy = noise.busy_warning(device, cases[0].threads)
    if busy:
        log(busy)
    ctx = make_context(device, settings, command)
    ctx.impl_hashes = hashes
    spread = f", spread {100 * ctx.ceiling_spread:.1f}%" if ctx.ceiling_spread is not None else ""
    log(f"ceiling: {ctx.ceiling_gbps:.1f} GB/s ({ctx.ceiling_method}{spread})")
    unsteady = noise.ceiling_warning(ctx.ceiling_spread)
    if unsteady:
        log(unsteady)
    skips, measured = [], []
    executor = executor or InProcessExecutor()
    broken: dict[str, str] = {}  # norm -> why its remaining groups are not attempted
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(g) for g in groups.values()), unit="case", dynamic_ncols=True, file=sys.stderr)
    try:
        for group in groups.values():
            first = group[0]
            if deadline is not None and time.monotonic() > deadline:
                summary.out_of_time = True
                break
            t_group = time.monotonic()
            if bar is not None:
                bar.set_description(f"{first.norm}/{first.backend}/{first.shape.layout}/{first.dtype}")
            refused: list = []
            where = f"{first.norm}/{first.backend}/{first.shape.label}/{first.dtype}"
            if first.norm in broken:
                for c in group:
                    summary.failed.append((c.describe(), f"not attempted: {broken[first.norm]}"))
                if bar is not None:
                    bar.update(len(group))
                continue
            outcome = executor.submit(Task(_group_task, (group, ctx), label=where, timeout=time_limit)).result()
            if outcome.ok:
                refused = outcome.value["refused"]
                measured += _store_group(outcome.value["records"], refused, group, out, summary, on_record)
            else:
                msg = outcome.error
                if outcome.broke:  # a hang or a dead process: this norm's other groups would do it too
                    msg = f"{first.norm} {outcome.broke} in {where}: {outcome.error}"
                    broken[first.norm] = msg
                for c in group:
                    summary.failed.append((c.describe(), msg))
                (bar.write if bar is not None else log)(f"failed {where}: {msg}")
            for c, reason in refused:
                summary.skipped.append((c.describe(), reason))
                skips.append({"case": c.describe(), "norm": c.norm, "backend": c.backend, "shape": c.shape.label,
                              "dtype": c.dtype, "pass": c.pass_, "reason": reason, "timestamp": utc_now()})
            if group_log is not None:
                group_log.append({"group": where, "backend": first.backend, "cases": len(group),
                                  "wall_s": round(time.monotonic() - t_group, 3)})
            if bar is not None:
                bar.update(len(group))
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if bar is not None:
            bar.close()
        _skip_log(out, hw_id, skips, measured)
    return summary

