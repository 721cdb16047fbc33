"""The check gate per backend and device kind (issue #35 item 1), on the CPU through the device seam: a fake "cuda"
kind (``check.DEVICES``) keeps tensors on the CPU as a tensor subclass that the test backends recognise, so a
backend that refuses CPU tensors (as the Triton backend does on a GPU machine) can be checked on the device it
claims. Each verdict is judged against eager computed independently by the same check."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

from normbench import check
from normbench.discovery import REGISTRY
from normbench.measure import baselines
from normbench.registry import Backend, NormSpec, Paper, adopt_state


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor standing for one on the (fake) GPU: ops on it stay this type, as results stay on a device."""


FAKE_CUDA = check.DeviceKind("cuda", "cpu", lambda: None, lambda t: t.as_subclass(FakeCudaTensor))


class _Wrapped(nn.Module):
    """A backend around the eager module (its parameters shared): ``on_gpu`` refuses inputs not on the fake GPU;
    ``gpu_error`` is added to its output there (a kernel wrong on the GPU only)."""

    def __init__(self, eager, on_gpu: bool, gpu_error: float = 0.0):
        super().__init__()
        adopt_state(self, eager)
        object.__setattr__(self, "_eager", eager)
        self.on_gpu, self.gpu_error = on_gpu, gpu_error

    def forward(self, x):
        gpu = isinstance(x, FakeCudaTensor)
        if self.on_gpu and not gpu:
            raise RuntimeError(f"the gpu_only backend needs CUDA tensors, got a input on {x.device}")
        y = self._eager(x)
        return y * (1 + self.gpu_error) if gpu else y


def build_gpu_only(eager, spec=None):
    return _Wrapped(eager, on_gpu=True)


def build_wrong_on_gpu(eager, spec=None):
    return _Wrapped(eager, on_gpu=False, gpu_error=0.01)


def build_wrong_everywhere(eager, spec=None):
    w = _Wrapped(eager, on_gpu=False)
    w.forward = lambda x: w._eager(x) * 1.01  # noqa: E731  (wrong on every device)
    return w


PROBE = NormSpec(
    name="gate_probe", title="Gate probe", paper=Paper("t", "a", 2024, "https://example.org"), family="features",
    kind="activation", layouts=("tokens",), formula="y = RMSNorm(x)", factory="normbench.norms.features:RMSNorm",
    extra_backends=(
        Backend("gpu_only", build_gpu_only, sources=(), devices=("cuda",)),
        Backend("wrong_on_gpu", build_wrong_on_gpu, sources=()),  # declares every kind (the default)
        Backend("wrong_on_cpu", build_wrong_everywhere, sources=(), devices=("cpu",)),
    ))


@pytest.fixture
def probe(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", PROBE)
    return PROBE


class _NoRun:
    """An executor that must not be used: every verdict has to come from the cache or the local probe."""

    def submit(self, task):
        raise AssertionError(f"a check ran: {task.label}")


def test_a_cuda_only_backend_leaves_the_norm_passing_here_and_is_checked_on_the_device_it_claims(probe, monkeypatch,
                                                                                                  capsys):
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", dataclasses.replace(probe, extra_backends=(
        probe.extra_backends[0],)))  # gpu_only alone
    # No CUDA here (the real seam): the backend that refuses CPU tensors is "not available", not a failure.
    monkeypatch.setitem(check.DEVICES, "cuda", check.DeviceKind("cuda", "cuda", lambda: "no CUDA device here"))
    status = check.ensure_checked([("gate_probe", "eager", "cpu"), ("gate_probe", "gpu_only", "cpu"),
                                   ("gate_probe", "gpu_only", "cuda")], log=lambda m: None)["gate_probe"]
    assert status.contract.passed
    assert status.verdict("gpu_only", "cuda").status == "unavailable"
    assert "does not run on cpu" in status.verdict("gpu_only", "cpu").detail
    assert not status.refused("eager", "cpu") and not status.refused("gpu_only", "cuda")
    assert check.run_checks(["gate_probe"], as_json=True) == 0  # the old gate ran it on CPU tensors and failed all
    report = json.loads(capsys.readouterr().out)["norms"][0]
    by = {(v["backend"], v["device"]): v["status"] for v in report["verdicts"]}
    assert by[("gpu_only", "cuda")] == "unavailable" and by[("eager", "cpu")] == "passed"

    # With a (fake) GPU it is checked there, on tensors it accepts, against eager on that device.
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)
    status = check.ensure_checked([("gate_probe", "gpu_only", "cuda"), ("gate_probe", "compile", "cuda")],
                                  log=lambda m: None)["gate_probe"]
    assert status.verdict("gpu_only", "cuda").passed and not status.verdict("gpu_only", "cuda").cached
    assert status.verdict("compile", "cuda").passed  # compile carries eager's verdict, eager checked on cuda
    assert (("eager", "cuda") in status.verdicts) and status.verdicts[("eager", "cuda")].passed


