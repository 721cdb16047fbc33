"""Flags on kernel records: non-finite results are invalid, busy machines make noisy records, and the site shows
every flag and ranks none of them."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import test_site_support as sup
import torch

from normbench import results
from normbench.measure import group, noise, planning, sweep
from normbench.measure.shapes import Shape
from normbench.measure.timers import TimerSettings
from normbench.site import aggregate as agg
from normbench.site import build_site
from normbench.site.records import Entry

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time=0.0)
TINY = Shape("tiny-tokens", "tokens", (16, 64), "quick")
QUIET = {"load1": 0.0, "cores": 2, "background_load_per_core": 0.0}

_PLUGINS = """
import torch
from torch import nn
from normbench import NormSpec, Paper

P = Paper("p", "a", 2024, "https://example.org/p")


class NaNOut(nn.Module):
    # forward divides by a sum of zeros: every output is NaN (a broken norm a plugin could ship)
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return self.weight * x / (x - x).sum(-1, keepdim=True)


class NaNGrad(nn.Module):
    # a finite forward whose backward is NaN: torch.where's unselected sqrt of a negative number
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        y = self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.where(torch.ones_like(x, dtype=torch.bool), y, torch.sqrt(-1.0 - x.pow(2)))


def _spec(name, cls):
    return NormSpec(name=name, title=name, paper=P, family="features", kind="activation", layouts=("tokens",),
                    formula="y = f(x)", factory=lambda c, layout="tokens", **kw: cls(c))


