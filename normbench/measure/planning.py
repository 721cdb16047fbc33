"""Planning a sweep: the cases a ``normbench bench`` run (or a suite, or a campaign) measures, and their record ids.

A :class:`Case` is one measurement (norm, backend, shape, dtype, pass, device, timing). :func:`plan` expands the
grid (norms x backends x shapes x dtypes x modes x timings x passes) into cases, checking the names but not whether a
case can run here (measuring finds that out: ``normbench.measure.group``). :func:`case_id` is the id a case's record
will get, so a sweep skips what is already measured (``normbench.measure.sweep``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

from normbench.measure import baselines
from normbench.measure.shapes import Shape, input_shape, shapes_for
from normbench.measure.timers import FLUSHES, TimerSettings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PASSES = ("fwd", "bwd", "fwd+bwd")
QUICK_DTYPES = ("float32", "bfloat16")
QUICK_PASSES = ("fwd", "fwd+bwd")
#: train: batch statistics, running state updated; eval: running statistics (a different, cheaper kernel).
MODES = ("train", "eval")


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
    #: CUDA only (ignored on a CPU): each batch of repetitions runs behind a spin and is checked (``timers.KeepAhead``)
    keep_ahead: bool = True

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
            cfg["keep_ahead"] = True         # a checked spin kept the GPU ahead of the host (absent: not kept ahead)
        return cfg



def default_device() -> str:
    from normbench import device as seam

    return "cuda" if seam.available() else "cpu"


def backends_for(spec) -> tuple[str, ...]:
    """The spec's backends plus the external baselines (native, liger, quack, te, flashinfer, apex) for this norm."""
    return tuple(spec.backends) + baselines.backends_for(spec.name)


def device_dtypes(device: str) -> tuple[str, ...]:
    if device.startswith("cuda"):
        out = ["float32"]
        from normbench import device as seam

        if seam.get().bf16_supported():
            out.append("bfloat16")
        return tuple(out + ["float16"])
    return ("float32", "bfloat16")


def plan(norms: Iterable[str] | None = None, backends: Iterable[str] | None = None,
         dtypes: Iterable[str] | None = None, passes: Iterable[str] | None = None,
         layouts: Iterable[str] | None = None, shapes: Iterable[Shape] | None = None, quick: bool = False,
         shape_class: str | None = None, device: str | None = None, timings: Iterable[str] | None = None,
         threads: int | None = None, graphs: bool = False, harness: str = "cli",
         modes: Iterable[str] | None = None, flush: str = "zero", keep_ahead: bool = True,
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
    from normbench import device as seam

    if device.startswith("cuda") and here and not seam.available():
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



def case_id(case: Case, hardware_id: str, cache: dict | None = None) -> str:
    """The id the record of ``case`` will get here (it includes the implementation hash of the code now)."""
    from normbench.discovery import REGISTRY
    from normbench.records.schema import record_id

    spec = REGISTRY.get(case.norm)
    h = baselines.impl_hash(spec, case.backend, cache)
    return record_id("kernel", case.norm, case.config(spec), hardware_id, h)



def memory_estimates(cases: Iterable[Case], together: bool = False) -> list[tuple[str, int]]:
    """``(norm/shape/dtype, estimated peak bytes)`` per group of ``cases``, largest first (see
    ``normbench.measure.memory.estimate_case_bytes``: the float64 reference of the error figures included).

    ``together``: the backends of a norm, shape and dtype are alive at once (head to head): each one beyond the
    first adds its own inputs and outputs (the float64 reference is built for one backend at a time)."""
    from normbench.discovery import REGISTRY
    from normbench.measure.memory import estimate_case_bytes

    est: dict[str, int] = {}
    backends: dict[str, set] = {}
    per_backend: dict[str, int] = {}
    for c in cases:
        spec = REGISTRY.get(c.norm)
        dims = input_shape(c.shape, spec.kind)
        n = 1
        for d in dims:
            n *= d
        inputs = 2 if spec.kind in ("residual", "attention") else 1
        key = f"{c.norm}/{c.shape.label}/{c.dtype}"
        b = estimate_case_bytes(n, inputs, torch.empty((), dtype=DTYPES[c.dtype]).element_size(), c.pass_ != "fwd")
        est[key] = max(est.get(key, 0), b)
        if _runs_here(spec, c):
            backends.setdefault(key, set()).add(c.backend)
        per_backend[key] = 2 * inputs * n * torch.empty((), dtype=DTYPES[c.dtype]).element_size()
    if together:
        est = {k: v + max(0, len(backends.get(k, ())) - 1) * per_backend[k] for k, v in est.items()}
    return sorted(est.items(), key=lambda kv: -kv[1])


def _runs_here(spec, c: Case) -> bool:
    """Whether the case's backend can run here (as ``measure.group.Prepared`` decides, without building it)."""
    if c.backend in spec.backends:
        return spec.backend_unavailable(c.backend) is None
    return baselines.unavailable(c.backend, spec.name, c.shape.layout, c.device, c.dtype) is None


def runs_here(c: Case) -> bool:
    """Whether ``c``'s backend can run on this machine (its norm from the registry; see ``_runs_here``)."""
    from normbench.discovery import REGISTRY

    return _runs_here(REGISTRY.get(c.norm), c)


def too_big(cases: Iterable[Case], free: int | None, together: bool = False) -> list[str]:
    """Why the largest of ``cases`` would not fit in ``free`` bytes (empty when they fit or ``free`` is unknown)."""
    if free is None:
        return []
    return [f"{what} needs about {b / 2**30:.2f} GiB (float64 reference included), more than the "
            f"{free / 2**30:.2f} GiB free" for what, b in memory_estimates(cases, together) if b > free]
