"""ASV benchmarks of every norm x backend x shape x dtype x pass, thin declarations over ``normbench.measure``.

``Kernel`` times one pass with ASV's own timer (``time_``) and process peak memory (``peakmem_``). ``Relative``
times the pass in units of torch's own op of the norm's kind timed around it in the same process (``time_in_refs``):
the drift-normalised signal ``asv continuous`` should judge on a shared machine (issue #40; docs/measurement.md, "ASV").
``Metrics`` runs the normbench measurement core over the whole grid once (``setup_cache``), writes full normbench
records (with GPU fields ASV's machine file lacks) to ``.asv/normbench/records`` and reports GB/s, percent of the
DRAM copy ceiling, percent of a same-size copy (compare this one across sizes: a small case's data sits in a cache,
which the DRAM ceiling's does not) and memory above the inputs as ``track_`` benchmarks. ``normbench ingest-asv``
turns both into normbench records. The grid is chosen by ``NORMBENCH_ASV_GRID`` (small, quick, full) and
``NORMBENCH_ASV_NORMS``.
"""

import os
import time
from pathlib import Path

from normbench.measure import suite

# Side records go next to ASV's results (results_dir ".asv/results" in asv.conf.json, two levels up from here).
os.environ.setdefault(suite.SIDECAR_ENV, str(Path(__file__).resolve().parents[2] / ".asv" / "normbench"))
PARAMS = suite.grid(env_prefix="NORMBENCH_ASV")
if (os.environ.get("NORMBENCH_ASV_GRID") or "small").strip().lower() == "small" \
        and not (os.environ.get("NORMBENCH_ASV_MODEL") or "").strip():
    # The default grid's passes are set here, not by the normbench under test: `asv continuous` imports this file
    # into both commits' environments, and both must see one parameter list. fwd beside fwd+bwd: a 5x slower
    # forward shows as 1.5x in fwd+bwd alone (issue #40).
    PARAMS[4] = ["fwd", "fwd+bwd"]
# Benchmark processes per commit: `asv continuous` (and `asv run` over several commits) alternates the commits round
# by round (--interleave-rounds), so a drift of the machine between rounds hits both commits alike.
ROUNDS = 2
#: ``time_in_refs``' processes per commit. Interleaved, two rounds run A B B A: both of B's processes sit in one
#: window of time, and a burst of load there alone read as a 1.33x slower RMSNorm on a comment-only commit (issue #40);
#: four run A B B A A B B A, each commit in three windows spread over the whole run.
RELATIVE_ROUNDS = 4


class Kernel:
    """ASV-timed passes (``time_kernel``) and ASV's process peak memory (``peakmem_kernel``).

    ``bwd`` is timed over one retained autograd graph, since ASV cannot run the forward untimed between calls.
    """

    params = PARAMS
    param_names = suite.PARAM_NAMES
    rounds = ROUNDS
    repeat = (1, 10, 5.0)
    warmup_time = 0.2
    timeout = 900

    def setup_cache(self):
        # Names every normbench commit has (``asv continuous`` imports this file into older commits' environments
        # too): the package's lazy ``make_context`` and ``suite.default_device``, not the module they live in.
        from normbench.measure import make_context
        from normbench.measure.timers import TimerSettings

        ctx = make_context(suite.default_device(), TimerSettings.quick(), command=["asv", "run"])
        suite.write_machine_sidecar(ctx)
        suite.write_impl_sidecar(PARAMS)
        return {"hardware_id": ctx.provenance["hardware_id"]}

    def setup(self, cache, norm, backend, shape, dtype, pass_):
        try:
            case = suite.case_for(norm, backend, shape, dtype, pass_, harness="asv")
            self.prep, fn, pre, sync = suite.prepare(case, retain_graph=True)
        except suite.Unsupported as exc:
            raise NotImplementedError(str(exc)) from None

        def run():
            fn()
            sync()

        self.run = run

    def time_kernel(self, cache, norm, backend, shape, dtype, pass_):
        self.run()

    def peakmem_kernel(self, cache, norm, backend, shape, dtype, pass_):
        self.run()


def _block_time(fn, calls: int, clock) -> float:
    """Seconds of ``clock`` per call of ``fn`` over ``calls`` back-to-back calls."""
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


