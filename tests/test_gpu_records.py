"""GPU records made on the CPU through the fake GPU stream (tests/fake_gpu.py): ``measure_group`` and ``measure_set``
on "cuda" run the real timers (``CudaOps`` over a patched ``torch.cuda``), the real record builder and its flags; the
CUDA-graph capture path (``timers._capture_graph``) runs through the fake's graphs. Issue #52 items 1 and 3.

What a record should say is derived from the workload given to the fake, never read back from the fake. The fake's
clock is simulated: no wall-clock timing is asserted.
"""

from __future__ import annotations

import statistics

import pytest
from fake_gpu import FakeGPU, cuda_on_cpu, install

from normbench import results
from normbench.measure import group, headtohead, planning, timers
from normbench.measure.shapes import parse_shape
from normbench.measure.timers import TimerSettings, cuda_timing
from normbench.records import iter_records
from normbench.records.schema import validate_record
from normbench.records.store import write_records

US = 1e-6
SETTINGS = TimerSettings(warmup=2, min_reps=16, max_reps=16, min_time=0.0)
SHAPE = parse_shape("4x8x64")


def _ctx(settings=SETTINGS):
    return group.Context(3000.0, "fake GPU copy ceiling", results.provenance(command="pytest", device="cpu"),
                         settings, None)


def _case(backend="eager", pass_="fwd", timing="hot", graphs=False, keep_ahead=True):
    return planning.Case("rmsnorm", backend, SHAPE, "float32", pass_, "cuda", timing, 1, graphs,
                         keep_ahead=keep_ahead)


def test_a_host_that_falls_behind_is_flagged_host_bound_with_its_host_time(monkeypatch, tmp_path, one_thread):
    """measure_group on "cuda" with keep-ahead off (``Case.keep_ahead``) and a host path ten times the kernel: the
    events enclose the GPU's wait for the host, so the record is flagged ``host_bound`` and keeps ``host_s``.
    Planted: ``time_pass`` returning no host info on CUDA (group.py) -> red here."""
    gpu = FakeGPU()
    host_s, gpu_s = 200 * US, 20 * US
    cuda_on_cpu(monkeypatch, gpu, host_s=host_s, gpu_s=gpu_s)
    cases = [_case(keep_ahead=False), _case(pass_="fwd+bwd", timing="cold", keep_ahead=False)]
    recs = group.measure_group(cases, _ctx())
    assert len(recs) == 2
    for rec in recs:
        assert validate_record(rec) == []
        met = rec["metrics"]
        assert rec["config"]["device"] == "cuda" and "host_bound" in rec["flags"]
        assert "without keep-ahead" in rec["flag_reasons"]["host_bound"] and met["keep_ahead"] is None
        assert met["host_s"] == pytest.approx(host_s + gpu.launch_s, rel=1e-6)
    # written and read back through the store: the flag and the host time survive
    write_records(recs, tmp_path)
    back = [r for _, r in iter_records(tmp_path, kind="kernel", errors="raise")]
    assert {r["id"] for r in back} == {r["id"] for r in recs}
    assert all("host_bound" in r["flags"] and r["metrics"]["host_s"] > 0 for r in back)


def test_a_call_that_waits_for_the_gpu_is_flagged_host_bound_through_keep_ahead(monkeypatch, one_thread):
    """measure_group on "cuda" with keep-ahead: every call waits for the GPU (as ``.item()`` does), so the GPU's
    queue runs dry in every batch, retry included: ``host_bound`` ("ran dry"), the check kept in the record. Few
    repetitions: see the xfail below."""
    gpu = FakeGPU()
    cuda_on_cpu(monkeypatch, gpu, host_s=40 * US, gpu_s=20 * US, waits=True)
    few = TimerSettings(warmup=1, min_reps=4, max_reps=4, min_time=0.0)
    [rec] = group.measure_group([_case()], _ctx(few))
    met = rec["metrics"]
    assert "host_bound" in rec["flags"] and "ran dry" in rec["flag_reasons"]["host_bound"]
    assert met["keep_ahead"]["failed"] == met["keep_ahead"]["batches"] > 0
    assert met["host_s"] >= 40 * US + gpu.launch_s


def test_keep_ahead_spins_stay_bounded_for_a_call_that_waits(monkeypatch):
    """A call that waits for the GPU: KeepAhead once took a failed batch's enqueue time (which includes the wait for
    the spin) as the next spin's base, so every batch's spin grew 2-4x (43 GPU-seconds of spin for 16 repetitions,
    3e21 for 40). A batch that waited no longer plans the next spin, and spins are capped."""
    gpu = FakeGPU()
    install(monkeypatch, gpu)
    t = cuda_timing(gpu.call(host_s=40 * US, gpu_s=20 * US, waits=True), SETTINGS, "cuda", cold=False)
    assert t.keep_ahead["failed"] > 0
    # the spins together need not outlast the timed work by more than the retry factor's share per batch
    assert t.keep_ahead["spin_s"] < 1.0


