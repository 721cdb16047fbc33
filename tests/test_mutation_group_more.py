"""#52: ``normbench.measure.group`` where its full mutation run left survivors (docs/mutation-report.md): what
``measure_group`` hands each record (saved bytes only with a backward pass, each pass's own peak memory, the machine
load read right after timing, the compile report of each case's own window, the graph flag), its refused cases, a
weight-kind norm's FLOPs, and the same-size copy reference a record is compared with.

Everything runs through ``measure_group`` on this CPU (or the rehearsal's simulated CUDA device) on one tiny shape,
and each record is checked against an expectation derived here (the shape's bytes, the layer's multiply-adds, a
planted load average), never against a timing."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_mutation_headtohead import FAST, SHAPE, _case, _ctx, rehearsal  # noqa: F401  (fixtures)

from normbench.measure import baselines, group, noise, reference
from normbench.measure.shapes import Shape

N = 4 * 8 * 64          # SHAPE's elements
F32 = 4                 # bytes per float32 element


@pytest.fixture(autouse=True)
def _threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# --- one group at a time ----------------------------------------------------------------------------------------------

def test_cases_of_two_groups_are_refused_with_the_rule_in_the_message():
    with pytest.raises(AssertionError, match=r"^measure_group needs cases of one group$"):
        group.measure_group([_case("eager"), _case("native")], _ctx())


# --- saved bytes: only a group with a backward pass measures them -----------------------------------------------------

def test_a_forward_only_group_has_no_saved_bytes_and_a_group_with_a_backward_has_them():
    """What a forward saves for backward matters only where a backward runs: a group of ``fwd`` cases records None; a
    group with ``bwd`` (or ``fwd+bwd``) records the bytes, at least the input RMSNorm's backward needs (its whole
    float32 input), for every case of the group."""
    [fwd] = group.measure_group([_case("eager", pass_="fwd")], _ctx())
    assert fwd["metrics"]["saved_bytes"] is None
    [bwd] = group.measure_group([_case("eager", pass_="bwd")], _ctx())
    assert isinstance(bwd["metrics"]["saved_bytes"], int) and bwd["metrics"]["saved_bytes"] >= N * F32
    both = group.measure_group([_case("eager", pass_="fwd"), _case("eager", pass_="fwd+bwd")], _ctx())
    assert [r["config"]["pass"] for r in both] == ["fwd", "fwd+bwd"]
    assert all(r["metrics"]["saved_bytes"] >= N * F32 for r in both)


# --- each pass's own peak memory, and the graph flag of a CPU timing --------------------------------------------------

def test_each_record_carries_the_peak_memory_of_its_own_pass():
    """On a CPU every pass has a peak: the forward's holds at least its output; a fwd+bwd holds the forward's
    output while its backward writes the input gradient, so it is above the forward's peak; a CPU timing is never a
    CUDA graph (``graph_used`` False, not unknown)."""
    recs = group.measure_group([_case("eager", pass_=p) for p in ("fwd", "bwd", "fwd+bwd")], _ctx())
    peak = {r["config"]["pass"]: r["metrics"]["peak_mem_bytes"] for r in recs}
    assert all(isinstance(v, int) for v in peak.values()), peak
    assert peak["fwd"] >= N * F32 and peak["bwd"] >= N * F32   # the output; the input gradient
    assert peak["fwd+bwd"] > peak["fwd"] and peak["fwd+bwd"] >= peak["bwd"]
    assert [r["metrics"]["graph_used"] for r in recs] == [False, False, False]


# --- the machine load: read right after timing, with the load the benchmark adds by itself ----------------------------

def test_the_machine_load_is_read_right_after_each_timing_before_its_peak_memory(monkeypatch):
    """The load average kept in a record covers the minute its samples were taken in: it is read after the case's
    timing and before anything else runs for that case (the peak-memory pass)."""
    from normbench.measure import memory

    log: list[str] = []
    real_time, real_peak = group.cpu_time, memory.peak_above

    def timed(*a, **kw):
        log.append("time")
        return real_time(*a, **kw)

    def peak(*a, **kw):
        log.append("peak")
        return real_peak(*a, **kw)

    def load():
        log.append("load")
        return 0.25

    monkeypatch.setattr(group, "cpu_time", timed)
    monkeypatch.setattr(memory, "peak_above", peak)
    monkeypatch.setattr(noise, "load_average", load)
    recs = group.measure_group([_case("eager", pass_="fwd"), _case("eager", pass_="bwd")], _ctx())
    assert log == ["time", "load", "peak"] * 2
    assert all(r["metrics"]["noise"]["load1"] == 0.25 for r in recs)


def test_a_gpu_record_takes_one_core_of_the_load_as_its_own(monkeypatch, rehearsal):  # noqa: F811
    """On a GPU the benchmark adds one to the load average (its one host thread), whatever the case's CPU threads:
    a planted load average of 1.5 on "cuda" with 2 threads leaves 0.5 of background load; the same on the CPU
    leaves none (the 2 compute threads are the benchmark's own)."""
    import os

    monkeypatch.setattr(noise, "load_average", lambda: 1.5)
    cores = os.cpu_count() or 1
    [gpu] = group.measure_group([dataclasses.replace(_case("eager", device="cuda"), threads=2)], _ctx(1000.0, "cuda"))
    assert gpu["metrics"]["noise"]["load1"] == 1.5
    assert gpu["metrics"]["noise"]["background_load_per_core"] == pytest.approx(0.5 / cores)
    [cpu] = group.measure_group([dataclasses.replace(_case("eager"), threads=2)], _ctx())
    assert cpu["metrics"]["noise"]["background_load_per_core"] == 0.0


# --- the compile backend: each record carries the report of its own timing window -------------------------------------

@pytest.fixture
def dynamo_without_inductor(monkeypatch):
    """The compile backend as it is (Dynamo tracing, ``CompileWatch`` counting every call of the compiled graph), with
    Dynamo's ``eager`` compiler behind the watch instead of Inductor: no C++ build, so a group compiles in about a
    second here."""
    from torch._dynamo.backends.debugging import eager

    from normbench.kernels import compile_watch

    monkeypatch.setattr(compile_watch.CompileWatch, "_compiler", lambda self: eager)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_each_compiled_record_reports_the_calls_of_its_own_timing_window(dynamo_without_inductor):
    """A compile group of three passes: each record's ``metrics.compile`` counts the forward calls of its own timing
    only (the timer's warm-up and repetitions: the error check and the other passes before it are not in it), all
    of them ran compiled code, and no record is flagged ``fell_back``; its load is a machine-load report."""
    recs = group.measure_group([_case("compile", pass_=p) for p in ("fwd", "bwd", "fwd+bwd")], _ctx())
    assert [r["config"]["pass"] for r in recs] == ["fwd", "bwd", "fwd+bwd"]
    for r in recs:
        comp = r["metrics"]["compile"]
        assert comp["forward_calls"] == FAST.warmup + r["metrics"]["reps"] == 4, comp
        assert comp["compiled_calls"] == comp["forward_calls"] and comp["stayed_compiled"] is True
        assert comp["frames_failed"] == comp["graph_breaks"] == 0
        assert "fell_back" not in r["flags"]
        assert set(r["metrics"]["noise"]) >= {"load1", "cores", "background_load_per_core"}


# --- refused cases: the group's other passes still run ----------------------------------------------------------------

@pytest.fixture
def forward_only_native(monkeypatch):
    """``native`` (``F.rms_norm``, real on a CPU) declared forward-only, as flashinfer's kernels are."""
    b = baselines.REGISTRY[("native", "rmsnorm")]
    monkeypatch.setitem(baselines.REGISTRY, ("native", "rmsnorm"), dataclasses.replace(b, forward_only=True))


def test_a_forward_only_baselines_backward_cases_are_refused_and_its_forward_is_measured(forward_only_native):
    cases = [_case("native", pass_="bwd"), _case("native", pass_="fwd"), _case("native", pass_="fwd+bwd")]
    refused: list = []
    recs = group.measure_group(cases, _ctx(), refused)
    assert [r["config"]["pass"] for r in recs] == ["fwd"]
    why = "native's rmsnorm is forward-only (no autograd)"
    assert refused == [(cases[0], why), (cases[2], why)]
    # without a list to collect them, the first refusal is raised
    with pytest.raises(group.Unsupported, match=r"^native's rmsnorm is forward-only \(no autograd\)$"):
        group.measure_group(cases, _ctx())


def test_a_bandwidth_far_above_the_ceiling_is_refused_not_recorded():
    """A ceiling of 1e-6 GB/s: every case's bandwidth is far above it, a broken timing: with ``refused`` given, the
    group returns no record and names each case with the reason; without it, the first is raised."""
    cases = [_case("eager", pass_="fwd"), _case("eager", pass_="bwd")]
    refused: list = []
    assert group.measure_group(cases, _ctx(1e-6), refused) == []
    assert [c for c, _ in refused] == cases
    for _, why in refused:
        assert "the measured ceiling 1e-06 GB/s: a broken timing, not recorded" in why
    with pytest.raises(group.FarAboveCeiling, match="a broken timing, not recorded"):
        group.measure_group(cases, _ctx(1e-6))


# --- a weight-kind norm's FLOPs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout, dims", [("images", (2, 8, 4, 4)), ("tokens", (4, 8, 16))])
def test_a_weight_norms_flops_are_twice_its_layers_multiply_adds_per_pass(layout, dims):
    """A weight-kind norm wraps a Linear (tokens) or a 3x3 Conv2d (images): its forward costs 2 FLOPs per
    multiply-add of that layer (each output element: in-channels x kernel area of them), a backward twice that
    (input and weight gradients), fwd+bwd three times. Counted here from the layer's weight and output."""
    from normbench.discovery import REGISTRY

    shape = Shape(f"tiny-{layout}", layout, dims, "quick")
    cases = [_case("eager", norm="weight_norm", pass_=p) for p in ("fwd", "bwd", "fwd+bwd")]
    cases = [dataclasses.replace(c, shape=shape) for c in cases]
    recs = group.measure_group(cases, _ctx(1e6))
    layer = REGISTRY.get("weight_norm").create(dims[1] if layout == "images" else dims[-1], layout=layout).layer
    x = torch.zeros(dims)
    macs = layer(x).numel() * layer.weight[0].numel()
    fwd = 2 * macs
    assert {r["config"]["pass"]: r["metrics"]["flops"] for r in recs} == {"fwd": fwd, "bwd": 2 * fwd,
                                                                         "fwd+bwd": 3 * fwd}
    for r in recs:
        m = r["metrics"]
        assert m["tflops"] == m["flops"] / m["time_median_s"] / 1e12


# --- the same-size copy reference -------------------------------------------------------------------------------------

@pytest.fixture
def copies(monkeypatch):
    """No reference timed before, and every copy timed from now on: (nbytes, dtype) of each."""
    monkeypatch.setattr(reference, "_REFERENCES", {})
    timed: list = []
    real = reference.measure_copy

    def spy(nbytes, dtype, case, settings):
        timed.append((nbytes, dtype))
        return real(nbytes, dtype, case, settings)

    monkeypatch.setattr(reference, "measure_copy", spy)
    return timed


def test_the_copy_reference_is_shared_within_a_run_and_timed_anew_in_another(copies):
    """Two cases of one size in one run share one timed copy; a new run (a new context: a new run id) times its own."""
    first = _ctx()
    a = group.cache_metrics(_case("eager"), 8192, True, first)
    b = group.cache_metrics(_case("eager"), 8192, True, first)
    assert copies == [(8192, "float32")] and a["copy_same_size"] == b["copy_same_size"]
    group.cache_metrics(_case("eager"), 8192, True, _ctx())
    assert copies == [(8192, "float32")] * 2


def test_the_copy_reference_of_a_bfloat16_case_copies_bfloat16(copies):
    """The reference copies the case's dtype (a bfloat16 case's same-size copy is of bfloat16 elements, and it is not
    the float32 case's copy of the same bytes); the record keeps its GB/s beside, not inside, its description."""
    ctx = _ctx()
    bf16 = group.cache_metrics(dataclasses.replace(_case("eager"), dtype="bfloat16"), 8192, True, ctx)
    f32 = group.cache_metrics(_case("eager"), 8192, True, ctx)
    assert copies == [(8192, "bfloat16"), (8192, "float32")]
    assert "copy_ of 4096 bytes (bfloat16)" in bf16["copy_same_size"]["method"]
    assert "copy_ of 4096 bytes (float32)" in f32["copy_same_size"]["method"]
    for m in (bf16, f32):
        assert m["copy_same_size_gbps"] > 0 and "gbps" not in m["copy_same_size"]
        assert m["copy_same_size"]["bytes_moved"] == 8192 and m["working_set_bytes"] == 8192


def test_a_gpu_cases_cache_is_the_gpus_l2(rehearsal):  # noqa: F811
    """On (simulated) CUDA the cache a case's working set is compared with is the device's L2, not the host CPU's."""
    from normbench import device as seam

    got = group.cache_metrics(_case("eager", device="cuda"), 8192, True, _ctx(1000.0, "cuda"))
    l2 = seam.get().l2_bytes("cuda")
    assert got["cache_bytes"]["l2_bytes"] == got["cache_bytes"]["llc_bytes"] == l2
    assert "L2_cache_size" in got["cache_bytes"]["source"]


PLANTED_COPY = {"gbps": 100.0, "method": "a planted copy reference"}


def test_a_cold_gpu_pass_reads_dram_unless_its_backward_can_reuse_what_its_forward_left_in_l2(rehearsal):  # noqa: F811
    """(Simulated) CUDA, 8 KiB, far below any L2: a cold timing flushes L2 before each call, so a single pass (fwd,
    bwd) reads from DRAM (``none``), while fwd+bwd can re-read in its backward what its forward left in L2; a hot
    timing keeps it in L2. A given copy reference is kept as given, its GB/s beside its description."""
    ctx = _ctx(1000.0, "cuda")

    def resident(pass_, timing):
        got = group.cache_metrics(_case("eager", pass_=pass_, device="cuda", timing=timing), 8192, True, ctx,
                                  dict(PLANTED_COPY))
        assert got["copy_same_size_gbps"] == 100.0
        assert got["copy_same_size"] == {"method": "a planted copy reference"}
        return got["cache_resident"]

    assert [resident(p, "cold") for p in ("fwd", "bwd", "fwd+bwd")] == ["none", "none", "L2"]
    assert resident("fwd", "hot") == "L2"


def test_a_cpu_case_fits_one_l2_per_thread_then_the_last_level_cache(monkeypatch):
    """Planted CPU caches (1 MiB L2 per core, 8 MiB last level): 1.5 MiB fits the L2s of two threads but not one
    thread's (then the LLC); 16 MiB fits neither. The record keeps the working set and the caches it was judged by."""
    caches = {"l2_bytes": 2**20, "llc_bytes": 8 * 2**20, "source": "planted"}
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": dict(caches))
    ctx = _ctx()

    def metrics(nbytes, threads):
        return group.cache_metrics(dataclasses.replace(_case("eager"), threads=threads), nbytes, True, ctx,
                                   dict(PLANTED_COPY))

    two = metrics(3 * 2**19, 2)
    assert two["cache_resident"] == "L2"
    assert two["working_set_bytes"] == 3 * 2**19 and two["cache_bytes"] == caches
    assert metrics(3 * 2**19, 1)["cache_resident"] == "LLC"
    assert metrics(16 * 2**20, 2)["cache_resident"] == "none"


# --- the error check: the eager module of the same state, in float64, on the same inputs -----------------------------

def _float64_errors(prep):
    """The errors of ``prep``'s outputs and gradients against the eager module, computed here the plain way: that
    module built again, given the state ``prep`` was built with, in float64 on float64 copies of its inputs."""
    from normbench.measure.error import compare

    ref = prep.spec.create(prep.num_features, layout=prep.shape.layout)
    ref.load_state_dict(prep.state)
    ref = ref.double().train(prep.mode == "train")
    xs = [x.detach().double().requires_grad_(True) for x in prep.inputs]
    y = ref(*xs)
    y = [y] if isinstance(y, torch.Tensor) else list(y)
    out = prep.forward()
    gouts = [torch.randn(o.shape, generator=torch.Generator().manual_seed(1)) for o in out][:1]
    params = [p for p in ref.parameters() if p.requires_grad]
    want = torch.autograd.grad(y[:1], xs + params, [g.double() for g in gouts], allow_unused=True)
    got = torch.autograd.grad(out[:1], prep.targets, gouts, allow_unused=True)
    k = len(xs)
    return {"y": compare(out, y), "dx": compare(got[:k], want[:k]), "dw": compare(got[k:], want[k:])}


@pytest.mark.parametrize("norm, layout, dims, mode", [
    ("weight_norm", "tokens", (4, 8, 16), "train"),     # a Linear of random initial weights: the state matters
    ("rmsnorm", "images", (2, 8, 4, 4), "train"),       # normalised over the channels (dim 1), not the last dim
    ("batchnorm", "images", (4, 8, 2, 2), "train"),     # batch statistics
    ("batchnorm", "images", (4, 8, 2, 2), "eval"),      # running statistics
])
def test_the_error_check_is_against_the_eager_module_of_the_same_state_in_float64(norm, layout, dims, mode):
    """A float32 module's output and gradients differ from float64's by rounding only: above zero (so the reference
    really ran in float64), far below 1e-4 relative (so it is the same function: same state, layout and mode); each
    part is that of its own tensors (the input gradient alone in ``dx``), as computed here."""
    from normbench.discovery import REGISTRY

    shape = Shape(f"tiny-{layout}", layout, dims, "quick")
    prep = group.Prepared(REGISTRY.get(norm), "eager", shape, "float32", "cpu", mode=mode)
    err = prep.errors()
    assert set(err) == {"y", "dx", "dw"}
    want = _float64_errors(prep)
    for part in ("y", "dx", "dw"):
        assert 0 < err[part]["max_rel"] < 1e-4, (part, err)
        assert err[part]["max_abs"] == pytest.approx(want[part]["max_abs"], rel=1e-6), part


def test_the_error_check_skips_a_parameter_the_output_does_not_use():
    """A module with a parameter its output never uses (the unused bias): no gradient reaches it, in float32 or in
    float64; the check compares the others and does not fail."""
    from test_mutation_group import _UnusedBias

    from normbench.discovery import REGISTRY

    spec = dataclasses.replace(REGISTRY.get("rmsnorm"), factory=lambda c, layout="tokens", **kw: _UnusedBias(c))
    prep = group.Prepared(spec, "eager", SHAPE, "float32", "cpu")
    err = prep.errors()
    for part in ("y", "dx", "dw"):
        assert 0 < err[part]["max_rel"] < 1e-4, (part, err)


def _inplace_rmsnorm(eager):
    """An in-place, forward-only rmsnorm kernel (as flashinfer's): it writes the result into its input."""
    from normbench.measure.adapters._base import _Adapter

    def call(m, x):
        with torch.no_grad():
            x.copy_(torch.nn.functional.rms_norm(x, (m.num_features,), m.weight, m.eps))
        return x

    return _Adapter(eager, call)


@pytest.fixture
def inplace_native(monkeypatch):
    b = baselines.REGISTRY[("native", "rmsnorm")]
    monkeypatch.setitem(baselines.REGISTRY, ("native", "rmsnorm"),
                        dataclasses.replace(b, build=_inplace_rmsnorm, inplace_inputs=True, forward_only=True))


def test_an_inplace_kernels_error_check_runs_it_on_copies_and_has_no_gradients(inplace_native):
    """The in-place kernel's output is checked (rounding only against float64), it has no gradients to check, and the
    inputs it would overwrite are the ones the reference saw, unchanged, after the check."""
    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("rmsnorm"), "native", SHAPE, "float32", "cpu")
    before = [x.detach().clone() for x in prep.inputs]
    err = prep.errors()
    assert set(err) == {"y", "dx", "dw"} and err["dx"] is None and err["dw"] is None
    assert 0 < err["y"]["max_rel"] < 1e-4
    assert len(prep.inputs) == len(before)
    for x, b in zip(prep.inputs, before, strict=True):
        assert torch.equal(x.detach(), b)


