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


def test_the_group_count_is_read_from_the_module_or_its_inner_one_else_at_most_32():
    assert group._num_groups(torch.nn.GroupNorm(4, 16), 16) == 4
    assert group._num_groups(_Groups(groups=8), 64) == 8
    assert group._num_groups(_Groups(G=2), 64) == 2
    assert group._num_groups(_Groups(num_groups=3, groups=5, G=7), 64) == 3   # in that order
    assert group._num_groups(_Groups(inner=torch.nn.GroupNorm(6, 12)), 12) == 6
    assert group._num_groups(_Groups(num_groups=0, groups=1), 64) == 1        # not a count: the next one
    assert group._num_groups(_Groups(num_groups="4"), 64) == 32               # not an int: the default
    assert group._num_groups(_Groups(), 64) == 32 and group._num_groups(_Groups(), 33) == 32
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