class RefClock:
    """A clock for ASV's ``timer`` attribute that counts in calls of a reference op, not in seconds.

    ASV reads a timer before and after each sample. At every reading this clock times the reference (the fastest of
    two ~2 ms blocks of calls) and advances by the time since the previous reading divided by the mean of the
    reference's times measured at both ends of that interval. So a sample is the pass's time over the time of the
    reference measured just before and just after it, in the same process: clock, cache and memory-bandwidth drift
    slow both alike and cancel (issue #40). On a CPU both are the process's CPU time (``time.process_time``), not
    wall time: on a machine with more runnable processes than cores a pass is descheduled for a whole time slice of
    someone else's (measured at a load of 14 on 2 cores: LayerNorm's forward spread from 6.1 to 109 copies,
    quartiles), which no reference can cancel; CPU time leaves that out (and a pass that sleeps: no CPU cost). On a
    GPU both are wall time around synchronised calls (``time.perf_counter``): the GPU's time is no CPU time. The
    reading's own reference calls are not counted (the interval restarts after them). Monotonic, as ASV asks of a
    timer.
    """

    block_s = 0.002

    def __init__(self):
        self.ref_fn = None

    def start(self, ref, clock=time.process_time, per: int = 1) -> None:
        """Count in units of ``ref``'s time, timed by ``clock``, from now on (called by the benchmark's setup); a
        sample that runs the pass ``per`` times counts the time of one."""
        self.ref_fn, self.clock, self.per = ref, clock, per
        for _ in range(3):  # warm caches and the allocator
            ref()
        self.calls = max(1, int(self.block_s / max(_block_time(ref, 1, clock), 1e-7)))
        self.value = 0.0
        self.ref = self._ref()
        self.last = clock()

    def _ref(self) -> float:
        return min(_block_time(self.ref_fn, self.calls, self.clock) for _ in range(2))

    def __call__(self) -> float:
        if self.ref_fn is None:
            raise RuntimeError("RefClock read before start(ref): only Relative's setup starts it")
        now = self.clock()
        ref = self._ref()
        self.value += (now - self.last) / ((self.ref + ref) / 2) / self.per
        self.ref = ref
        self.last = self.clock()
        return self.value


REF_CLOCK = RefClock()  # one per benchmark process: ASV runs each parameter set in a process of its own


def reference_kind(norm: str) -> str:
    """Which of torch's own ops is the yardstick of ``norm``'s pass: ``tanh`` (DyT), ``erf`` (Derf), ``rms_norm``
    (the RMS family), ``softmax`` (the softmax kernels), else ``layer_norm`` (a reduction and a pointwise pass over
    the last dimension, the character of every other norm)."""
    n = norm.lower()
    if n.startswith("dyt"):
        return "tanh"
    if n.startswith("derf"):
        return "erf"
    if "rms" in n:
        return "rms_norm"
    if "softmax" in n:
        return "softmax"
    return "layer_norm"


def reference_pass(kind: str, x, pass_: str, sync):
    """A call of torch's ``kind`` op over ``x``'s last dimension for ``pass_`` (fwd, bwd over one retained graph, or
    fwd+bwd), with a weight and bias that take gradients as a norm's do. It belongs to this file, which
    ``asv continuous`` imports for both commits, and to torch, which both commits' environments pin alike: it never
    depends on the code under test."""
    import torch
    import torch.nn.functional as F

    width = x.shape[-1]
    grad = pass_ != "fwd"
    w = torch.ones(width, dtype=x.dtype, device=x.device, requires_grad=grad)
    b = torch.zeros(width, dtype=x.dtype, device=x.device, requires_grad=grad)
    xr = x.detach().clone().requires_grad_(grad)

    def op():
        if kind == "rms_norm":
            return F.rms_norm(xr, (width,), w, 1e-6)
        if kind == "layer_norm":
            return F.layer_norm(xr, (width,), w, b, 1e-5)
        if kind == "softmax":
            return torch.softmax(xr, -1)
        act = torch.tanh if kind == "tanh" else torch.erf
        return act(0.5 * xr) * w + b

    if pass_ == "fwd":
        def call():
            with torch.no_grad():
                op()
            sync()
        return call
    g = torch.randn(x.shape, dtype=x.dtype, device=x.device)
    if pass_ == "bwd":
        y = op()

        def call():
            torch.autograd.backward(y, g, retain_graph=True)
            xr.grad = w.grad = b.grad = None
            sync()
        return call

    def call():
        torch.autograd.backward(op(), g)
        xr.grad = w.grad = b.grad = None
        sync()
    return call