def test_an_inplace_kernel_is_timed_on_the_same_data_every_repetition(inplace_native):
    """Its forward pass restores the inputs, untimed, before each repetition: every call normalises the data the
    module was built with (the rmsnorm of the original inputs, not of the last output)."""
    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("rmsnorm"), "native", SHAPE, "float32", "cpu")
    x0 = prep.inputs[0].detach().clone()
    want = torch.nn.functional.rms_norm(x0, (64,), prep.module.weight.detach(), prep.module.eps)
    fn, pre = prep.pass_fns("fwd")
    assert pre is not None
    for _ in range(3):
        pre()
        [y] = fn()
        assert torch.equal(y.detach(), want)


# --- the timing label: a record says what the timer did ---------------------------------------------------------------

def test_a_timing_is_recorded_only_under_the_label_of_what_the_timer_did():
    """cold needs the timer's report of the planned L2 flush; a flushed timing is never hot. The refusals name the case
    and what was planned against what was done."""
    cold = _case("eager", device="cuda", timing="cold")          # plans the "zero" flush
    hot = _case("eager", device="cuda", timing="hot")
    assert cold.flush == "zero"
    for ok_case, host in ((cold, {"l2_flush": "zero"}), (hot, None), (hot, {}), (hot, {"l2_flush": None})):
        group.check_timing_label(ok_case, host)                 # nothing raised
    with pytest.raises(group.MislabelledTiming) as no_flush:
        group.check_timing_label(cold, {"host_s": 1e-5})
    name = "rmsnorm/eager/tokens-4x8x64/float32/fwd"
    assert str(no_flush.value) == (f"{name}/cold: planned cold (L2 flushed before each call) but the timer flushed "
                                   "nothing: a hot timing is never recorded as cold")
    with pytest.raises(group.MislabelledTiming) as no_host:
        group.check_timing_label(cold, None)
    assert str(no_host.value) == str(no_flush.value)
    with pytest.raises(group.MislabelledTiming) as other:
        group.check_timing_label(cold, {"l2_flush": "rand"})
    assert str(other.value) == f"{name}/cold: planned the 'zero' flush, the timer ran 'rand'"
    with pytest.raises(group.MislabelledTiming) as flushed:
        group.check_timing_label(hot, {"l2_flush": "zero"})
    assert str(flushed.value) == f"{name}/hot: planned hot but the timer flushed L2 (zero)"


