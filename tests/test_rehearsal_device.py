"""The one device seam (``normbench.device``) and its rehearsal: under ``NORMBENCH_REHEARSE=<scenario>`` the whole
measurement path (copy ceiling, provenance, the check gate's CUDA device, memory, the reference, both timers, a
group and a head-to-head set) runs with ``torch.cuda`` unusable, so every CUDA call it makes goes through the seam;
what a GPU run reaches that a rehearsal does not run is ``device.NOT_REHEARSED``, at most 10 entries, and a static
scan fails when a CUDA call is added anywhere else without being listed there.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from normbench import device as seam

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "normbench"
#: Not reached by a short GPU window's kernel measurement (the training loop; scripts/gpu-window.sh measures kernels).
NOT_REACHED = ("normbench/train/",)


def _resolve(name: str):
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def test_not_rehearsed_is_at_most_ten_and_names_real_code():
    assert 0 < len(seam.NOT_REHEARSED) <= 10
    for name, why in seam.NOT_REHEARSED.items():
        assert _resolve(name) is not None and why.strip(), name


class _Scan(ast.NodeVisitor):
    """Qualified names of the functions (or the module) that touch CUDA directly: ``torch.cuda.*``, pynvml, or a
    command line naming nvidia-smi."""

    def __init__(self, module: str):
        self.module, self.stack, self.found = module, [], set()

    def _here(self) -> str:
        return ".".join([self.module, *self.stack])

    def _scope(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr == "cuda":
            self.found.add(self._here())
        self.generic_visit(node)

    def visit_Import(self, node):
        if any(a.name.split(".")[0] == "pynvml" for a in node.names):
            self.found.add(self._here())

    def visit_List(self, node):
        if any(isinstance(e, ast.Constant) and e.value == "nvidia-smi" for e in node.elts):
            self.found.add(self._here())
        self.generic_visit(node)


def _cuda_callers() -> set[str]:
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(NOT_REACHED):
            continue
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        scan = _Scan(module)
        scan.visit(ast.parse(path.read_text()))
        found |= scan.found
    return found


#: The seam's thin pass-throughs to torch.cuda (what the rehearsal's simulated device replaces, one for one).
SEAM = ("normbench.device.L2Flusher", "normbench.device._capture_graph", "normbench.device.CudaOps",
        "normbench.device.CudaDevice", "normbench.device._max_sm_clock_hz")


def test_every_cuda_call_outside_the_seam_is_listed():
    listed = set(seam.NOT_REHEARSED)

    def covered(name: str) -> bool:
        return any(name == k or name.startswith(k + ".") for k in listed) or name.startswith(SEAM)

    missing = sorted(n for n in _cuda_callers() if not covered(n))
    assert not missing, f"CUDA calls outside normbench.device, not in NOT_REHEARSED: {missing}"


def test_the_scan_finds_a_planted_cuda_call(tmp_path):
    scan = _Scan("normbench.measure.ceiling")
    scan.visit(ast.parse("def measure(d):\n    torch.cuda.synchronize(d)\n"))
    assert scan.found == {"normbench.measure.ceiling.measure"}


@pytest.fixture
def no_cuda(monkeypatch):
    """torch.cuda unusable: any call raises; NORMBENCH_REHEARSE=normal with a fresh simulated device."""
    def boom(*a, **k):
        raise AssertionError("torch.cuda called outside the device seam in a rehearsal")

    for name in ("synchronize", "Event", "_sleep", "get_device_properties", "is_available", "device",
                 "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "mem_get_info",
                 "current_device", "empty_cache", "is_bf16_supported", "Stream", "CUDAGraph", "graph",
                 "current_stream"):  # not is_initialized: torch.manual_seed asks it, harmlessly
        monkeypatch.setattr(torch.cuda, name, boom)
    monkeypatch.setenv(seam.REHEARSE_ENV, "normal")
    seam.reset()
    yield seam.get()
    seam.reset()


def test_a_rehearsal_measures_without_touching_torch_cuda(no_cuda):
    from normbench.check import check_norm
    from normbench.discovery import REGISTRY
    from normbench.measure import ceiling, memory, reference
    from normbench.measure.group import make_context, measure_group
    from normbench.measure.headtohead import measure_set
    from normbench.measure.planning import Case, default_device, device_dtypes
    from normbench.measure.shapes import parse_shape
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance

    assert default_device() == "cuda" and "bfloat16" in device_dtypes("cuda")
    assert seam.tensor_device("cuda") == "cpu" and memory.free_bytes("cuda") is None
    assert reference.cache_sizes("cuda")["l2_bytes"] == 60 * 2**20
    prov = provenance(device="cuda")
    assert "Simulated" in prov["hardware"]["gpu"] and "NORMBENCH_REHEARSE=normal" in prov["simulated"]
    ceil = ceiling.measure("cuda", fresh=True)
    assert ceil.gbps > 0 and "simulated GPU" in ceil.method
    results = check_norm(REGISTRY.get("rmsnorm"), pairs=[("eager", "cuda")], contract=False)
    assert results and all(r.ok and r.available for r in results), results
    ctx = make_context("cuda", TimerSettings(warmup=1, min_reps=5, max_reps=10, min_time=0.0, max_time=1.0))
    shape = parse_shape("4x32")
    recs = measure_group([Case("rmsnorm", "eager", shape, "float32", p, "cuda", "cold", 1) for p in ("fwd", "bwd")],
                         ctx)
    recs += measure_set([Case("rmsnorm", b, shape, "float32", "fwd+bwd", "cuda", "cold", 1)
                         for b in ("eager", "native")], ctx)
    assert len(recs) == 4
    for rec in recs:
        assert rec["config"]["device"] == "cuda" and "rehearsal" in rec["flags"]
        # no GPU allocator to read: no memory figure (not the CPU allocator's), and the record says so
        assert rec["metrics"]["peak_mem_bytes"] is None and "no memory was measured" in rec["flag_reasons"]["rehearsal"]
        assert rec["metrics"]["keep_ahead"]["failed"] == 0 and rec["metrics"]["clock"]["warmup"]["ramped"]
        # the maximum SM clock as NVML states it, read by the seam's own reader from the simulated NVML
        assert (rec["metrics"]["clock"]["max_source"], rec["metrics"]["clock"]["max_mhz"]) == ("nvml", 1980.0)
    assert no_cuda.gpu.launches > 0 and no_cuda.gpu.cpu_s > 0   # the simulated stream ran the calls
    assert no_cuda.gpu.nvml.queries >= 1   # _max_sm_clock_hz asked the simulated NVML (not a stated number)


def test_the_max_clock_reader_runs_against_the_simulated_nvml(no_cuda, monkeypatch):
    """``normbench.device._max_sm_clock_hz`` (what the timers' clock check calls on a GPU) is what a rehearsal runs:
    it reads the simulated NVML; where that NVML fails it falls back to the simulated nvidia-smi, never the
    machine's own, and answers None (the clock check then uses the highest clock seen)."""
    import subprocess

    from normbench.rehearsal import SimulatedCuda

    seam._max_sm_clock_hz.cache_clear()
    assert no_cuda.max_sm_clock_hz() == 1980e6 and no_cuda.gpu.max_clock_hz() == 1980e6
    assert no_cuda.gpu.nvml.queries == 1   # cached per device, as on a GPU
    assert seam._max_sm_clock_hz.cache_info().misses == 1

    def no_real_smi(*a, **k):
        raise AssertionError("a rehearsal ran the machine's nvidia-smi")

    monkeypatch.setattr(subprocess, "run", no_real_smi)
    bare = SimulatedCuda("normal", read_max_clock=seam._max_sm_clock_hz)
    bare.gpu.nvml_hz = None   # a device without NVML
    assert bare.max_sm_clock_hz() is None and bare.gpu.nvml.queries == 0


def test_the_host_bound_rehearsal_flags_its_records(no_cuda, monkeypatch):
    from normbench.measure.group import Context
    from normbench.measure.headtohead import measure_set
    from normbench.measure.planning import Case
    from normbench.measure.shapes import parse_shape
    from normbench.measure.timers import TimerSettings
    from normbench.records.provenance import provenance

    monkeypatch.setenv(seam.REHEARSE_ENV, "host_bound")
    ctx = Context(1000.0, "stated for the test", provenance(device="cuda"),
                  TimerSettings(warmup=1, min_reps=5, max_reps=10, min_time=0.0, max_time=1.0))
    recs = measure_set([Case("rmsnorm", b, parse_shape("4x32"), "float32", "fwd", "cuda", "cold", 1)
                        for b in ("eager", "native")], ctx)
    assert recs and all("host_bound" in r["flags"] and "rehearsal" in r["flags"] for r in recs)
    assert all("host_bound" in r["flag_reasons"]["rehearsal"] for r in recs)


def test_an_unknown_scenario_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(seam.REHEARSE_ENV, "warp_speed")
    seam.reset()
    try:
        with pytest.raises(ValueError, match="unknown rehearsal scenario 'warp_speed'; scenarios are normal"):
            seam.get()
    finally:
        seam.reset()


def test_a_rehearsal_keeps_its_own_gate_verdicts(monkeypatch):
    """Its "cuda" is the CPU: its CUDA verdicts must never stand for a real GPU's in the gate's cache."""
    from normbench.check import cache_path

    real = cache_path()
    monkeypatch.setenv(seam.REHEARSE_ENV, "normal")
    seam.reset()
    try:
        assert cache_path() != real and cache_path().parent == real.parent
    finally:
        seam.reset()