def test_a_backend_failing_on_its_device_refuses_only_itself_there(probe, monkeypatch):
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)
    needs = [("gate_probe", b, d) for b in ("eager", "compile", "gpu_only", "wrong_on_gpu") for d in ("cpu", "cuda")]
    status = check.ensure_checked(needs, log=lambda m: None)["gate_probe"]
    bad = status.verdict("wrong_on_gpu", "cuda")
    assert bad.status == "failed" and "differs from eager on cuda" in bad.detail
    assert status.refused("wrong_on_gpu", "cuda") and not status.refused("wrong_on_gpu", "cpu")
    for backend in ("eager", "compile", "gpu_only"):
        assert not status.refused(backend, "cuda"), backend
    assert not status.passed and [v.key for v in status.failed] == ["wrong_on_gpu@cuda"]
    msg = check.refusal(bad, "benchmark")
    assert "gate_probe's wrong_on_gpu backend on cuda" in msg and "normbench check gate_probe --device cuda" in msg

    # A record of it, measured with --force, says which check failed; one of eager does not.
    rec = {"config": {"device": "cuda:0"}, "flags": [], "flag_reasons": {}, "impl_hash": "h"}
    check.stamp(rec, status, "wrong_on_gpu", forced=True)
    assert rec["check"]["status"] == "failed" and "wrong_on_gpu on cuda" in rec["flag_reasons"]["forced"]
    ok = check.stamp({"config": {"device": "cuda"}, "flags": [], "flag_reasons": {}}, status, "eager", forced=False)
    assert ok["check"]["status"] == "passed" and ok["flags"] == []


def test_the_cache_keeps_a_verdict_per_device(probe, monkeypatch):
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)
    needs = [("gate_probe", "wrong_on_gpu", "cpu"), ("gate_probe", "wrong_on_gpu", "cuda")]
    check.ensure_checked(needs, log=lambda m: None)
    cache = json.loads(check.cache_path().read_text())["gate_probe"]
    assert cache["wrong_on_gpu@cpu"]["status"] == "passed" and cache["wrong_on_gpu@cuda"]["status"] == "failed"
    assert cache["eager@cpu"]["status"] == "passed"
    assert cache["wrong_on_gpu@cuda"]["impl_hash"] == PROBE.impl_hash("wrong_on_gpu")

    again = check.ensure_checked(needs, executor=_NoRun(), log=lambda m: None)["gate_probe"]  # all from the cache
    assert again.verdict("wrong_on_gpu", "cuda").cached and again.refused("wrong_on_gpu", "cuda")
    assert not again.refused("wrong_on_gpu", "cpu")
    assert check.cached_status(PROBE, [("wrong_on_gpu", "cuda")]).verdict("wrong_on_gpu", "cuda").status == "failed"

    # A verdict on one device says nothing about another: a pair never checked is checked, not taken from the cache.
    with pytest.raises(AssertionError, match="a check ran: gate_probe gpu_only@cuda"):
        check.ensure_checked([("gate_probe", "gpu_only", "cuda")], executor=_NoRun(), log=lambda m: None)
    # Another implementation (its hash) is a cache miss.
    cache_file = json.loads(check.cache_path().read_text())
    cache_file["gate_probe"]["wrong_on_gpu@cuda"]["impl_hash"] = "0" * 16
    check.cache_path().write_text(json.dumps(cache_file))
    assert check.cached_status(PROBE, [("wrong_on_gpu", "cuda")]) is None


def test_the_check_command_runs_each_backend_on_the_asked_device(probe, monkeypatch, capsys):
    monkeypatch.setitem(check.DEVICES, "cuda", FAKE_CUDA)
    assert check.run_checks(["gate_probe"], as_json=True, device="cuda") == 1  # wrong_on_gpu fails there
    report = json.loads(capsys.readouterr().out)
    assert report["devices"] == ["cuda"] and not report["passed"]
    by = {(v["backend"], v["device"]): v["status"] for v in report["norms"][0]["verdicts"]}
    assert by == {("eager", "cpu"): "passed", ("eager", "cuda"): "passed", ("gpu_only", "cuda"): "passed",
                  ("wrong_on_gpu", "cuda"): "failed", ("wrong_on_cpu", "cuda"): "unavailable"}
    assert {f["check"] for f in report["norms"][0]["failures"]} >= {"backend/wrong_on_gpu@cuda/output[tokens]"}
    assert check.run_checks(["gate_probe"], as_json=True, device="cpu") == 1  # wrong_on_cpu fails on the CPU
    by = {(v["backend"], v["device"]): v["status"] for v in json.loads(capsys.readouterr().out)["norms"][0]["verdicts"]}
    assert by[("wrong_on_cpu", "cpu")] == "failed" and by[("wrong_on_gpu", "cpu")] == "passed"
    monkeypatch.setitem(check.DEVICES, "cuda", check.DeviceKind("cuda", "cuda", lambda: "no CUDA device here"))
    with pytest.raises(ValueError, match="--device cuda: no CUDA device here"):
        check.run_checks(["gate_probe"], device="cuda")


