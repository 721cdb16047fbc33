"""#52: ``normbench.measure.group`` where its first mutation run found it untested: the one-backend timing of a GPU
case (``time_pass`` through the device seam's simulated GPU: what reaches the CUDA timer, and the host information
that comes back into the record) and the group count a group-wise norm's statistics are sized by."""

from __future__ import annotations

import pytest
import torch
from test_mutation_headtohead import _case, _ctx, rehearsal  # noqa: F401  (fixtures)

from normbench.measure import group


@pytest.fixture
def cuda_calls(monkeypatch):
    calls: list[dict] = []
    real = group.cuda_timing

    def spy(fn, settings, device, **kw):
        calls.append({"fn": fn, "settings": settings, "device": device, **kw})
        return real(fn, settings, device, **kw)

    monkeypatch.setattr(group, "cuda_timing", spy)
    return calls


@pytest.mark.parametrize("timing, pass_", [("cold", "fwd"), ("hot", "bwd"), ("cold", "fwd+bwd")])
def test_a_gpu_case_is_timed_by_the_cuda_timer_as_the_case_says(cuda_calls, rehearsal, timing, pass_):  # noqa: F811
    case = _case("eager", pass_=pass_, device="cuda", timing=timing, graphs=True)
    from normbench.discovery import REGISTRY

    prep = group.Prepared(REGISTRY.get("rmsnorm"), "eager", case.shape, "float32", "cuda")   # as measure_group does
    settings = _ctx(1000.0, "cuda").settings
    samples, used_graph, host = group.time_pass(prep, case, settings)
    [call] = cuda_calls
    fn, pre = prep.pass_fns(pass_)
    assert call["device"] == "cuda" and call["cold"] is (timing == "cold")
    assert call["settings"] == case.settings(settings)
    assert call["graphs"] is (pass_ != "bwd")   # a backward alone is never captured
    assert (call["pre"] is None) == (pre is None)
    assert samples and all(isinstance(s, float) and s > 0 for s in samples)
    assert set(host) >= {"host_s", "host_syncs", "host_sync"} and host["host_syncs"] == {}
    assert host["host_sync"] is None


def test_a_gpu_record_measured_alone_carries_its_host_time(rehearsal):  # noqa: F811
    recs = group.measure_group([_case("eager", device="cuda", timing="cold")], _ctx(1000.0, "cuda"))
    [rec] = recs
    m = rec["metrics"]
    assert m["host_s"] is not None and m["host_s"] > 0
    assert rec["config"]["device"].startswith("cuda") and "rehearsal" in rec["flags"]


class _Groups(torch.nn.Module):
    def __init__(self, **attrs):
        super().__init__()
        for k, v in attrs.items():
            setattr(self, k, v)


def test_the_group_count_is_read_from_the_module_or_its_inner_one_else_one_per_channel():
    assert group._num_groups(torch.nn.GroupNorm(4, 16), 16) == 4
    assert group._num_groups(_Groups(groups=8), 64) == 8
    assert group._num_groups(_Groups(G=2), 64) == 2
    assert group._num_groups(_Groups(num_groups=3, groups=5, G=7), 64) == 3   # in that order
    assert group._num_groups(_Groups(inner=torch.nn.GroupNorm(6, 12)), 12) == 6
    assert group._num_groups(_Groups(num_groups=0, groups=1), 64) == 1        # not a count: the next one
    assert group._num_groups(_Groups(num_groups="4"), 64) == 64               # not an int: the default
    assert group._num_groups(_Groups(), 64) == 64 and group._num_groups(_Groups(), 33) == 33   # InstanceNorm's
    assert group._num_groups(_Groups(), 8) == 8


def test_a_retained_backward_runs_again_and_again_with_the_gradients_of_one_backward():
    """ASV's timer calls the backward repeatedly over one forward's graph (``retain_graph``): each call gives the
    gradients one backward of that forward gives, with respect to every input and parameter."""
    from normbench.discovery import REGISTRY

    case = _case("eager", pass_="bwd")
    prep = group.Prepared(REGISTRY.get("rmsnorm"), "eager", case.shape, "float32", "cpu")
    again = prep.retained_backward()
    first, second = again(), again()
    want = prep.backward(prep.forward())
    assert len(first) == len(want) == len(prep.targets) >= 2
    for a, b, w in zip(first, second, want):
        assert a is not None and torch.equal(a, w) and torch.equal(b, w)


# --- the context a sweep shares (make_context) ---------------------------------------------------------------------

@pytest.fixture
def fake_ceiling(monkeypatch):
    """``ceiling.measure`` answering a known ceiling (measured 100 s ago), with the devices it was asked about."""
    import time

    from normbench.measure import ceiling

    asked: list = []

    def measure(device="cpu", fresh=False):
        asked.append(device)
        return ceiling.Ceiling(123.0, "a planted copy ceiling", str(device), spread=0.0425, attempt=2,
                               measured_at=time.time() - 100.0)

    monkeypatch.setattr(ceiling, "measure", measure)
    return asked