NAN_OUT = _spec("nan_out", NaNOut)
NAN_GRAD = _spec("nan_grad", NaNGrad)
"""


@pytest.fixture
def nan_norms(tmp_path, monkeypatch):
    """Two plugin-like norms from a real module on sys.path, registered as discovery would."""
    from normbench.discovery import REGISTRY

    (tmp_path / "nb_nan_plugins.py").write_text(textwrap.dedent(_PLUGINS))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    mod = importlib.import_module("nb_nan_plugins")
    monkeypatch.setitem(REGISTRY.specs, "nan_out", mod.NAN_OUT)
    monkeypatch.setitem(REGISTRY.specs, "nan_grad", mod.NAN_GRAD)
    # these tests are about non-finite values and ranking: a busy test machine must not add 'noisy' flags
    monkeypatch.setattr(noise, "machine_load", lambda own=0.0, busy=None: dict(QUIET))
    monkeypatch.setattr(noise, "REL_IQR_LIMIT", float("inf"))
    yield
    sys.modules.pop("nb_nan_plugins", None)


def _ctx(ceiling=50.0, spread=0.01):
    return group.Context(ceiling, "test ceiling", results.provenance(command="pytest", device="cpu"), FAST, None,
                         ceiling_spread=spread)


def _cases(norm, passes=("fwd", "bwd", "fwd+bwd")):
    return [planning.Case(norm, "eager", TINY, "float32", p, "cpu", "hot", torch.get_num_threads()) for p in passes]


def test_nan_output_makes_every_record_invalid_but_kept(nan_norms, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    s = sweep.run_sweep(_cases("nan_out") + _cases("nan_grad") + _cases("rmsnorm"), tmp_path, settings=FAST,
                        progress=False, log=lambda m: None)
    assert s.written == 9 and not s.failed
    assert results.load_report(tmp_path) == []  # invalid as a result, valid as a record: kept and readable
    recs = {(r["norm"]["name"], r["config"]["pass"]): r for _, r in results.iter_records(tmp_path)}
    for p in ("fwd", "bwd", "fwd+bwd"):
        r = recs["nan_out", p]
        assert "non_finite" in r["flags"] and "the output" in r["flag_reasons"]["non_finite"]
        assert results.is_invalid(r) and not results.is_ranked(r)
        assert results.is_ranked(recs["rmsnorm", p]) and not results.is_invalid(recs["rmsnorm", p])
    # only the passes that compute a gradient carry the NaN gradient
    assert results.is_ranked(recs["nan_grad", "fwd"])
    for p in ("bwd", "fwd+bwd"):
        r = recs["nan_grad", p]
        assert r["flags"] == ["non_finite"] and "gradient" in r["flag_reasons"]["non_finite"]
        assert "the output" not in r["flag_reasons"]["non_finite"]


def test_invalid_and_flagged_records_are_shown_but_never_ranked_on_the_site(nan_norms, tmp_path, monkeypatch):
    res = tmp_path / "results"
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx(ceiling=1e6))
    s = sweep.run_sweep(_cases("nan_out", ("fwd",)) + _cases("rmsnorm", ("fwd",)) + _cases("layernorm", ("fwd",)),
                        res, settings=FAST, progress=False, log=lambda m: None)
    assert s.written == 3
    noisy = sup.kernel("dyt", "eager", [16, 64], 1e-6, ceiling=1e6)
    results.add_flag(noisy, "noisy", "background load 1.40 per core")
    results.write_records([noisy], res)
    entries = [Entry(r, str(p), i) for i, (p, r) in enumerate(results.iter_records(res))]
    rows = [agg.kernel_row(e) for e in entries]
    agg.add_cache_residency(rows)
    by = {r["norm"]: r for r in rows}
    assert by["nan_out"]["invalid"] and by["dyt"]["flagged"] and not by["dyt"]["invalid"]
    assert not by["rmsnorm"]["flagged"]
    # the measured cases are tiny, hence cache-resident: ranked against their same-size copy (issue #28)
    ranked = [r["norm"] for r in agg.best_by_bandwidth(rows, 10) + agg.best_by_same_size_copy(rows, 10)]
    assert "nan_out" not in ranked and "dyt" not in ranked and "rmsnorm" in ranked
    assert {r["norm"] for b in ("dram", "copy") for r in agg.best_backend_per_norm(rows, b)} == {"rmsnorm",
                                                                                              "layernorm"}
    assert [r["norm"] for r in agg.rank_by_bandwidth(rows)][-2:] == ["dyt", "nan_out"]
    report = build_site(res, tmp_path / "site")
    assert report.records == 4
    html = (tmp_path / "site" / "kernels.html").read_text()
    assert 'class="flag flag-non_finite"' in html and 'class="flag flag-noisy"' in html
    assert ">failed</span>" in html and "background load 1.40 per core" in html
    index = (tmp_path / "site" / "index.html").read_text()
    for title in ("Closest to the DRAM bandwidth ceiling", "Closest to a same-size copy"):
        if title not in index:  # the same-size section is left out when no record is ranked in it
            continue
        best = index.split(title, 1)[1]
        assert "nan_out" not in best.split("</table>")[0] and "dyt" not in best.split("</table>")[0]


def test_v1_suspect_records_show_as_flagged_on_the_site():
    rec = sup.kernel("rmsnorm", "compile", [64, 256], 4.4e-6, suspect=True)
    v1 = {k: v for k, v in rec.items() if k not in ("impl_hash", "flags", "flag_reasons", "check")}
    v1["schema_version"] = 1
    row = agg.kernel_row(Entry(v1, "x.json", 0))
    assert row["flagged"] and row["suspect"] and "cache-resident" in row["flags"]["suspect"]


def test_busy_machine_flags_records_noisy_with_the_reason():
    cases = _cases("dyt", ("fwd",))
    prep = group.Prepared(results_spec("dyt"), "eager", TINY, "float32", "cpu")
    samples = [1e-3, 1.1e-3, 1.2e-3]
    err = {"y": {"max_abs": 0.0, "max_rel": 0.0}}
    calm = group.build_record(prep, cases[0], _ctx(1e6, 0.01), samples, False, err, None, None, QUIET)
    assert calm["flags"] == [] and calm["metrics"]["noise"]["rel_iqr"] == pytest.approx(1e-4 / 1.1e-3)
    busy = {"load1": 5.0, "cores": 2, "background_load_per_core": 2.0}
    loaded = group.build_record(prep, cases[0], _ctx(1e6, 0.01), samples, False, err, None, None, busy)
    assert loaded["flags"] == ["noisy"] and "background load 2.00 per core" in loaded["flag_reasons"]["noisy"]
    shaky = group.build_record(prep, cases[0], _ctx(1e6, 0.35), samples, False, err, None, None, QUIET)
    assert shaky["flags"] == ["noisy"] and "spread by 35%" in shaky["flag_reasons"]["noisy"]
    spread = group.build_record(prep, cases[0], _ctx(1e6, 0.01), [1e-3, 1e-3, 3e-3, 3e-3], False, err, None, None,
                                QUIET)
    assert spread["flags"] == ["noisy"] and "IQR / median" in spread["flag_reasons"]["noisy"]
    for r in (calm, loaded, shaky, spread):
        assert results.validate_record(r) == []


def test_machine_load_subtracts_the_benchmarks_own_threads(monkeypatch):
    monkeypatch.setattr(noise, "load_average", lambda: 3.0)
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 4)
    assert noise.machine_load(own=2.0) == {"load1": 3.0, "cores": 4, "background_load_per_core": 0.25}
    assert noise.machine_load(own=8.0)["background_load_per_core"] == 0.0
    assert noise.own_load("cuda", 16) == 1.0 and noise.own_load("cpu", 3) == 3.0
    assert "busy" in noise.busy_warning("cpu", 1, busy=lambda: 3.0)  # 3 / 4 = 0.75 per core before the run starts
    assert "busy" in noise.busy_warning("cpu", 1, busy=lambda: None)  # no /proc/stat: the load average decides
    # the load average still counts a run that ended a moment ago: idle cores now are no warning
    assert noise.busy_warning("cpu", 1, busy=lambda: 0.2) is None
    monkeypatch.setattr(noise, "load_average", lambda: 1.0)
    assert noise.busy_warning("cpu", 1, busy=lambda: 3.0) is None


def test_busy_cores_reads_the_non_idle_share_of_proc_stat(monkeypatch):
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    # user nice system idle iowait irq softirq steal: 150 of 200 jiffies busy between the two readings
    texts = iter(["cpu  100 0 100 1000 0 0 0 0 0 0\n", "cpu  200 0 150 1040 10 0 0 0 0 0\n"])
    assert noise.busy_cores(0.0, read=lambda: next(texts), sleep=lambda s: None) == 2 * 150 / 200
    assert noise.busy_cores(0.0, read=lambda: "garbage", sleep=lambda s: None) is None
    real = noise.busy_cores(0.05)
    assert real is None or 0.0 <= real <= 2.0 + 1e-9


def test_bench_warns_at_start_on_a_busy_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(noise, "load_average", lambda: 64.0)
    monkeypatch.setattr(noise, "busy_cores", lambda: 64.0)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    logged = []
    sweep.run_sweep(_cases("dyt", ("fwd",)), tmp_path, settings=FAST, progress=False, log=logged.append)
    assert "this machine is busy" in logged[0]
    [rec] = [r for _, r in results.iter_records(tmp_path)]
    assert "noisy" in rec["flags"]


def test_bench_warns_when_the_runs_ceiling_alone_flags_every_record(monkeypatch, tmp_path):
    monkeypatch.setattr(noise, "load_average", lambda: 0.0)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx(spread=0.108))
    logged = []
    sweep.run_sweep(_cases("dyt", ("fwd",)), tmp_path, settings=FAST, progress=False, log=logged.append)
    assert any("spread by 11%" in m and "will be flagged 'noisy'" in m for m in logged)
    [rec] = [r for _, r in results.iter_records(tmp_path)]
    assert "noisy" in rec["flags"]
    assert noise.ceiling_warning(0.05) is None and noise.ceiling_warning(None) is None


def results_spec(name):
    import normbench

    return normbench.get_norm(name)


def test_a_load_average_left_by_the_benchmarks_own_bursts_is_not_background(monkeypatch, tmp_path):
    """The load average remembers a minute, this benchmark's own ``torch.compile`` worker processes included (12-17
    on 2 cores in a quick sweep, the cores idle again when the cases were timed): above the limit it is confirmed by
    half a second of ``/proc/stat``, and records measured with idle cores are not ``noisy``; with the cores busy they
    are."""
    monkeypatch.setattr(noise, "load_average", lambda: 14.0)
    monkeypatch.setattr(noise.os, "cpu_count", lambda: 2)
    calls = []
    idle = noise.machine_load(own=1.0, busy=lambda: calls.append(1) or 0.1)
    assert calls and idle["busy_cores"] == 0.1 and idle["background_load_per_core"] == pytest.approx(0.05)
    busy = noise.machine_load(own=1.0, busy=lambda: 1.8)
    assert busy["background_load_per_core"] == pytest.approx(0.9) and busy["load1"] == 14.0
    assert noise.reasons(idle) == [] and "background load 0.90" in noise.reasons(busy)[0]
    # below the limit nothing is sampled (no half-second wait per group on a quiet machine)
    monkeypatch.setattr(noise, "load_average", lambda: 1.5)
    assert noise.machine_load(own=1.0, busy=lambda: calls.append(2) or 2.0)["background_load_per_core"] == 0.25
    assert 2 not in calls
    # through a real sweep: the load average says busy, the sample says idle -> the record is not flagged noisy
    monkeypatch.setattr(noise, "load_average", lambda: 14.0)
    monkeypatch.setattr(noise, "busy_cores", lambda: 0.1)
    monkeypatch.setattr(sweep, "make_context", lambda device, settings=None, command=None: _ctx())
    logged = []
    sweep.run_sweep(_cases("dyt", ("fwd",)), tmp_path, settings=FAST, progress=False, log=logged.append)
    assert not any("this machine is busy" in m for m in logged)
    [rec] = [r for _, r in results.iter_records(tmp_path)]
    assert "noisy" not in rec["flags"] or "background load" not in rec["flag_reasons"]["noisy"]
    assert rec["metrics"]["noise"]["busy_cores"] == 0.1