def test_gradients_are_compared_too(probe, monkeypatch):
    """A backend whose forward is right and whose backward is wrong fails (the forward-only check missed it)."""

    class _BadGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y):
            return y.clone()

        @staticmethod
        def backward(ctx, g):
            return g * 1.05

    def build_bad_backward(eager, spec=None):
        w = _Wrapped(eager, on_gpu=False)
        w.forward = lambda x: _BadGrad.apply(w._eager(x))  # noqa: E731
        return w

    spec = dataclasses.replace(PROBE, extra_backends=(Backend("bad_bwd", build_bad_backward, sources=()),))
    monkeypatch.setitem(REGISTRY.specs, "gate_probe", spec)
    v = check.ensure_checked([("gate_probe", "bad_bwd", "cpu")], log=lambda m: None)["gate_probe"].verdict(
        "bad_bwd", "cpu")
    assert v.status == "failed" and "grad/input0" in v.detail and "output" not in v.detail


def test_baselines_are_checked_by_the_gate_on_their_devices(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMBENCH_CACHE_DIR", str(tmp_path / "cache"))
    assert baselines.get("liger", "rmsnorm").devices == ("cuda",)
    assert baselines.get("native", "rmsnorm").devices == ("cpu", "cuda")
    status = check.ensure_checked([("rmsnorm", "native", "cpu"), ("rmsnorm", "liger", "cpu")],
                                  provider=baselines.GATE, log=lambda m: None)["rmsnorm"]
    assert status.verdict("native", "cpu").passed  # F.rms_norm, run for real against eager
    assert status.verdict("liger", "cpu").status == "unavailable" and not status.refused("liger", "cpu")

    # A baseline adapter that computes something else is refused, alone.
    wrong = dataclasses.replace(baselines.get("native", "rmsnorm"), build=build_wrong_everywhere)
    monkeypatch.setitem(baselines.REGISTRY, ("native", "rmsnorm"), wrong)
    status = check.ensure_checked([("rmsnorm", "native", "cpu"), ("rmsnorm", "eager", "cpu")],
                                  provider=baselines.GATE, log=lambda m: None)["rmsnorm"]
    assert status.refused("native", "cpu") and "differs from eager" in status.verdict("native", "cpu").detail
    assert not status.refused("eager", "cpu")
    # Without the provider the gate has no check for a baseline: refused, never waved through.
    bare = check.ensure_checked([("rmsnorm", "native", "cpu")], log=lambda m: None)["rmsnorm"]
    assert bare.refused("native", "cpu") and bare.verdict("native", "cpu").status == "not_run"


def test_triton_backends_declare_cuda_and_the_cpu_only_under_the_interpreter(monkeypatch):
    spec = REGISTRY.get("rmsnorm")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert spec.backend_devices("triton") == ("cuda",) and spec.backend_devices("eager") == ("cpu", "cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert spec.backend_devices("triton") == ("cpu", "cuda")
    bad = dataclasses.replace(PROBE, extra_backends=(Backend("x", build_gpu_only, devices=("tpu",)),))
    with pytest.raises(ValueError, match="declares devices"):
        bad.backend_devices("x")


def test_bench_refuses_only_the_failing_backend_and_measures_the_rest(probe, tmp_path, capsys, monkeypatch):
    from normbench.cli import main
    from normbench.measure import group, sweep
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance
    from normbench.records.store import iter_records

    fast = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)  # a stated ceiling: this is about the gate
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: group.Context(
        50.0, "test ceiling", provenance(command="pytest", device="cpu"), fast, None))

    out = tmp_path / "results"
    rc = main(["bench", "--norm", "gate_probe", "--backend", "eager", "wrong_on_cpu", "--shape", "quick-8x128x512",
               "--dtype", "float32", "--pass", "fwd", "--quick", "--no-progress", "--executor", "inprocess",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "refusing to benchmark gate_probe's wrong_on_cpu backend on cpu" in err and "differs from eager" in err
    recs = [r for _, r in iter_records(out, "kernel")]
    assert [r["config"]["backend"] for r in recs] == ["eager"]
    assert recs[0]["check"]["status"] == "passed" and "unchecked" not in recs[0]["flags"]