def test_a_gpu_context_carries_the_ceiling_provenance_and_datasheet_it_was_made_from(fake_ceiling, rehearsal,  # noqa: F811
                                                                                    monkeypatch):
    """``make_context`` on (simulated) CUDA named as an H200: every field read back against values known here — the
    planted ceiling's bandwidth, method, spread and age, the command given, the GPU's datasheet bandwidth (4.8 TB/s,
    NVIDIA's H200 datasheet), the settings given — and the same values in a record measured with it."""
    import time

    from normbench.measure.timers import TimerSettings
    from normbench.rehearsal import SimulatedCuda

    monkeypatch.setattr(SimulatedCuda, "hardware", lambda self, device=None: {
        "gpu": "NVIDIA H200", "gpu_memory_gb": 141.0, "cuda": None, "driver": None})
    settings = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
    ctx = group.make_context("cuda", settings, command="normbench sweep --norms rmsnorm")
    assert fake_ceiling == ["cuda"]
    assert (ctx.ceiling_gbps, ctx.ceiling_method, ctx.ceiling_spread) == (123.0, "a planted copy ceiling", 0.0425)
    assert ctx.settings is settings
    assert ctx.provenance["command"] == "normbench sweep --norms rmsnorm"
    assert ctx.provenance["hardware"]["gpu"] == "NVIDIA H200" and "simulated" in ctx.provenance
    assert ctx.datasheet_peak_gbps == 4800.0
    assert abs(ctx.ceiling_at - (time.monotonic() - 100.0)) < 20.0   # measured 100 s before the context was made
    assert ctx.ceiling_best_gbps is None and ctx.impl_hashes == {}

    [rec] = group.measure_group([_case("eager", device="cuda", timing="hot")], ctx)
    m = rec["metrics"]
    assert (m["ceiling_gbps"], m["ceiling_method"], m["datasheet_peak_gbps"]) == (123.0, "a planted copy ceiling",
                                                                                  4800.0)
    assert m["noise"]["ceiling_spread"] == 0.0425
    assert m["pct_of_datasheet"] == pytest.approx(100.0 * m["gbps"] / 4800.0)
    assert rec["provenance"]["command"] == "normbench sweep --norms rmsnorm"
    assert rec["provenance"]["hardware"]["gpu"] == "NVIDIA H200"


def test_a_cpu_context_names_no_gpu_even_where_one_is_there(fake_ceiling, rehearsal):  # noqa: F811
    """On "cpu" with a (simulated) GPU present: the provenance names no GPU and no rehearsal, so no datasheet; the
    command given as argv is joined as a shell would read it; no settings given: the default ones."""
    from normbench.measure.timers import TimerSettings

    ctx = group.make_context("cpu", command=["normbench", "sweep", "--shapes", "2x 64"])
    assert fake_ceiling == ["cpu"]
    assert ctx.provenance["command"] == "normbench sweep --shapes '2x 64'"
    assert ctx.provenance["hardware"]["gpu"] is None and "simulated" not in ctx.provenance
    assert ctx.datasheet_peak_gbps is None
    assert ctx.settings == TimerSettings()


# --- backward with respect to a parameter the output does not use ----------------------------------------------------

class _UnusedBias(torch.nn.Module):
    """An RMSNorm with a ``bias`` parameter its output never uses (as a norm with an unused affine term has)."""

    def __init__(self, c):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, c))
        self.bias = torch.nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_the_backward_gives_none_for_a_parameter_the_output_does_not_use():
    """The gradient of an unused parameter is None (autograd refuses it unless told it may be unused); the others
    equal a backward computed here, for the plain backward and for ASV's retained one."""
    import dataclasses

    from normbench.discovery import REGISTRY

    spec = dataclasses.replace(REGISTRY.get("rmsnorm"), factory=lambda c, layout="tokens", **kw: _UnusedBias(c))
    case = _case("eager", pass_="bwd")
    prep = group.Prepared(spec, "eager", case.shape, "float32", "cpu")
    assert [p is prep.module.bias for p in prep.targets] == [False] * len(prep.inputs) + [False, True]
    x = prep.inputs[0]
    out = prep.forward()
    grads = prep.backward(out)
    want = torch.autograd.grad(prep.module(x), [x, prep.module.weight], prep._gouts[0])
    assert len(grads) == 3 and grads[2] is None
    assert torch.allclose(grads[0], want[0]) and torch.allclose(grads[1], want[1])
    again = prep.retained_backward()
    for got in (again(), again()):
        assert len(got) == 3 and got[2] is None
        assert torch.allclose(got[0], want[0]) and torch.allclose(got[1], want[1])