def test_a_host_slower_than_the_gpu_but_kept_ahead_times_the_gpu_and_is_not_flagged(monkeypatch, one_thread):
    """The H200 case: a host path ten times the kernel, never waiting: keep-ahead times the GPU's 20 µs, the record
    keeps the host's 200 µs beside it and is not ``host_bound``."""
    gpu = FakeGPU()
    cuda_on_cpu(monkeypatch, gpu, host_s=200 * US, gpu_s=20 * US, kernels=4)
    [rec] = group.measure_group([_case()], _ctx())
    met = rec["metrics"]
    assert "host_bound" not in rec["flags"] and met["keep_ahead"]["failed"] == 0
    assert met["time_median_s"] == pytest.approx(20 * US, rel=1e-6)
    assert met["host_s"] == pytest.approx(200 * US + 4 * gpu.launch_s, rel=1e-6)
    # the same-size copy was timed on the same fake stream: its GB/s is the workload's
    assert met["copy_same_size_gbps"] == pytest.approx(4000.0, rel=1e-6)
    assert met["cache_bytes"]["l2_bytes"] == gpu.l2_bytes


def test_measure_set_on_cuda_flags_each_host_bound_backend_with_its_host_time(monkeypatch, one_thread):
    """measure_set on "cuda": interleaved rounds through the fake with keep-ahead off and a host path ten times
    the kernel: both backends' records are ``host_bound`` with ``host_s``, and paired with each other."""
    gpu = FakeGPU()
    cuda_on_cpu(monkeypatch, gpu, host_s=200 * US, gpu_s=20 * US)
    recs = headtohead.measure_set([_case("eager", keep_ahead=False), _case("native", keep_ahead=False)], _ctx())
    assert {r["config"]["backend"] for r in recs} == {"eager", "native"}
    for rec in recs:
        assert validate_record(rec) == []
        assert "host_bound" in rec["flags"] and "without keep-ahead" in rec["flag_reasons"]["host_bound"]
        assert rec["metrics"]["host_s"] == pytest.approx(200 * US + gpu.launch_s, rel=1e-6)
        [pair] = rec["metrics"]["paired"]
        assert pair["partner_backend"] in {"eager", "native"} - {rec["config"]["backend"]}


# --- the CUDA-graph path: timers._capture_graph through the fake's graphs -----------------------------------------

def test_graphs_replay_the_captured_call_and_time_the_gpu(monkeypatch):
    """graphs=True through the real ``CudaOps.capture`` -> ``_capture_graph`` (torch.cuda's streams and graph
    patched to the fake): the call is captured once, every repetition is a replay (one launch instead of the call's
    eight), and the events time the GPU's work."""
    gpu = FakeGPU(graphs=True)
    install(monkeypatch, gpu)
    t = cuda_timing(gpu.call(host_s=100 * US, gpu_s=16 * US, kernels=8), SETTINGS, "cuda", cold=False, graphs=True)
    assert t.used_graph and gpu.captures == 1
    assert gpu.replays >= SETTINGS.min_reps + SETTINGS.warmup
    assert statistics.median(t.samples) == pytest.approx(16 * US, rel=1e-6)
    assert statistics.median(t.host_s) == pytest.approx(gpu.launch_s, rel=1e-6)  # a replay: one launch
    assert t.host_bound() is None


def test_a_call_that_cannot_be_captured_falls_back_to_plain_calls(monkeypatch):
    """A call that synchronises cannot be captured (CUDA refuses a sync in a capture): the timing falls back to plain
    calls and says so (``used_graph`` False)."""
    gpu = FakeGPU(graphs=True)
    install(monkeypatch, gpu)
    t = cuda_timing(gpu.call(host_s=30 * US, gpu_s=20 * US, waits=True), SETTINGS, "cuda", cold=False, graphs=True)
    assert not t.used_graph and gpu.captures == 0 and gpu.replays == 0
    assert len(t.samples) >= SETTINGS.min_reps


def test_a_graphs_case_records_graph_used(monkeypatch, one_thread):
    """measure_group of a graphs case on "cuda": captured through ``_capture_graph`` and the record says
    ``graph_used``; the backward pass is never captured (it needs its untimed forward first)."""
    gpu = FakeGPU(graphs=True)
    cuda_on_cpu(monkeypatch, gpu, host_s=100 * US, gpu_s=20 * US, kernels=4)
    recs = group.measure_group([_case(graphs=True), _case(pass_="bwd", graphs=True)], _ctx())
    by = {r["config"]["pass"]: r for r in recs}
    assert by["fwd"]["metrics"]["graph_used"] is True and by["bwd"]["metrics"]["graph_used"] is False
    assert by["fwd"]["metrics"]["time_median_s"] == pytest.approx(20 * US, rel=1e-6)
    assert gpu.captures >= 1


def test_the_real_capture_helper_is_what_cudaops_calls(monkeypatch):
    """``CudaOps.capture`` is ``_capture_graph``: the warm-up runs on a side stream before the capture (three plain
    calls), then one capture."""
    gpu = FakeGPU(graphs=True)
    install(monkeypatch, gpu)
    calls = []
    work = gpu.call(host_s=10 * US, gpu_s=10 * US)

    def fn():
        calls.append(gpu._capturing is not None)
        work()

    replay = timers.CudaOps("cuda").capture(fn)
    assert calls == [False, False, False, True]
    before = gpu.launches
    replay()
    assert gpu.launches == before + 1 and gpu.replays == 1
