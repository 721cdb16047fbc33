"""What the ASV and pytest-benchmark suites share: their parameter grids and thin wrappers over the core.

Grid selection (environment variables, read when the suite is imported):

* ``NORMBENCH_ASV_GRID`` / ``NORMBENCH_PYTEST_GRID``: ``small`` (default), ``quick`` or ``full``.

  - ``small``: LayerNorm, RMSNorm, DyT and every installed plugin norm; eager; the quick tokens shape; float32;
    fwd+bwd. It finishes in a few minutes on a 2-core CPU (ASV starts one process per benchmark and parameter set).
  - ``quick``: every registered norm; eager and compile; both quick shapes; float32 and bfloat16; fwd and fwd+bwd.
  - ``full``: every registered norm; every backend (including triton, liger, apex); the llm and vision shapes;
    every dtype of the device; fwd, bwd and fwd+bwd.
  - ``softmax``: softmax and log-softmax; every backend (the algorithms, plus external softmax baselines); the
    softmax shapes (attention and vocabulary widths); every dtype of the device; fwd, bwd and fwd+bwd. The softmax
    norms are in no other grid.
* ``NORMBENCH_ASV_NORMS`` / ``NORMBENCH_PYTEST_NORMS``: comma-separated norms replacing the grid's norm list.
* ``NORMBENCH_ASV_SHAPES`` / ``NORMBENCH_PYTEST_SHAPES``: comma-separated shapes replacing the grid's shapes: grid
  labels or free-form shapes (``140x4096``, ``1x140x4096``, ``images:32x256x56x56``), as ``bench --shape`` takes them.
* ``NORMBENCH_ASV_MODEL`` / ``NORMBENCH_PYTEST_MODEL``: a catalog model (``normbench models``): its sites' norms and
  shapes in its quick regimes (``bench --model --quick``'s cases; a norm is timed only at its own sites' shapes),
  the grid's backends, dtypes and passes otherwise (fwd when the grid is ``small``).

Combinations a norm cannot run (layout it lacks, backend unavailable here) are skipped with the reason, and so is
every combination of a norm whose contract check fails, or of a backend whose check against eager on this device
fails, in its current implementation (the check gate, ``normbench.check``: run once, in a worker process with the
time limit, and cached per norm, backend and device kind): ``NORMBENCH_FORCE=1`` measures them anyway and flags
their records ``forced``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from normbench.measure.baselines import impl_hash
from normbench.measure.group import Prepared, Unsupported
from normbench.measure.planning import (
    PASSES,
    QUICK_DTYPES,
    QUICK_PASSES,
    Case,
    backends_for,
    default_device,
    device_dtypes,
)
from normbench.measure.shapes import parse_shape, quick_shapes, shape_from_dims, shapes_for

SMALL_NORMS = ("layernorm", "rmsnorm", "dyt")
GRIDS = ("small", "quick", "full", "softmax")
PARAM_NAMES = ["norm", "backend", "shape", "dtype", "pass"]

__all__ = ["GRIDS", "PARAM_NAMES", "Unsupported", "grid", "case_for", "prepare", "sidecar_root"]


def _plugin_norms() -> list[str]:
    from normbench.discovery import REGISTRY

    return [n for n in REGISTRY.names() if REGISTRY.get(n).package != "normbench" and REGISTRY.get(n).kind != "softmax"]


def _layer_norms() -> list[str]:
    """Every registered norm but the softmax ones, which have their own grid."""
    from normbench.discovery import REGISTRY

    return [n for n in REGISTRY.names() if REGISTRY.get(n).kind != "softmax"]


def grid(kind: str | None = None, norms: str | None = None, env_prefix: str = "NORMBENCH_ASV") -> list[list[str]]:
    """``[norms, backends, shape labels, dtypes, passes]`` for the chosen grid (see the module docstring)."""
    from normbench.discovery import REGISTRY

    kind = (kind or os.environ.get(f"{env_prefix}_GRID") or "small").strip().lower()
    if kind not in GRIDS:
        raise ValueError(f"{env_prefix}_GRID must be one of {', '.join(GRIDS)}, got {kind!r}")
    norms = norms if norms is not None else os.environ.get(f"{env_prefix}_NORMS")
    device = default_device()
    if kind == "small":
        names = [n for n in SMALL_NORMS if n in REGISTRY.specs] + _plugin_norms()
        backends, shapes, dtypes, passes = ["eager"], [quick_shapes()[0].label], ["float32"], ["fwd+bwd"]
    elif kind == "quick":
        names = _layer_norms()
        backends = ["eager", "compile"]
        shapes = [s.label for s in quick_shapes()]
        dtypes, passes = list(QUICK_DTYPES), list(QUICK_PASSES)
    else:
        soft = kind == "softmax"
        names = [n for n in REGISTRY.names() if (REGISTRY.get(n).kind == "softmax") == soft]
        backends = []
        for n in names:
            for b in backends_for(REGISTRY.get(n)):
                if b not in backends:
                    backends.append(b)
        shapes = [s.label for s in shapes_for("softmax" if soft else "all")]
        dtypes, passes = list(device_dtypes(device)), list(PASSES)
    model = (os.environ.get(f"{env_prefix}_MODEL") or "").strip()
    _MODEL_PAIRS.clear()
    if model:
        pairs = model_pairs(model)
        _MODEL_PAIRS.update(pairs)
        names = list(dict.fromkeys(n for n, _ in pairs))
        shapes = list(dict.fromkeys(label for _, label in pairs))
        if kind == "small":
            backends, passes = ["eager", "compile"], ["fwd"]
    shape_env = os.environ.get(f"{env_prefix}_SHAPES")
    if shape_env:
        shapes = [parse_shape(x).label for x in shape_env.split(",") if x.strip()]
    if norms:
        names = [REGISTRY.get(n.strip()).name for n in norms.split(",") if n.strip()]
    return [list(dict.fromkeys(names)), backends, shapes, dtypes, passes]


_MODEL_PAIRS: set = set()  # (norm, shape label) of the model a grid was chosen for; empty: every pair


def model_pairs(model: str) -> list[tuple[str, str]]:
    """(norm, shape label) of every site of a catalog model in its quick regimes, in order."""
    from normbench import catalog

    m = catalog.get(model)
    out = []
    for ss in catalog.site_shapes(m, quick=True):
        pair = (ss.norm, shape_from_dims(ss.layout, ss.dims).label)
        if pair not in out:
            out.append(pair)
    return out


#: Set to 1 to measure norms that have not passed ``normbench check`` (records flagged ``forced``).
FORCE_ENV = "NORMBENCH_FORCE"


def forced() -> bool:
    return os.environ.get(FORCE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_verdicts(needs) -> dict:
    """``{norm: CheckStatus}`` for ``needs`` (``(norm, backend, device)`` triples, or norm names): cached verdicts,
    missing ones checked now in a worker process (time-limited)."""
    from normbench.check import CheckStatus, ensure_checked
    from normbench.executor import time_limit
    from normbench.executors import make_executor
    from normbench.measure.baselines import GATE

    needs = [(n, "eager", "cpu") if isinstance(n, str) else tuple(n) for n in needs]
    missing = [n for n in dict.fromkeys(needs) if n not in _VERDICTS]
    if missing:
        with contextlib.ExitStack() as stack:
            ex = _Lazy(lambda: stack.enter_context(make_executor(preload=("normbench.check",))))
            found = ensure_checked(missing, ex, time_limit(check=True), provider=GATE)
        for n in missing:
            _VERDICTS[n] = found[n[0]]
    out: dict = {}
    for n in needs:  # one norm's verdicts from several calls: together
        v = _VERDICTS[n]
        out[n[0]] = v if n[0] not in out else CheckStatus(n[0], v.contract, {**out[n[0]].verdicts, **v.verdicts})
    return out


class _Lazy:
    """An executor started on its first task: verdicts the cache (or this machine's devices) answers start none."""

    def __init__(self, make):
        self._make, self._ex = make, None

    def submit(self, task):
        if self._ex is None:
            self._ex = self._make()
        return self._ex.submit(task)


_VERDICTS: dict = {}  # this process's verdicts by (norm, backend, device): a suite asks once per combination


def gate(norm: str, backend: str = "eager", device: str = "cpu"):
    """The norm's check verdicts; raises :class:`Unsupported` when ``backend`` on ``device`` has not passed its check
    (unless ``NORMBENCH_FORCE``). Only that backend is refused: eager and the others run."""
    from normbench.check import refusal

    status = check_verdicts([(norm, backend, device)])[norm]
    if status.refused(backend, device) and not forced():
        raise Unsupported(refusal(status.verdict(backend, device), "benchmark")
                          .replace("pass --force", f"set {FORCE_ENV}=1"))
    return status


def stamp(record: dict) -> dict:
    """Put the check verdict of the record's backend on its device (and the ``forced`` flag, if so) on a suite's
    record."""
    from normbench.check import stamp as _stamp

    name, cfg = record["norm"]["name"], record["config"]
    status = check_verdicts([(name, cfg["backend"], cfg.get("device") or "cpu")])[name]
    return _stamp(record, status, cfg["backend"], forced=forced())


def case_for(norm: str, backend: str, shape: str, dtype: str, pass_: str, harness: str, timer: str = "host") -> Case:
    """The core's case for one parameter combination; raises :class:`Unsupported` (with the reason) if it cannot run.

    A norm that has not passed ``normbench check`` is unsupported here (see the module docstring).
    ``timer``: ``"host"`` when the harness times it (pytest-benchmark, ASV's ``time_``), ``"events"`` when the core
    does (CUDA events, L2 flushed: ``cold``); it decides the record's ``timing`` label.
    """
    import torch

    from normbench.discovery import REGISTRY

    spec = REGISTRY.get(norm)
    s = parse_shape(shape)
    if _MODEL_PAIRS and (spec.name, s.label) not in _MODEL_PAIRS:
        raise Unsupported(f"no site of the model computes {norm} at {s.label}")
    if s.layout not in spec.layouts:
        raise Unsupported(f"{norm} does not support the {s.layout} layout")
    if backend not in backends_for(spec):
        raise Unsupported(f"{norm} has no backend {backend}")
    from normbench.measure.timers import timing_label

    device = default_device()
    gate(spec.name, backend, device)
    # The suites' own timers use a host clock around a synchronised call and flush nothing: on CUDA that is
    # "host" timing (launch and synchronisation included), never "cold".
    timing = timing_label(device, timer, cold=timer == "events")
    return Case(norm, backend, s, dtype, pass_, device, timing, torch.get_num_threads(), False, harness)


def prepare(case: Case, retain_graph: bool = False):
    """(prepared module, timed callable, untimed pre-callable, synchronize) for a case, warmed up.

    ``retain_graph``: for ``bwd``, time backward over one retained graph instead of rebuilding the graph
    untimed before each call (for timers that cannot run untimed code between calls, like ASV's). For the
    compile backend this turns off AOTAutograd's buffer donation before the module is compiled (see
    :func:`allow_retained_compiled_backward`).
    """

    from normbench.discovery import REGISTRY

    if retain_graph and case.pass_ == "bwd" and case.backend == "compile":
        allow_retained_compiled_backward()
    prep = Prepared(REGISTRY.get(case.norm), case.backend, case.shape, case.dtype, case.device)
    if retain_graph and case.pass_ == "bwd":
        fn, pre = prep.retained_backward(), None
    else:
        fn, pre = prep.pass_fns(case.pass_)
    if case.device.startswith("cuda"):
        from normbench import device as seam

        def sync():
            seam.get().synchronize(case.device)
    else:
        def sync():
            return None
    for _ in range(2):  # compiles torch.compile / Triton kernels outside the timed region
        if pre is not None:
            pre()
        fn()
    sync()
    return prep, fn, pre, sync


def allow_retained_compiled_backward() -> bool:
    """Let a compiled backward be called again on a retained graph; returns whether a setting was changed.

    AOTAutograd may *donate* the buffers a compiled backward saved (reuse them for its outputs), and then refuses
    ``retain_graph=True`` ("compiled with non-empty donated buffers"): on CUDA the partitioner donates where the CPU
    build here did not. Donation is decided when the module is first compiled, so this must run before. It saves
    memory, not traffic: the kernels read and write the same bytes. The core never needs it (it rebuilds the graph
    untimed before each repetition); only ASV's ``bwd`` timing, which cannot, does. Verify on a GPU.
    """
    try:
        import torch._functorch.config as fconfig
    except ImportError:  # pragma: no cover - very old torch
        return False
    if getattr(fconfig, "donated_buffer", False):
        fconfig.donated_buffer = False
        return True
    return False


#: Set by the ASV suite to ``<repo>/.asv/normbench`` (ASV runs benchmarks in temporary directories and gives an
#: "existing" environment none of its ASV_* variables).
SIDECAR_ENV = "NORMBENCH_ASV_SIDECAR"


def sidecar_root() -> Path:
    """Where the ASV suite writes full normbench records and machine info (``<repo>/.asv/normbench``)."""
    if os.environ.get(SIDECAR_ENV):
        return Path(os.environ[SIDECAR_ENV])
    base = os.environ.get("ASV_CONF_DIR") or os.getcwd()
    return Path(base) / ".asv" / "normbench"


def write_machine_sidecar(ctx) -> Path:
    """Record this machine's provenance (GPU fields included) and ceiling for ``normbench ingest-asv``."""
    from normbench.records.store import atomic_write_text

    path = sidecar_root() / "machine" / f"{socket.gethostname()}.json"
    data = {"hostname": socket.gethostname(), "provenance": ctx.provenance, "ceiling_gbps": ctx.ceiling_gbps,
            "ceiling_method": ctx.ceiling_method, "datasheet_peak_gbps": ctx.datasheet_peak_gbps}
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return path


def run_label() -> str:
    """``<commit>-<env>`` of the ASV run this process belongs to, as ASV names its result file: ``ASV_COMMIT`` (set
    in the environments ASV builds) or else the checkout's ``git rev-parse HEAD`` (an existing environment runs the
    checkout; ``--set-commit-hash`` names it), and ``ASV_ENV_NAME``."""
    commit = os.environ.get("ASV_COMMIT")
    if not commit:
        import subprocess

        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                    cwd=os.environ.get("ASV_CONF_DIR") or None, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = "unknown"
    return f"{commit}-{os.environ.get('ASV_ENV_NAME', 'unknown')}"


def write_impl_sidecar(params: list[list[str]]) -> Path:
    """Record, for the ASV run under way, the implementation hash of every (norm, backend) of the grid, computed
    from the code being benchmarked, so ``normbench ingest-asv`` stamps ASV's timings with the code that made them
    (the checkout it runs from may hold another commit)."""
    from normbench.discovery import REGISTRY
    from normbench.records.store import atomic_write_text

    hashes = {}
    for norm in params[0]:
        try:
            spec = REGISTRY.get(norm)
        except KeyError:
            continue
        for backend in params[1]:
            if backend in backends_for(spec):
                hashes[f"{norm}|{backend}"] = impl_hash(spec, backend)
    path = sidecar_root() / "impl" / f"{run_label()}.json"
    atomic_write_text(path, json.dumps({"run": run_label(), "hashes": hashes}, indent=1, sort_keys=True) + "\n")
    return path


def combo_key(norm: str, backend: str, shape: str, dtype: str, pass_: str) -> str:
    return "|".join((norm, backend, shape, dtype, pass_))


def sync_timer() -> float:
    """``time.perf_counter`` after waiting for the GPU, so a timed region covers the kernels it launched."""
    import time

    from normbench import device as seam

    dev = seam.get()
    if dev.initialized():
        dev.synchronize()
    return time.perf_counter()


def benchmark_extra_info(prep, case: Case, ctx, samples: list[float]) -> dict:
    """The normbench record for pytest-benchmark's samples, and the fields to show in its ``extra_info``."""
    from normbench.measure.group import build_record
    from normbench.measure.memory import saved_bytes

    record = stamp(build_record(prep, case, ctx, list(samples), False, prep.errors(),
                                None, saved_bytes(prep.forward, prep.params)))
    m = record["metrics"]
    # Both percentages (issue #28): pct_of_ceiling against the DRAM copy ceiling, pct_of_same_size_copy against a
    # copy of the case's own bytes timed the same way; compare pct_of_same_size_copy across sizes (a cache-resident
    # case's pct_of_ceiling measures the cache, not the kernel).
    extra = {k: m.get(k) for k in ("bytes_moved", "gbps", "ceiling_gbps", "pct_of_ceiling", "copy_same_size_gbps",
                                   "pct_of_same_size_copy", "cache_resident", "working_set_bytes",
                                   "datasheet_peak_gbps", "saved_bytes")}
    extra["flags"] = record["flags"]
    extra["bytes_model"] = record["config"]["bytes_model"]
    extra["norm"], extra["backend"], extra["dtype"], extra["pass"] = case.norm, case.backend, case.dtype, case.pass_
    extra["shape"] = record["config"]["shape"]
    return {"record": record, "extra_info": extra}
