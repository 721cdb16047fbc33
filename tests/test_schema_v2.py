"""Schema v2: implementation hashes in record ids, the flag vocabulary, v1 records still valid and migrated."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import REPO
from test_results import _norm, _prov, accuracy_record, kernel_record

import normbench
from normbench import results
from normbench.measure import baselines, group, planning, sweep
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings
from normbench.records import schema

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
TINY = Shape("tiny-tokens", "tokens", (16, 64), "quick")


def _v1_kernel_record(**metric_overrides) -> dict:
    """A record exactly as schema v1 wrote it (no flags, no impl_hash, suspect booleans in metrics)."""
    rec = kernel_record(**metric_overrides)
    for key in ("impl_hash", "flags", "flag_reasons", "check"):
        rec.pop(key)
    rec["schema_version"] = 1
    rec["metrics"].setdefault("suspect", False)
    rec["metrics"].setdefault("suspect_reason", None)
    return rec


def test_v2_records_carry_the_new_fields_and_validate():
    rec = kernel_record()
    assert results.SCHEMA_VERSION == 2 and rec["schema_version"] == 2
    assert rec["flags"] == [] and rec["flag_reasons"] == {} and rec["impl_hash"] == "" and rec["check"] is None
    assert results.validate_record(rec) == []
    assert results.is_ranked(rec) and not results.is_invalid(rec)
    assert results.FLAGS == ("non_finite", "fell_back", "noisy", "host_bound", "suspect", "unchecked", "forced",
                             "diverged", "tuning", "rehearsal", "low_clock", "host_sync", "stale", "legacy")
    assert results.INVALID_FLAGS == ("non_finite",)


def test_add_flag_keeps_flags_sorted_unique_with_reasons():
    rec = kernel_record()
    results.add_flag(rec, "suspect", "above the ceiling")
    results.add_flag(rec, "noisy", "load 1.7 per core")
    results.add_flag(rec, "noisy", "ceiling spread 40%")
    assert rec["flags"] == ["noisy", "suspect"]
    assert rec["flag_reasons"]["noisy"] == "load 1.7 per core; ceiling spread 40%"
    assert not results.is_ranked(rec) and not results.is_invalid(rec)
    assert results.validate_record(rec) == []
    results.add_flag(rec, "non_finite", "y has NaN")
    assert results.is_invalid(rec)
    with pytest.raises(ValueError, match="unknown flag"):
        results.add_flag(rec, "slow", "because")
    with pytest.raises(ValueError, match="needs a reason"):
        results.add_flag(rec, "noisy", "")


@pytest.mark.parametrize("breakage, expected", [
    (lambda r: r.update(flags=["bogus"], flag_reasons={"bogus": "x"}),
     "record.flags[0] must be one of non_finite, fell_back"),
    (lambda r: r.update(flags=["suspect", "noisy"], flag_reasons={"suspect": "a", "noisy": "b"}),
     "record.flags must be sorted"),
    (lambda r: r.update(flags=["noisy"], flag_reasons={}), "flag_reasons.noisy must say why"),
    (lambda r: r.update(flag_reasons={"noisy": "x"}), "reasons for flags not set: noisy"),
    (lambda r: r.update(impl_hash="xyz"), "record.impl_hash 'xyz' is malformed (16 lowercase hex digits"),
    (lambda r: r.pop("flags"), "record.flags is missing"),
    (lambda r: r.update(check={"status": "maybe", "impl_hash": "", "detail": None}), "check.status must be one of"),
    (lambda r: r.update(check={"status": "passed"}), "check.impl_hash is missing"),
    (lambda r: r["provenance"].update(node=7), "provenance.node must be a string or null (the host name); got 7"),
])
def test_broken_v2_fields_are_rejected(breakage, expected):
    rec = kernel_record()
    breakage(rec)
    problems = results.validate_record(rec)
    assert any(expected in p for p in problems), problems


def test_above_ceiling_needs_the_suspect_flag_in_v2():
    rec = kernel_record(time_s=2.5e-4)  # 16 GB/s against a 10 GB/s ceiling
    assert any("not flagged suspect" in p and "add the flag 'suspect'" in p for p in results.validate_record(rec))
    results.add_flag(rec, "suspect", "above the measured copy ceiling")
    assert results.validate_record(rec) == []


def test_impl_hash_is_part_of_the_id_and_empty_hash_keeps_v1_ids():
    cfg = kernel_record()["config"]
    a = results.record_id("kernel", "layernorm", cfg, "cpu-test-2c", "0123456789abcdef")
    b = results.record_id("kernel", "layernorm", cfg, "cpu-test-2c", "fedcba9876543210")
    assert a != b
    # v1's id, computed independently: sha256 of the canonical [kind, norm, config without bytes_model, hardware]
    v1cfg = {k: v for k, v in cfg.items() if k != "bytes_model"}
    text = json.dumps(["kernel", "layernorm", v1cfg, "cpu-test-2c"], sort_keys=True, separators=(",", ":"))
    assert results.record_id("kernel", "layernorm", cfg, "cpu-test-2c") == "k-" + hashlib.sha256(
        text.encode()).hexdigest()[:20]
    rec = results.make_record("kernel", _norm(), cfg, kernel_record()["metrics"], _prov(), impl_hash="0123456789abcdef")
    assert rec["id"] == a and rec["impl_hash"] == "0123456789abcdef"


def test_v1_records_still_validate_and_migrate_with_flags_from_their_data():
    v1 = _v1_kernel_record()
    assert results.validate_record(v1) == []
    # v1 rules stay v1 rules: a suspect boolean without a reason is still a problem
    bad = copy.deepcopy(v1)
    bad["metrics"]["suspect"] = True
    assert any("does not say why" in p for p in results.validate_record(bad))
    sus = _v1_kernel_record(time_s=2.5e-4, suspect=True, suspect_reason="cache-resident")
    nan = _v1_kernel_record(err={"y": {"max_abs": None, "max_rel": None, "nonfinite": True}, "dx": None, "dw": None})
    for rec, flags in ((v1, []), (sus, ["suspect"]), (nan, ["non_finite"])):
        m = results.migrate(rec)
        assert m["schema_version"] == 2 and m["id"] == rec["id"] and m["impl_hash"] == "" and m["check"] is None
        assert m["flags"] == flags and m["provenance"]["node"] is None
        assert results.validate_record(m) == []
        assert rec["schema_version"] == 1  # the input is not changed
    assert results.migrate(sus)["flag_reasons"] == {"suspect": "cache-resident"}
    assert results.is_invalid(nan) and not results.is_ranked(sus) and results.is_ranked(v1)
    acc = accuracy_record()
    acc["metrics"].update(diverged=True, diverged_step=7)
    assert results.migrate(dict(acc, schema_version=1))["flags"] == ["diverged"]


def test_real_provenance_names_the_node():
    prov = results.provenance(command="pytest", device="cpu")
    import platform

    assert prov["node"] == (platform.node() or None)


# --- NormSpec.impl_hash ----------------------------------------------------------------------------------------------

_HASH_SNIPPET = """
import json, sys
import normbench
out = {}
for name, backend in [("layernorm", "eager"), ("layernorm", "compile"), ("layernorm", "triton"), ("dyt", "eager")]:
    out[f"{name}/{backend}"] = normbench.get_norm(name).impl_hash(backend)