# --- what a norm returns, and the inputs it is given ------------------------------------------------------------------

def test_a_norm_returning_something_other_than_tensors_is_named_by_its_type():
    assert group._tensors((torch.ones(1), "x", torch.zeros(2)))[1].shape == (2,)
    with pytest.raises(TypeError, match=r"^a norm must return a tensor or a tuple of tensors, got int$"):
        group._tensors(5)


@pytest.mark.parametrize("norm, n", [("rmsnorm", 1), ("add_rmsnorm", 2), ("qk_norm", 2)])
def test_a_residual_or_attention_norm_gets_two_inputs_and_the_others_one(norm, n):
    """A residual norm takes (x, residual), an attention norm (q, k); each input has the case's shape and dtype and
    is a leaf the backward differentiates."""
    from normbench.discovery import REGISTRY

    spec = REGISTRY.get(norm)
    prep = group.Prepared(spec, "eager", SHAPE, "bfloat16", "cpu")
    assert len(prep.inputs) == n
    for x in prep.inputs:
        assert x.shape == prep.dims and x.dtype == torch.bfloat16 and x.is_leaf and x.requires_grad
    assert prep.targets[:n] == prep.inputs


# --- the upstream gradient: one fixed sample per group ----------------------------------------------------------------

def test_the_upstream_gradient_is_the_same_whatever_the_global_random_state():
    """Two groups built alike get the same upstream gradient, so the same input gradient, whatever else drew from the
    global random generator in between: the comparison of two backends' backward passes is of the same work."""
    from normbench.discovery import REGISTRY

    spec = REGISTRY.get("rmsnorm")
    first = group.Prepared(spec, "eager", SHAPE, "float32", "cpu")
    a = first.backward(first.forward())
    torch.randn(1000)                                            # the global generator moves on
    second = group.Prepared(spec, "eager", SHAPE, "float32", "cpu")
    torch.manual_seed(123)
    b = second.backward(second.forward())
    assert torch.equal(first.inputs[0], second.inputs[0])
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    again = first.backward(first.forward())                      # and the same one on every call of one group
    assert torch.equal(again[0], a[0])