class Relative:
    """The pass's time in units of the same pass of torch's own op of the norm's kind (``time_in_refs``): the
    signal ``asv continuous`` should judge on a shared machine (issue #40; docs/measurement.md, "ASV").

    An ASV time benchmark whose timer is :class:`RefClock`, so ASV's own machinery applies: repeats, two processes
    per commit (``rounds``) that ``asv continuous --interleave-rounds`` alternates with the other commit's, samples
    pooled over both, and the confidence interval that must clear the other commit's before a change is reported.
    The reference (:func:`reference_kind`: ``F.rms_norm`` for RMSNorm, ``F.layer_norm`` for LayerNorm, ``tanh`` for
    DyT, ...) does the same kind of work as the pass, so load that slows arithmetic more than memory traffic (a busy
    sibling core) slows both alike, which a copy of the input did not (docs/measurement.md: over calm and stressed
    phases at a load of 10, the median ratio moved by at most 1.23x against a reference op, up to 2.07x against a
    copy). ASV prints the value with its time unit: read ``1.52s`` as 1.52 times the reference's time (``500ms``:
    half of it). The reference depends on the norm's kind, shape, dtype and pass alone, never on the code under
    test. Larger is worse.
    """

    params = PARAMS
    param_names = suite.PARAM_NAMES
    rounds = RELATIVE_ROUNDS
    repeat = (10, 30, 3.0)
    number = 1  # ASV's calibration of ``number`` reads the timer as seconds; a sample's calls are set in setup
    warmup_time = 0.1
    timer = REF_CLOCK
    #: CPU seconds of passes per sample: one call of a quick case lasts well under a millisecond, where a context
    #: switch's cache refill or one slow dispatch moves a sample by tens of percent
    sample_s = 0.01
    timeout = 900

    def setup(self, norm, backend, shape, dtype, pass_):
        try:
            case = suite.case_for(norm, backend, shape, dtype, pass_, harness="asv")
            self.prep, fn, pre, sync = suite.prepare(case, retain_graph=True)
        except suite.Unsupported as exc:
            raise NotImplementedError(str(exc)) from None

        clock = time.perf_counter if case.device.startswith("cuda") else time.process_time
        t0 = clock()   # prepare() has warmed the pass up: one call sizes a sample
        fn()
        sync()
        calls = max(1, min(1000, round(self.sample_s / max(clock() - t0, 1e-7))))

        def run():
            for _ in range(calls):
                fn()
            sync()

        self.run = run
        ref = reference_pass(reference_kind(norm), self.prep.inputs[0], pass_, sync)
        REF_CLOCK.start(ref, clock, per=calls)

    def time_in_refs(self, norm, backend, shape, dtype, pass_):
        self.run()


class Metrics:
    """GB/s, percent of the measured DRAM copy ceiling, percent of a same-size copy and memory above the inputs, from
    the normbench core. ``track_pct_of_same_size_copy`` is the one to compare across sizes (issue #28)."""

    params = PARAMS
    param_names = suite.PARAM_NAMES
    rounds = 1
    repeat = 1
    number = 1
    timeout = 3600

    def setup_cache(self):
        from normbench.measure.asv_ingest import measure_grid

        return measure_grid(PARAMS)

    setup_cache.timeout = 3600

    def setup(self, cache, norm, backend, shape, dtype, pass_):
        key = suite.combo_key(norm, backend, shape, dtype, pass_)
        if key not in cache["results"]:
            raise NotImplementedError(cache["skipped"].get(key, "not measured"))
        self.result = cache["results"][key]

    def track_gbps(self, cache, norm, backend, shape, dtype, pass_):
        return self.result["gbps"]

    track_gbps.unit = "GB/s"

    def track_pct_of_ceiling(self, cache, norm, backend, shape, dtype, pass_):
        pct = self.result["pct_of_ceiling"]
        return float("nan") if pct is None else pct

    track_pct_of_ceiling.unit = "%"

    def track_pct_of_same_size_copy(self, cache, norm, backend, shape, dtype, pass_):
        # GB/s as a share of a copy_ of the case's own bytes, timed the same way in the same run: the percentage to
        # compare across sizes (a cache-resident case's pct_of_ceiling measures its cache against DRAM).
        pct = self.result.get("pct_of_same_size_copy")
        return float("nan") if pct is None else pct

    track_pct_of_same_size_copy.unit = "%"

    def track_peak_mem_above_inputs(self, cache, norm, backend, shape, dtype, pass_):
        peak = self.result["peak_mem_bytes"]
        return float("nan") if peak is None else peak

    track_peak_mem_above_inputs.unit = "bytes"
