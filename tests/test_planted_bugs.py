"""Issue #52 item 1: the measurement core's features, each through its real path, so that the bug planted in it goes
red (each test names the bug it was seen to catch). No wall-clock timing is asserted: the head-to-head twin does ten
times eager's work, so its ratio is far from any tie on any machine, and the GPU test runs on a simulated clock.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
import torch
from torch import nn

from normbench import campaign, results
from normbench.discovery import REGISTRY
from normbench.measure import group, headtohead, planning
from normbench.measure.shapes import by_label, parse_shape
from normbench.measure.timers import TimerSettings
from normbench.registry import Backend, adopt_state

pytest.importorskip("normbench._compat").import_transformers()
from test_policy import backends, model_policy, tiny  # noqa: E402, F401  (backends: the twin backend fixture)

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)


def _ctx(settings=FAST):
    return group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), settings, None)


# --- head to head: a backend doing ten times eager's work reads slower (planted: ratio inverted) -----------------

WORK = 10


class _TenTimes(nn.Module):
    """Computes what the eager module computes, ``WORK`` times over (the last result returned)."""

    def __init__(self, eager: nn.Module):
        super().__init__()
        adopt_state(self, eager)
        object.__setattr__(self, "eager", eager)

    def forward(self, *args):
        params = {k: v for k, v in self._parameters.items() if v is not None}
        for _ in range(WORK):
            out = torch.func.functional_call(self.eager, params, args)
        return out


def _ten_times(eager, spec):
    return _TenTimes(eager)


@pytest.fixture
def slow_twin(monkeypatch):
    spec = REGISTRY.get("rmsnorm")
    monkeypatch.setitem(REGISTRY.specs, "rmsnorm", dataclasses.replace(
        spec, extra_backends=spec.extra_backends + (Backend("tentimes", build=_ten_times, sources=()),)))
    return "tentimes"


def test_a_twin_doing_ten_times_eagers_work_reads_slower_with_reciprocal_entries(slow_twin, one_thread):
    """Planted: ``paired_ratio(samples[ob], samples[b])`` in measure_set (the ratio inverted) -> red here."""
    shape = parse_shape("4x8x64")
    cases = [planning.Case("rmsnorm", b, shape, "float32", "fwd", "cpu", "hot", 1) for b in ("eager", slow_twin)]
    refused: list = []
    recs = headtohead.measure_set(cases, _ctx(), refused)
    assert refused == [] and len(recs) == 2
    by = {r["config"]["backend"]: r for r in recs}
    [slow] = by[slow_twin]["metrics"]["paired"]
    [fast] = by["eager"]["metrics"]["paired"]
    assert slow["partner"] == by["eager"]["id"] and slow["partner_backend"] == "eager"
    assert fast["partner"] == by[slow_twin]["id"] and fast["partner_backend"] == slow_twin
    assert slow["verdict"] == "slower" and slow["ratio"] > 2 and slow["ci"][0] > 1.1
    assert fast["verdict"] == "faster" and fast["ratio"] < 0.5 and fast["ci"][1] < 1 / 1.1
    # the same rounds, seen from either side: reciprocal ratios and intervals
    assert slow["ratio"] * fast["ratio"] == pytest.approx(1.0, rel=1e-9)
    assert slow["ci"][0] * fast["ci"][1] == pytest.approx(1.0, rel=1e-9)
    assert slow["ci"][1] * fast["ci"][0] == pytest.approx(1.0, rel=1e-9)
    assert slow["n"] == fast["n"] == by["eager"]["metrics"]["interleaved"]["rounds"] >= headtohead.MIN_ROUNDS
    # the per-record summary agrees with the paired verdict's direction
    assert by[slow_twin]["metrics"]["time_median_s"] > by["eager"]["metrics"]["time_median_s"]


# --- the campaign resumed: the union of what was measured before and now (planted: ``carried = []``) ------------

def _plan(norms, monkeypatch, tmp_path):
    from normbench.measure import sweep
    from normbench.records.provenance import provenance

    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: group.Context(
        50.0, "test ceiling", provenance(command="pytest", device="cpu"), FAST, None))
    shape = by_label("quick-8x128x512")
    cases = [planning.Case(n, "eager", shape, "float32", "fwd", "cpu", "hot", 1, False, "campaign") for n in norms]
    return {1: campaign.Tier(1, "tiny", cases=cases)}


def _packed(out) -> dict:
    return {r["id"]: r for r in campaign.unpack([out])}


def test_a_campaign_resumed_from_its_first_output_keeps_the_union(monkeypatch, tmp_path, one_thread):
    """Run 1 measures rmsnorm; run 2 (a fresh machine: its own empty work tree) resumes from run 1's packed output
    and plans rmsnorm and layernorm: its output holds run 1's record unchanged (not measured again) and the new one.
    Planted: ``carried = []`` in campaign.run -> red here."""
    first = campaign.run((1,), out=tmp_path / "out1", work=tmp_path / "work1", device="cpu",
                         plan=_plan(["rmsnorm"], monkeypatch, tmp_path), settings=FAST, log=lambda m: None)
    assert first["problems"] == [] and first["records"] == 1
    before = _packed(tmp_path / "out1")
    logs: list[str] = []
    second = campaign.run((1,), out=tmp_path / "out2", work=tmp_path / "work2", device="cpu",
                          plan=_plan(["rmsnorm", "layernorm"], monkeypatch, tmp_path), settings=FAST,
                          log=logs.append, resume=[tmp_path / "out1"], smoke=False)
    after = _packed(tmp_path / "out2")
    assert set(before) < set(after) and len(after) == 2 and second["records"] == 2
    [old] = before
    assert after[old] == before[old]  # carried as it was: the same timestamp and samples, not measured again
    assert {r["norm"]["name"] for r in after.values()} == {"rmsnorm", "layernorm"}
    assert second["tiers"][1]["already_done"] == 1 and second["tiers"][1]["written"] == 1
    assert any("resumed: 1 records" in m for m in logs)
    # resuming from both outputs again adds nothing and drops nothing
    third = campaign.run((1,), out=tmp_path / "out3", work=tmp_path / "work3", device="cpu",
                         plan=_plan(["rmsnorm", "layernorm"], monkeypatch, tmp_path), settings=FAST,
                         log=lambda m: None, resume=[tmp_path / "out2"], smoke=False)
    assert _packed(tmp_path / "out3") == after and third["tiers"][1]["written"] == 0
    for p in (tmp_path / "out3").glob("*.json.gz"):
        assert json.loads(gzip.decompress(p.read_bytes()))  # whole files, no partial pack


# --- the policy leaves alone an RMSNorm computing with another eps than it reports (planted: no small-row probe) --

class LlamaRMSNorm(nn.Module):
    """Named and placed like transformers' class and reporting ``variance_epsilon``, but computing with ``real_eps``."""

    def __init__(self, c, said=1e-6, real_eps=1e-2):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.3 * torch.randn(c))
        self.variance_epsilon = said
        self.real_eps = real_eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.real_eps)).to(x.dtype)