print(json.dumps(out))
"""


def test_impl_hash_is_stable_across_processes_and_distinguishes_backends():
    here = {f"{n}/{b}": normbench.get_norm(n).impl_hash(b)
            for n, b in [("layernorm", "eager"), ("layernorm", "compile"), ("layernorm", "triton"), ("dyt", "eager")]}
    env = {"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin"}
    other = json.loads(subprocess.run([sys.executable, "-c", _HASH_SNIPPET], capture_output=True, text=True,
                                      check=True, cwd=REPO, env=env).stdout)
    if other != here:  # say which modules the two processes disagree on
        from normbench.registry import _eager_modules

        pytest.fail(f"in-process {here} != fresh process {other}; modules hashed here: "
                    f"{sorted(_eager_modules(normbench.get_norm('layernorm')))}")
    assert len(set(here.values())) == 4
    assert all(len(h) == 16 and int(h, 16) >= 0 for h in here.values())
    with pytest.raises(KeyError, match="no backend"):
        normbench.get_norm("layernorm").impl_hash("cuda-magic")


_PLUGIN = """
import torch
from torch import nn
from normbench import NormSpec, Paper


class ScaledRMS(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_features = c
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


EPS = {eps}
SPEC = NormSpec(name="hash_probe", title="Hash probe", paper=Paper("p", "a", 2024, "https://example.org/p"),
                family="features", kind="activation", layouts=("tokens",), formula="y = w x / rms(x)",
                factory=lambda c, layout="tokens", **kw: ScaledRMS(c))
"""


@pytest.fixture
def hash_probe(tmp_path, monkeypatch):
    """A plugin-like norm module on sys.path; ``write(eps)`` rewrites its source and reloads it."""
    from normbench.discovery import REGISTRY

    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "nb_hash_probe.py"

    def write(eps: str):
        path.write_text(textwrap.dedent(_PLUGIN.format(eps=eps)))
        importlib.invalidate_caches()
        mod = importlib.reload(sys.modules["nb_hash_probe"]) if "nb_hash_probe" in sys.modules else \
            importlib.import_module("nb_hash_probe")
        monkeypatch.setitem(REGISTRY.specs, "hash_probe", mod.SPEC)
        return mod.SPEC

    yield write
    sys.modules.pop("nb_hash_probe", None)


def test_a_changed_norm_source_changes_the_hash(hash_probe):
    first = hash_probe("1e-6").impl_hash()
    assert hash_probe("1e-6").impl_hash() == first  # rewritten identically: same hash
    changed = hash_probe("1e-5").impl_hash()
    assert changed != first
    assert hash_probe("1e-5").impl_hash("compile") not in (first, changed)


def test_bench_remeasures_a_changed_implementation(hash_probe, tmp_path, monkeypatch):
    ctx = group.Context(50.0, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: ctx)
    cases = [planning.Case("hash_probe", "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())]
    out = tmp_path / "res"
    spec = hash_probe("1e-6")
    s = sweep.run_sweep(cases, out, settings=FAST, progress=False, log=lambda m: None)
    assert s.written == 1
    s = sweep.run_sweep(cases, out, settings=FAST, progress=False, log=lambda m: None)
    assert s.already_done == 1 and s.written == 0  # same code: skipped as already in
    first = results.load(out)
    assert list(first["impl_hash"]) == [spec.impl_hash()]
    hash_probe("1e-5")
    ctx.impl_hashes.clear()
    s = sweep.run_sweep(cases, out, settings=FAST, progress=False, log=lambda m: None)
    assert s.already_done == 0 and s.written == 1  # changed code: measured again, kept apart from the old record
    df = results.load(out)
    assert len(df) == 2 and df["impl_hash"].nunique() == 2 and df["id"].nunique() == 2


def test_core_records_carry_impl_hash_and_flags(monkeypatch):
    from normbench.measure import noise

    # the machine running the tests may be busy; this test is about the hash, so the load reads quiet
    monkeypatch.setattr(noise, "machine_load", lambda own=0.0, busy=None: {"load1": 0.0, "cores": 2,
                                                                "background_load_per_core": 0.0})
    monkeypatch.setattr(noise, "REL_IQR_LIMIT", float("inf"))
    cases = [planning.Case("dyt", "eager", TINY, "float32", "fwd", "cpu", "hot", torch.get_num_threads())]
    ctx = group.Context(1e9, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None)
    [rec] = group.measure_group(cases, ctx)
    assert rec["impl_hash"] == normbench.get_norm("dyt").impl_hash("eager")
    assert rec["id"] == planning.case_id(cases[0], rec["provenance"]["hardware_id"])
    assert rec["flags"] == [] and results.validate_record(rec) == []
    assert schema.IMPL_HASH_RE.match(rec["impl_hash"])


# --- what each backend's hash covers ---------------------------------------------------------------------------------

def _all_hashes() -> dict[str, str]:
    """``{"norm/backend": hash}`` for every built-in norm and every backend the core runs for it (baselines too)."""
    out = {}
    for name in normbench.list_norms():
        spec = normbench.get_norm(name)
        if spec.package != "normbench":
            continue
        for backend in planning.backends_for(spec):
            out[f"{name}/{backend}"] = baselines.impl_hash(spec, backend)
    return out


@pytest.fixture
def edited_source(tmp_path, monkeypatch):
    """``edit(module)``: the hash from now on reads a copy of ``module``'s source with one line appended (the
    module itself is untouched; only the locator of source files is pointed at the copy)."""
    from normbench import registry

    real = registry._source_file
    edited: dict[str, str] = {}

    def locate(name):
        return edited.get(name) or real(name)

    monkeypatch.setattr(registry, "_source_file", locate)

    def edit(module: str):
        src = real(module)
        assert src is not None, f"{module} has no source file"
        copy_path = tmp_path / f"{module}.py"
        copy_path.write_text(open(src, encoding="utf-8").read() + "\n# edited\n", encoding="utf-8")
        edited[module] = str(copy_path)

    return edit


def _changed(before: dict, after: dict) -> set[str]:
    assert before.keys() == after.keys()
    return {k for k in before if before[k] != after[k]}


def test_each_backend_hash_covers_its_own_adapter_and_kernels_only(edited_source):
    from normbench.measure import baselines

    base = _all_hashes()
    backend_of = {k: k.split("/", 1)[1] for k in base}
    norm_of = {k: k.split("/", 1)[0] for k in base}
    triton_kernel = {"layernorm": "_rownorm", "rmsnorm": "_rownorm", "add_rmsnorm": "_rownorm", "dyt": "_pointwise",
                     "derf": "_pointwise", "groupnorm": "_groupnorm"}
    adapters = {b.build.__module__ for b in baselines.REGISTRY.values()}
    assert len(adapters) == 6  # native, liger, quack, te, flashinfer, apex

    expectations = {
        # an adapter module: its own library's baselines (every norm it implements, softmax included), nothing else
        **{m: {k for k in base if (backend_of[k], norm_of[k]) in baselines.REGISTRY
               and baselines.REGISTRY[(backend_of[k], norm_of[k])].build.__module__ == m} for m in adapters},
        "normbench.measure.adapters._base": {k for k in base if (backend_of[k], norm_of[k]) in baselines.REGISTRY},
        "normbench.kernels.compile_watch": {k for k in base if backend_of[k] == "compile"},
        "normbench.kernels.softmax_compiled": {k for k in base if backend_of[k].startswith("compile_")},
        "normbench.kernels._softmax": {k for k in base if backend_of[k].startswith("triton_")},
        "normbench.kernels.softmax_backend": {k for k in base if backend_of[k].startswith("triton_")},
        "normbench.kernels._softmax_module": {k for k in base if backend_of[k].startswith(("triton_", "compile_"))},
        "normbench.kernels.triton_backend": {k for k in base if backend_of[k] == "triton"},
        "normbench.kernels._common": {k for k in base if backend_of[k].startswith("triton")},
        "normbench.kernels._rownorm": {k for k in base if backend_of[k] == "triton"
                                       and triton_kernel.get(norm_of[k], "_rownorm") == "_rownorm"},
        "normbench.kernels._groupnorm": {"groupnorm/triton"},
    }
    assert "liger/rmsnorm" not in expectations["normbench.measure.adapters.quack"]
    assert {"rmsnorm/liger", "softmax/liger"} <= expectations["normbench.measure.adapters.liger"]
    assert {"rmsnorm/quack", "softmax/quack"} <= expectations["normbench.measure.adapters.quack"]
    for module, expected in expectations.items():
        assert expected, module
        edited_source(module)
        after = _all_hashes()
        assert _changed(base, after) == expected, module
        base = after
    assert "dyt/triton" not in expectations["normbench.kernels._rownorm"]


def test_a_baseline_hash_follows_the_library_version_and_its_entry(monkeypatch):
    from normbench.measure import baselines

    spec = normbench.get_norm("rmsnorm")
    first = baselines.impl_hash(spec, "liger")
    assert baselines.impl_hash(spec, "quack") != first
    monkeypatch.setattr(baselines.Baseline, "version", lambda self: "0.0.1-other")
    assert baselines.impl_hash(spec, "liger") != first
    monkeypatch.undo()
    b = baselines.get("liger", "rmsnorm")
    monkeypatch.setitem(baselines.REGISTRY, ("liger", "rmsnorm"), dataclasses.replace(b, forward_only=True))
    assert baselines.impl_hash(spec, "liger") != first