def test_the_upstream_gradient_has_each_outputs_shape_dtype_and_device():
    """A bfloat16 group's backward receives a bfloat16 upstream gradient, as a bfloat16 training step's would (not a
    float32 one cast by autograd): one per output, of its shape, on its device."""
    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("add_rmsnorm"), "eager", SHAPE, "bfloat16", "cpu")
    outs = prep.forward()
    prep.backward(outs)
    assert len(prep._gouts) == len(outs) == 2
    for g, o in zip(prep._gouts, outs, strict=True):
        assert (g.shape, g.dtype, g.device) == (o.shape, torch.bfloat16, o.device)


class _NoGrad(torch.nn.Module):
    """A norm computed without autograd (as an inference kernel is)."""

    def __init__(self, c):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(c))

    def forward(self, x):
        with torch.no_grad():
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_a_norm_whose_output_needs_no_gradient_has_no_backward_pass_and_says_so():
    from normbench.discovery import REGISTRY

    spec = dataclasses.replace(REGISTRY.get("rmsnorm"), factory=lambda c, layout="tokens", **kw: _NoGrad(c))
    prep = group.Prepared(spec, "eager", SHAPE, "float32", "cpu")
    with pytest.raises(group.Unsupported, match=r"^no output of this norm requires grad, so it has no backward pass$"):
        prep.backward(prep.forward())
    err = prep.errors()                                          # the output is still checked, the gradients not
    assert err["y"]["max_rel"] < 1e-4 and err["dx"] is None and err["dw"] is None


def test_a_rehearsal_measures_no_gpu_memory(rehearsal):  # noqa: F811
    """On the rehearsal's simulated GPU there is no GPU allocator to read: the record's peak memory is None, not the
    CPU's the modules run on (what the forward saves for backward is counted from the tensors themselves)."""
    [rec] = group.measure_group([_case("eager", pass_="fwd+bwd", device="cuda")], _ctx(1000.0, "cuda"))
    assert rec["metrics"]["peak_mem_bytes"] is None
    assert rec["metrics"]["saved_bytes"] >= N * F32


# --- a backward repetition's untimed forward --------------------------------------------------------------------------

def test_a_backward_repetition_drops_the_last_forwards_outputs_before_the_next_forward():
    """``bwd`` runs a forward untimed before each timed backward: the previous repetition's outputs (and the graph
    they hold) are released before that forward runs, so one repetition's graph is alive at a time."""
    import weakref

    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("rmsnorm"), "eager", SHAPE, "float32", "cpu")
    real, outs, alive = prep.forward, [], []

    def forward():
        alive.append([r() is not None for r in outs])
        out = real()
        outs.append(weakref.ref(out[0]))
        return out

    prep.forward = forward
    fn, pre = prep.pass_fns("bwd")
    for _ in range(3):
        pre()
        grads = fn()
        assert grads[0].shape == prep.dims
    assert alive == [[], [False], [False, False]]


def test_a_call_that_waits_for_the_gpu_is_flagged_host_sync_in_its_record(rehearsal):  # noqa: F811
    """PowerNorm's forward reads a value back to the host (a synchronisation the probe finds): its record on
    (simulated) CUDA names the operators and carries the ``host_sync`` flag; RMSNorm's carries neither."""
    [sync] = group.measure_group([_case("eager", norm="powernorm", device="cuda")], _ctx(1000.0, "cuda"))
    assert sync["metrics"]["host_syncs"] and "host_sync" in sync["flags"]
    assert all(op in sync["flag_reasons"]["host_sync"] for op in sync["metrics"]["host_syncs"])
    [plain] = group.measure_group([_case("eager", device="cuda")], _ctx(1000.0, "cuda"))
    assert plain["metrics"]["host_syncs"] == {} and "host_sync" not in plain["flags"]



# --- building a group: what cannot run here is refused with the reason -----------------------------------------------

def test_a_group_that_cannot_run_here_is_refused_with_its_reason(monkeypatch):
    """A layout the norm lacks, a backend it does not have, a baseline's own limits (its dtypes, its layouts, a CUDA
    library on a CPU) and a backend whose availability probe says no: each an ``Unsupported`` naming why."""
    from normbench.discovery import REGISTRY
    from normbench.registry import Backend

    rms = REGISTRY.get("rmsnorm")
    images = Shape("tiny-images", "images", (2, 8, 4, 4), "quick")

    def refused(spec, backend, shape=SHAPE, dtype="float32"):
        with pytest.raises(group.Unsupported) as exc:
            group.Prepared(spec, backend, shape, dtype, "cpu")
        return str(exc.value)

    assert refused(REGISTRY.get("groupnorm"), "eager") == "groupnorm does not support the tokens layout"
    assert refused(rms, "nope") == "rmsnorm has no backend 'nope'"
    assert refused(rms, "flashinfer") == ("backend flashinfer unavailable: flashinfer's rmsnorm supports bfloat16, "
                                          "float16, not float32")
    assert refused(rms, "native", images) == ("backend native unavailable: native's rmsnorm supports the tokens "
                                              "layout only")
    b = baselines.REGISTRY[("native", "rmsnorm")]
    monkeypatch.setitem(baselines.REGISTRY, ("native", "rmsnorm"), dataclasses.replace(b, requires_cuda=True))
    assert refused(rms, "native") == ("backend native unavailable: native kernels need a CUDA device (this run is "
                                      "on cpu)")
    probe = Backend("planted", build=lambda eager, spec=None: eager, available=lambda: "no planted device here")
    planted = dataclasses.replace(rms, extra_backends=(probe,))
    assert refused(planted, "planted") == "backend planted unavailable: no planted device here"
    ok = dataclasses.replace(rms, extra_backends=(dataclasses.replace(probe, available=lambda: None),))
    assert group.Prepared(ok, "planted", SHAPE, "float32", "cpu").module is not None


# --- the bytes model: what a pass must move, from the built module ---------------------------------------------------

IMAGES = Shape("tiny-images", "images", (2, 8, 4, 4), "quick")