LlamaRMSNorm.__module__ = "transformers.models.llama.modeling_llama"


@pytest.mark.usefixtures("backends")
@pytest.mark.parametrize("real_eps", [1e-2, 1e-5])
def test_an_rmsnorm_computing_with_another_eps_than_it_reports_is_left_alone(real_eps):
    """``variance_epsilon`` says 1e-6; the module computes with ``real_eps``. 1e-2 (the issue's case) shows on rows
    of any size; 1e-5 only on rows of size near sqrt(eps), which the probe's small-row check tries.
    Planted: the probe without its small rows (``for size in (1.0,)``) -> red here for 1e-5 (the 1e-2 case
    stays green: ordinary rows show it)."""
    from normbench.policy import apply_policy

    model, config = tiny("llama")
    liar = LlamaRMSNorm(32, real_eps=real_eps)
    honest = LlamaRMSNorm(32, real_eps=1e-6)   # the control: the same class, telling the truth, is replaced
    model.model.layers[0].input_layernorm = liar
    model.model.layers[1].input_layernorm = honest
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        before = liar(x)
    report = apply_policy(model, model_policy(config))
    left = {r["module"]: r["reason"] for r in report.left}
    replaced = {r["module"] for r in report.replaced}
    assert "model.layers.0.input_layernorm" in left and "model.layers.0.input_layernorm" not in replaced
    assert "not the RMSNorm it looks like" in left["model.layers.0.input_layernorm"]
    assert model.model.layers[0].input_layernorm is liar  # left as it was: still its own eps
    with torch.no_grad():
        assert torch.equal(model.model.layers[0].input_layernorm(x), before)
    assert "model.layers.1.input_layernorm" in replaced