@pytest.mark.parametrize("norm, shape, dtype, mode, want", [
    # statistics per row of features: 4x8 rows of 64, one (RMS) or two (mean, variance) per row
    ("rmsnorm", SHAPE, "float32", "train", dict(formula="rowwise", n_elements=N, inputs=1, elem_bytes=4,
                                                 param_bytes=64 * 4, stat_rows=32, stats_per_row=1)),
    ("rmsnorm", SHAPE, "bfloat16", "train", dict(formula="rowwise", n_elements=N, inputs=1, elem_bytes=2,
                                                  param_bytes=64 * 2, stat_rows=32, stats_per_row=1)),
    ("layernorm", SHAPE, "float32", "train", dict(formula="rowwise", n_elements=N, inputs=1, elem_bytes=4,
                                                   param_bytes=2 * 64 * 4, stat_rows=32, stats_per_row=2)),
    # q and k: each its own 32 rows
    ("qk_norm", SHAPE, "float32", "train", dict(formula="rowwise", n_elements=N, inputs=2, elem_bytes=4,
                                                 param_bytes=4, stat_rows=2 * 32, stats_per_row=1)),
    # x + residual normalised once: 32 rows of statistics for two inputs
    ("add_rmsnorm", SHAPE, "float32", "train", dict(formula="residual_rowwise", n_elements=N, inputs=2,
                                                     elem_bytes=4, param_bytes=64 * 4, stat_rows=32, stats_per_row=1)),
    # 8 groups of each of the 2 images
    ("groupnorm", IMAGES, "float32", "train", dict(formula="groupwise", n_elements=256, inputs=1, elem_bytes=4,
                                                    param_bytes=2 * 8 * 4, stat_rows=2 * 8, stats_per_row=2)),
    # batch statistics per channel in training; none in eval (the running ones are used), which the model says
    ("batchnorm", IMAGES, "float32", "train", dict(formula="channelwise", n_elements=256, inputs=1, elem_bytes=4,
                                                    param_bytes=2 * 8 * 4, stat_rows=8, stats_per_row=2,
                                                    running_values=2 * 8)),
    ("batchnorm", IMAGES, "float32", "eval", dict(formula="channelwise", n_elements=256, inputs=1, elem_bytes=4,
                                                   param_bytes=2 * 8 * 4, stat_rows=0, stats_per_row=2,
                                                   running_values=2 * 8, eval_mode=1)),
    # eval of a norm without running statistics is the same computation as training
    ("rmsnorm", SHAPE, "float32", "eval", dict(formula="rowwise", n_elements=N, inputs=1, elem_bytes=4,
                                                param_bytes=64 * 4, stat_rows=32, stats_per_row=1)),
    ("dyt", SHAPE, "float32", "train", dict(formula="pointwise", n_elements=N, inputs=1, elem_bytes=4,
                                             param_bytes=(2 * 64 + 1) * 4, stat_rows=0, stats_per_row=0)),
    ("weight_norm", SHAPE, "float32", "train", dict(formula="weight_reparam", n_elements=N, inputs=1, elem_bytes=4,
                                                     param_bytes=(64 * 64 + 64 + 64) * 4, stat_rows=0,
                                                     stats_per_row=0, memory_bound=False)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_bytes_model_counts_the_inputs_parameters_and_statistics_of_the_built_module(norm, shape, dtype, mode,
                                                                                        want):
    from normbench.discovery import REGISTRY

    want = dict(want)
    formula, memory_bound = want.pop("formula"), want.pop("memory_bound", True)
    params = {"running_values": 0, **want}
    prep = group.Prepared(REGISTRY.get(norm), "eager", shape, dtype, "cpu", mode=mode)
    assert prep.bytes_model() == {"formula": formula, "params": params, "memory_bound": memory_bound}


def test_a_group_is_built_in_training_mode_unless_told_otherwise():
    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("batchnorm"), "eager", IMAGES, "float32", "cpu")
    assert prep.mode == "train" and prep.module.training
    assert "eval_mode" not in prep.bytes_model()["params"]
    assert not group.Prepared(REGISTRY.get("batchnorm"), "eager", IMAGES, "float32", "cpu", mode="eval").module.training


def test_each_compile_group_starts_with_a_fresh_compile_cache(dynamo_without_inductor):
    """Dynamo's recompile limit set to 1: two compile groups of different widths would share one cache entry list
    and the second would run eagerly; each group starts afresh, so both stay compiled."""
    import torch._dynamo.config as dconfig

    with dconfig.patch(recompile_limit=1):
        for width in (32, 48):
            shape = Shape(f"tiny-{width}", "tokens", (8, width), "quick")
            [rec] = group.measure_group([dataclasses.replace(_case("compile"), shape=shape)], _ctx())
            assert rec["metrics"]["compile"]["stayed_compiled"] and "fell_back" not in rec["flags"], width


# --- refreshing the ceiling during a sweep -------------------------------------------------------------------------

@pytest.fixture
def new_ceilings(monkeypatch):
    """``ceiling.measure`` answering the next planted ceiling (measured 10 s before), with what it was asked."""
    import time

    from normbench.measure import ceiling

    asked: list = []
    values = iter([80.0, 200.0, 90.0])

    def measure(device="cpu", fresh=False):
        asked.append((device, fresh))
        return ceiling.Ceiling(next(values), "a planted fresh ceiling", str(device), spread=0.01, attempt=1,
                               measured_at=time.time() - 10.0)

    monkeypatch.setattr(ceiling, "measure", measure)
    return asked


def test_the_ceiling_is_measured_again_only_once_it_is_older_than_the_limit(new_ceilings):
    """A context whose ceiling was measured at t=1000 s: with a limit of 30 s (half the default) still fresh at exactly
    1030 s (the same context back), measured again (fresh, not from the cache) one second later. The new context
    keeps everything but the ceiling: its value, method, spread, when it was measured (10 s before it was asked for),
    and the best so far."""
    from normbench.measure import ceiling

    ctx = dataclasses.replace(_ctx(100.0), ceiling_at=1000.0, impl_hashes={"x": "h"})
    assert group.refresh_context(ctx, "cpu", every_s=30.0, now=lambda: 1030.0) is ctx
    assert group.refresh_context(ctx, "cpu", now=lambda: 1000.0 + ceiling.RECHECK_S) is ctx   # the default limit
    assert new_ceilings == []
    new = group.refresh_context(ctx, "cpu", every_s=30.0, now=lambda: 1031.0)
    assert new_ceilings == [("cpu", True)]
    assert (new.ceiling_gbps, new.ceiling_method, new.ceiling_spread) == (80.0, "a planted fresh ceiling", 0.01)
    assert new.ceiling_at == pytest.approx(1021.0, abs=5.0)
    assert new.ceiling_best_gbps == 100.0                       # the first measurement stays the best
    assert (new.run_id, new.provenance, new.impl_hashes, new.settings) == (ctx.run_id, ctx.provenance,
                                                                           ctx.impl_hashes, ctx.settings)
    later = group.refresh_context(new, "cuda", now=lambda: 1031.0 + ceiling.RECHECK_S + 1.0)
    assert new_ceilings[-1] == ("cuda", True) and later.ceiling_gbps == 200.0 and later.ceiling_best_gbps == 200.0
    last = group.refresh_context(later, "cpu", every_s=0.0, now=lambda: 1e6)
    assert last.ceiling_gbps == 90.0 and last.ceiling_best_gbps == 200.0


# --- build_record: a record from planted samples, references and reports ----------------------------------------------
# The samples are given, so every number of the record follows from them: 4.8, 4.9, 5.0, 5.1, 5.2 µs (median 5 µs,
# quartiles 4.9 and 5.1 µs by linear interpolation), and the bytes RMSNorm's rowwise model moves for the pass.

SAMPLES = [5.2e-6, 4.8e-6, 5.0e-6, 5.1e-6, 4.9e-6]
RMS_PARAMS = {"n_elements": N, "inputs": 1, "elem_bytes": 4, "param_bytes": 64 * 4, "stat_rows": 32,
              "stats_per_row": 1, "running_values": 0}
QUIET = {"load1": 0.25, "cores": 2, "background_load_per_core": 0.0}


@pytest.fixture
def planted_caches(monkeypatch):
    """CPU caches of 1 MiB (L2) and 8 MiB: RMSNorm's few KiB are L2-resident."""
    caches = {"l2_bytes": 2**20, "llc_bytes": 8 * 2**20, "source": "planted"}
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": dict(caches))
    return caches


def _prep(norm="rmsnorm", backend="eager", shape=SHAPE):
    from normbench.discovery import REGISTRY

    return group.Prepared(REGISTRY.get(norm), backend, shape, "float32", "cpu")


def _build(case, ctx, *, prep=None, samples=SAMPLES, err=None, copy_gbps=20.0, load=QUIET, **kw):
    copy_ref = {"gbps": copy_gbps, "method": "a planted copy"} if copy_gbps else None
    err = err if err is not None else {"y": {"max_abs": 1e-7, "max_rel": 1e-7}, "dx": {"max_abs": 2e-7, "max_rel":
                                       2e-7}, "dw": {"max_abs": 3e-7, "max_rel": 3e-7}}
    return group.build_record(prep or _prep(), case, ctx, list(samples), False, err, kw.pop("peak", 1234),
                              kw.pop("saved", 5678), dict(load), copy_ref=copy_ref, **kw)


def test_a_records_metrics_follow_from_its_samples_its_ceiling_and_its_references(planted_caches):
    from normbench.measure import bytes_model as bm
    from normbench.records.provenance import utc_now

    ctx = dataclasses.replace(_ctx(50.0), datasheet_peak_gbps=100.0, ceiling_spread=0.02, ceiling_best_gbps=60.0)
    ctx.provenance["timestamp"] = "2000-01-01T00:00:00Z"         # when the context was made, long before
    case = _case("eager", pass_="fwd+bwd")
    before = utc_now()
    rec = _build(case, ctx)
    m = rec["metrics"]
    nbytes = bm.bytes_moved("rowwise", "fwd+bwd", RMS_PARAMS)
    gbps = nbytes / 5.0e-6 / 1e9
    assert rec["config"]["bytes_model"] == {"formula": "rowwise", "params": RMS_PARAMS, "memory_bound": True}
    assert m["time_median_s"] == pytest.approx(5.0e-6) and m["time_min_s"] == pytest.approx(4.8e-6)
    assert (m["time_q25_s"], m["time_q75_s"]) == (pytest.approx(4.9e-6), pytest.approx(5.1e-6))
    assert m["time_iqr_s"] == pytest.approx(0.2e-6) and m["reps"] == 5
    assert m["bytes_moved"] == nbytes and m["gbps"] == nbytes / m["time_median_s"] / 1e9 == pytest.approx(gbps)
    assert (m["ceiling_gbps"], m["ceiling_method"], m["datasheet_peak_gbps"]) == (50.0, "test ceiling", 100.0)
    assert m["pct_of_ceiling"] == pytest.approx(100.0 * gbps / 50.0)
    assert m["pct_of_datasheet"] == pytest.approx(100.0 * gbps / 100.0)
    assert m["copy_same_size_gbps"] == 20.0 and m["copy_same_size"] == {"method": "a planted copy"}
    assert m["pct_of_same_size_copy"] == pytest.approx(100.0 * gbps / 20.0)
    assert (m["working_set_bytes"], m["cache_bytes"], m["cache_resident"]) == (nbytes, planted_caches, "L2")
    assert (m["peak_mem_bytes"], m["saved_bytes"], m["graph_used"]) == (1234, 5678, False)
    assert m["err"] == {"y": {"max_abs": 1e-7, "max_rel": 1e-7}, "dx": {"max_abs": 2e-7, "max_rel": 2e-7},
                        "dw": {"max_abs": 3e-7, "max_rel": 3e-7}}
    assert m["err_reference"] == "eager module in float64 on the same inputs"
    assert m["noise"] == {**QUIET, "ceiling_spread": 0.02, "ceiling_drop": pytest.approx(1.0 - 50.0 / 60.0),
                          "rel_iqr": pytest.approx(0.2 / 5.0)}
    assert rec["flags"] == [] and rec["flag_reasons"] == {}
    assert "host_s" not in m and "flops" not in m and "compile" not in m and "page_faults_per_rep" not in m
    assert rec["impl_hash"] == baselines.impl_hash(_prep().spec, "eager") and "baseline" not in rec["provenance"]
    assert rec["kind"] == "kernel" and list(ctx.impl_hashes.values()) == [rec["impl_hash"]]   # hashed once a sweep
    assert rec["provenance"]["timestamp"] >= before and rec["provenance"]["command"] == "pytest"   # built now


def test_a_forward_records_error_has_no_gradients_and_a_compute_bound_record_no_percentages(planted_caches):
    """A forward pass computes no gradient: its record's dx and dw are None whatever the group's check found. A norm
    whose cost is its matmul (weight_norm) is not memory-bound: no percentage of any bandwidth, and never suspect."""
    ctx = dataclasses.replace(_ctx(1e-3), datasheet_peak_gbps=100.0)
    fwd = _build(_case("eager", pass_="fwd"), _ctx())
    assert fwd["metrics"]["err"] == {"y": {"max_abs": 1e-7, "max_rel": 1e-7}, "dx": None, "dw": None}
    wn = _build(_case("eager", norm="weight_norm", pass_="fwd"), ctx, prep=_prep("weight_norm"), copy_gbps=1e-3)
    m = wn["metrics"]
    assert (m["pct_of_ceiling"], m["pct_of_datasheet"], m["pct_of_same_size_copy"]) == (None, None, None)
    assert m["gbps"] > 1000 * ctx.ceiling_gbps and "suspect" not in wn["flags"]


def test_a_bandwidth_above_the_copy_ceiling_or_the_same_size_copy_is_flagged_suspect_with_both_numbers(monkeypatch):
    """Past DRAM (no cache holds the working set): judged by the copy ceiling (a hot timing says so); in L2: by the
    same-size copy timed in the same place."""
    from normbench.measure import bytes_model as bm

    gbps = bm.bytes_moved("rowwise", "fwd", RMS_PARAMS) / 5.0e-6 / 1e9      # 3.3 GB/s
    tiny = {"l2_bytes": 1024, "llc_bytes": 2048, "source": "planted"}
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": dict(tiny))
    hot = _build(_case("eager"), _ctx(1.0))
    assert hot["metrics"]["cache_resident"] == "none" and hot["flags"] == ["suspect"]
    assert hot["flag_reasons"]["suspect"] == (f"{gbps:.3g} GB/s is above the measured copy ceiling 1 GB/s: the data "
                                              "was likely cache-resident (hot timing)")
    cold = _build(_case("eager", timing="cold"), _ctx(1.0), host={"l2_flush": "zero"})
    assert cold["flag_reasons"]["suspect"] == (f"{gbps:.3g} GB/s is above the measured copy ceiling 1 GB/s: the "
                                               "data was likely cache-resident")
    assert "suspect" not in _build(_case("eager"), _ctx(gbps * 1.01))["flags"]
    monkeypatch.setattr(reference, "cache_sizes", lambda device="cpu": {"l2_bytes": 2**20, "llc_bytes": 2**23})
    l2 = _build(_case("eager"), _ctx(50.0), copy_gbps=2.0)
    assert l2["flag_reasons"]["suspect"] == (f"{gbps:.3g} GB/s is above a copy of the same bytes timed in the same "
                                             "place (2 GB/s, L2-resident): more than a copy's speed means a broken "
                                             "timing or skipped work")
    assert "suspect" not in _build(_case("eager"), _ctx(50.0), copy_gbps=gbps * 1.01)["flags"]


def test_a_nonfinite_output_or_gradient_flags_the_record_naming_each_part(planted_caches):
    bad = {"max_abs": None, "max_rel": None, "nonfinite": True}
    ok = {"max_abs": 1e-7, "max_rel": 1e-7}
    y = _build(_case("eager", pass_="fwd+bwd"), _ctx(), err={"y": bad, "dx": ok, "dw": ok})
    assert y["flags"] == ["non_finite"]
    assert y["flag_reasons"]["non_finite"] == ("the output contain NaN or inf: the timing is of a broken computation, "
                                               "not a result")
    grads = _build(_case("eager", pass_="bwd"), _ctx(), err={"y": ok, "dx": bad, "dw": bad})
    assert grads["flag_reasons"]["non_finite"].startswith("the input gradient and the parameter gradient contain NaN")
    # a forward pass computes no gradient: a NaN there is not this record's
    assert "non_finite" not in _build(_case("eager", pass_="fwd"), _ctx(), err={"y": ok, "dx": bad, "dw": bad})["flags"]


def test_a_busy_machine_a_spread_timing_or_a_fallen_ceiling_flags_the_record_noisy(planted_caches):
    busy = {"load1": 3.0, "cores": 2, "background_load_per_core": 1.0}
    rec = _build(_case("eager"), _ctx(), load=busy)
    assert rec["flags"] == ["noisy"] and rec["metrics"]["noise"]["background_load_per_core"] == 1.0
    assert rec["flag_reasons"]["noisy"] == "background load 1.00 per core (load average 3.00 on 2 cores) is above 0.5"
    spread = _build(_case("eager"), _ctx(), samples=[1e-6, 2e-6, 5e-6, 8e-6, 9e-6])    # IQR 6 µs over a 5 µs median
    assert spread["metrics"]["noise"]["rel_iqr"] == pytest.approx(6.0 / 5.0)
    assert "spread by 120% of the median" in spread["flag_reasons"]["noisy"]
    fell = _build(_case("eager"), dataclasses.replace(_ctx(10.0), ceiling_best_gbps=40.0))
    assert fell["metrics"]["noise"]["ceiling_drop"] == pytest.approx(0.75)
    assert "75% below the run's best" in fell["flag_reasons"]["noisy"]
    assert _build(_case("eager"), dataclasses.replace(_ctx(), ceiling_best_gbps=0.0))["metrics"]["noise"][
        "ceiling_drop"] is None


def test_a_gpu_records_host_report_becomes_its_metrics_and_flags(rehearsal):  # noqa: F811
    """What the CUDA timer reported of the host: its time per call, the keep-ahead check, the clock, the operators
    that synchronise, and the host-bound / low-clock / host-sync verdicts as flags; a rehearsal says so; a GPU record
    is judged by the GPU's spread limit (5 %)."""
    host = {"host_s": 2e-6, "keep_ahead": {"batches": 2, "failed": 0}, "clock": {"sm_hz": 1.0}, "host_syncs": {},
            "host_bound": "planted host-bound reason", "low_clock": "planted low-clock reason",
            "host_sync": "planted host-sync reason", "l2_flush": "zero"}
    rec = _build(_case("eager", device="cuda", timing="cold"), _ctx(1000.0, "cuda"), host=host,
                 samples=[100e-6, 101e-6, 106e-6, 110e-6, 112e-6])
    m = rec["metrics"]
    assert (m["host_s"], m["keep_ahead"], m["clock"], m["host_syncs"]) == (2e-6, {"batches": 2, "failed": 0},
                                                                           {"sm_hz": 1.0}, {})
    for flag in ("host_bound", "low_clock", "host_sync"):
        assert rec["flag_reasons"][flag] == f"planted {flag.replace('_', '-')} reason"
    assert "rehearsal" in rec["flags"] and "noisy" in rec["flags"]              # 8.5 % spread: above the GPU's 5 %
    plain = _build(_case("eager", device="cuda"), _ctx(1000.0, "cuda"), host={"host_s": 1e-6})
    assert "clock" not in plain["metrics"] and "host_syncs" not in plain["metrics"]
    assert not {"host_bound", "low_clock", "host_sync"} & set(plain["flags"])


def test_page_faults_a_baselines_provenance_and_a_compile_fallback_reach_the_record(planted_caches, monkeypatch):
    from normbench.kernels.compile_watch import CompileReport

    rec = _build(_case("eager"), _ctx(), faults=[3, 7, 4])
    assert rec["metrics"]["page_faults_per_rep"] == 4
    assert rec["metrics"]["page_fault_bytes_per_rep"] == 4 * group.PAGE_BYTES
    native = _build(_case("native"), _ctx(), prep=_prep(backend="native"))
    assert native["provenance"]["baseline"] == baselines.get("native", "rmsnorm").provenance()
    assert native["impl_hash"] == baselines.impl_hash(_prep().spec, "native")
    fell = CompileReport(forward_calls=4, compiled_calls=1, graphs=1, frames_failed=0, graph_breaks=0)
    comp = _build(_case("eager"), _ctx(), compile_report=fell)
    assert comp["metrics"]["compile"] == fell.to_dict() and comp["flags"] == ["fell_back"]
    assert comp["flag_reasons"]["fell_back"] == fell.reason()
    stayed = CompileReport(forward_calls=4, compiled_calls=4, graphs=1, frames_failed=0, graph_breaks=0)
    assert _build(_case("eager"), _ctx(), compile_report=stayed)["flags"] == []


def test_a_groups_module_and_inputs_live_where_the_device_seam_puts_them(monkeypatch):
    """The device seam names where a case's tensors live (a GPU's own device; a rehearsal's CPU). A seam answering
    PyTorch's ``meta`` device (the one device besides the CPU this machine has): the module's parameters and buffers,
    the inputs and the forward's outputs are all there, none left on the CPU."""
    from normbench import device as seam
    from normbench.discovery import REGISTRY

    monkeypatch.setattr(seam, "tensor_device", lambda device: "meta")
    for norm in ("rmsnorm", "add_rmsnorm"):
        prep = group.Prepared(REGISTRY.get(norm), "eager", SHAPE, "float32", "cuda")
        assert prep.tdev == "meta"
        tensors = [*prep.inputs, *prep.module.parameters(), *prep.module.buffers(), *prep.forward()]
        assert tensors and {t.device.type for t in tensors} == {"meta"}, norm


@pytest.mark.parametrize("norm, kwargs, groups", [
    ("groupnorm", {"num_groups": 2}, 2),      # the module's own group count, not the default's
    ("instancenorm", {}, 8),                  # one group per channel (8 channels)
])
def test_a_group_norms_statistics_are_one_row_per_sample_and_group(norm, kwargs, groups):
    from normbench.discovery import REGISTRY

    spec = REGISTRY.get(norm)
    spec = dataclasses.replace(spec, default_kwargs={**dict(spec.default_kwargs), **kwargs})
    prep = group.Prepared(spec, "eager", IMAGES, "float32", "cpu")
    model = prep.bytes_model()
    assert model["formula"] == "groupwise" and model["params"]["stat_rows"] == 2 * groups


@pytest.mark.parametrize("norm", ["instancenorm", "evonorm_b0"])
def test_an_instance_norm_over_more_than_32_channels_keeps_one_statistics_row_per_channel(norm):
    """InstanceNorm (and EvoNorm-B0's instance variance) normalises each (sample, channel) over H x W: 64 channels,
    2 samples: 128 rows of statistics, not the 2 x 32 a GroupNorm's default group count would give."""
    from normbench.discovery import REGISTRY

    shape = Shape("tiny-images-64", "images", (2, 64, 2, 2), "quick")
    prep = group.Prepared(REGISTRY.get(norm), "eager", shape, "float32", "cpu")
    assert prep.bytes_model()["params"]["stat_rows"] == 2 * 64


def test_a_memory_bound_record_without_a_given_copy_reference_times_its_own(planted_caches, copies):
    """Given no copy reference, a memory-bound case's is timed here, in the case's timing mode and under the run's
    id; a compute-bound case's is not timed at all."""
    from normbench.measure import bytes_model as bm

    ctx = _ctx()
    rec = _build(_case("eager"), ctx, copy_gbps=None)
    nbytes = bm.bytes_moved("rowwise", "fwd", RMS_PARAMS)
    assert copies == [(nbytes, "float32")]
    m = rec["metrics"]
    assert m["copy_same_size_gbps"] > 0 and m["copy_same_size"]["bytes_moved"] == nbytes
    assert "timed as the case (hot: perf_counter, nothing flushed, 1 threads)" in m["copy_same_size"]["method"]
    wn = _build(_case("eager", norm="weight_norm"), ctx, prep=_prep("weight_norm"), copy_gbps=None)
    assert copies == [(nbytes, "float32")] and wn["metrics"]["copy_same_size_gbps"] is None


def test_a_bandwidth_of_exactly_ten_times_the_ceiling_is_recorded_and_more_is_refused(planted_caches):
    """The far-above rule refuses a bandwidth more than ``FAR_ABOVE_CEILING`` (10) times the ceiling: exactly 10 times
    is recorded (suspect), a hair more is refused, naming both numbers. The samples are chosen so that the record's
    bandwidth is exactly 10 GB/s; the ceiling is 1 GB/s, then a hair below."""
    import math

    from normbench.measure import bytes_model as bm

    nbytes = bm.bytes_moved("rowwise", "fwd", RMS_PARAMS)
    t = nbytes / 1e10
    for _ in range(100):
        g = nbytes / t / 1e9
        if g == 10.0:
            break
        t = math.nextafter(t, math.inf if g > 10.0 else 0.0)
    assert group.FAR_ABOVE_CEILING == 10.0 and nbytes / t / 1e9 == 10.0
    exact = _build(_case("eager"), _ctx(1.0), samples=[t] * 3, copy_gbps=1e-3)
    assert exact["metrics"]["gbps"] == 10.0 and exact["flags"] == ["suspect"]
    below = math.nextafter(1.0, 0.0)
    with pytest.raises(group.FarAboveCeiling) as exc:
        _build(_case("eager"), _ctx(below), samples=[t] * 3, copy_gbps=1e-3)
    assert str(exc.value) == "10 GB/s is more than 10x the measured ceiling 1 GB/s: a broken timing, not recorded"


def test_a_record_built_without_a_load_reads_the_machines_taking_out_its_own_threads(planted_caches, monkeypatch,
                                                                                     rehearsal):  # noqa: F811
    """Given no load, build_record reads it: a planted load average of 1.8 with 2 compute threads on the CPU leaves
    no background load; on (simulated) CUDA the benchmark's own share is one thread: 0.8 left, over the cores."""
    import os

    monkeypatch.setattr(noise, "load_average", lambda: 1.8)
    cores = os.cpu_count() or 1
    for device, own in (("cpu", 2.0), ("cuda", 1.0)):
        case = dataclasses.replace(_case("eager", device=device), threads=2)
        rec = group.build_record(_prep(), case, _ctx(1000.0, device), list(SAMPLES), False, {"y": None}, None, None,
                                 copy_ref=dict(PLANTED_COPY), host={"host_s": 1e-6} if device == "cuda" else None)
        assert rec["metrics"]["noise"]["load1"] == 1.8
        assert rec["metrics"]["noise"]["background_load_per_core"] == pytest.approx(max(0.0, 1.8 - own) / cores)


def test_noise_reasons_are_joined_and_a_gpu_spread_below_the_event_resolution_is_not_noise(planted_caches, rehearsal):  # noqa: F811
    """Two reasons are joined by "; "; a GPU record whose quartiles differ by less than 1 µs (CUDA events' resolution)
    is not noisy by its spread, even at 9 % of its median; a ceiling below 1 GB/s still has its drop measured."""
    busy = {"load1": 3.0, "cores": 2, "background_load_per_core": 1.0}
    both = _build(_case("eager"), _ctx(), load=busy, samples=[1e-6, 2e-6, 5e-6, 8e-6, 9e-6])
    assert both["flag_reasons"]["noisy"] == ("background load 1.00 per core (load average 3.00 on 2 cores) is above "
                                             "0.5; the repetitions spread by 120% of the median (IQR / median), "
                                             "above 50%")
    tight = _build(_case("eager", device="cuda"), _ctx(1000.0, "cuda"), host={"host_s": 1e-6},
                   samples=[10e-6, 10.1e-6, 10.6e-6, 11e-6, 11.2e-6])
    assert tight["metrics"]["noise"]["rel_iqr"] > 0.05 and "noisy" not in tight["flags"]
    small = _build(_case("eager"), dataclasses.replace(_ctx(0.4), ceiling_best_gbps=0.8))
    assert small["metrics"]["noise"]["ceiling_drop"] == pytest.approx(0.5)


def test_only_a_gpu_record_of_a_rehearsal_is_flagged_rehearsal(planted_caches, rehearsal):  # noqa: F811
    gpu = _build(_case("eager", device="cuda"), _ctx(1000.0, "cuda"), host={"host_s": 1e-6})
    assert gpu["flag_reasons"]["rehearsal"].startswith("measured in a rehearsal")
    assert "rehearsal" not in _build(_case("eager"), _ctx())["flags"]


@pytest.mark.parametrize("backend, passes", [("compile_three_pass", {"fwd": 3, "bwd": 2, "fwd+bwd": 5}),
                                             ("compile_two_pass", {"fwd": 2, "bwd": 2, "fwd+bwd": 4}),
                                             ("eager", {"fwd": None, "bwd": None, "fwd+bwd": None})])
def test_a_softmax_record_counts_the_reads_of_each_row_of_its_pass(planted_caches, backend, passes):
    """A softmax record keeps how many times its pass reads each row: a three-pass forward (max; sum of exp;
    normalise) 3, a two-pass one 2, the backward 2 (y and dy), fwd+bwd their sum; None for an implementation whose
    passes normbench does not know (eager PyTorch). A norm's record has no such count."""
    for pass_, want in passes.items():
        rec = _build(_case(backend, norm="softmax", pass_=pass_), _ctx(), prep=_prep("softmax", backend))
        assert rec["metrics"]["row_passes"] == want, pass_
    assert "row_passes" not in _build(_case("eager"), _ctx())["metrics"]


@pytest.mark.parametrize("pass_, forwards_timed, forwards_untimed", [
    ("fwd", 1, None),          # the forward alone, nothing before it
    ("fwd+bwd", 1, None),      # a forward and its backward, both timed: nothing untimed before
    ("bwd", 0, 1),             # the backward alone: its forward runs untimed before each repetition
])
def test_each_pass_times_what_it_names_and_runs_the_rest_untimed(pass_, forwards_timed, forwards_untimed):
    prep = _prep()
    calls, real = [], prep.forward

    def forward():
        calls.append(1)
        return real()

    prep.forward = forward
    fn, pre = prep.pass_fns(pass_)
    assert (pre is None) is (forwards_untimed is None)
    if pre is not None:
        pre()
        assert len(calls) == forwards_untimed
        calls.clear()
    out = fn()
    assert len(calls) == forwards_timed
    if pass_ == "fwd":
        assert out[0].shape == prep.dims
    else:   # the gradients with respect to the input and the weight
        assert out[0].shape == prep.dims and out[1].shape == (prep.dims[-1],)


def test_an_attention_norm_is_built_for_its_heads():
    """QK-norm normalises each head's vector: on a width of 1000 it sees 15 heads of 64 (``input_shape``), its module
    is built for 64 features and its inputs (q and k) have the heads' shape."""
    shape = Shape("tiny-1000", "tokens", (2, 8, 1000), "quick")
    prep = _prep("qk_norm", shape=shape)
    assert prep.dims == (2, 15, 8, 64) and prep.num_features == 64
    assert [tuple(x.shape) for x in prep.inputs] == [(2, 15, 8, 64)] * 2


def test_a_baseline_for_images_is_built_from_an_eager_module_on_images(monkeypatch):
    """A library's GroupNorm (Liger's, here made runnable on the CPU as the eager module itself) is built from the
    eager module on the images layout, as the case is, not on the default (tokens) layout."""
    from normbench.discovery import REGISTRY

    b = baselines.REGISTRY[("liger", "groupnorm")]
    monkeypatch.setitem(baselines.REGISTRY, ("liger", "groupnorm"), dataclasses.replace(
        b, module="torch", requires_cuda=False, build=lambda eager: eager))
    images = Shape("tiny-images", "images", (2, 8, 4, 4), "quick")
    prep = group.Prepared(REGISTRY.get("groupnorm"), "liger", images, "float32", "cpu")
    assert prep.baseline is baselines.REGISTRY[("liger", "groupnorm")]
    assert prep.module.layout == "images"
    assert tuple(prep.forward()[0].shape) == (2, 8, 4, 4)
