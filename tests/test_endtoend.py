"""The end-to-end measurement (``normbench.measure.endtoend``, ``bench --model NAME --end-to-end``) and its place on
the By-model page. No timing is asserted: the plumbing (paired rounds, the profiler's norm ranges, the records and
their flags) is checked on small real models; the page's estimate-versus-measurement verdict on planted records."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from normbench.measure import endtoend
from normbench.measure.timers import TimerSettings
from normbench.records.schema import validate_record

FAST = TimerSettings(warmup=1, min_reps=6, max_reps=6, min_time=0.0, max_time=5.0)


@pytest.fixture(autouse=True)
def _one_thread():
    """One thread: two on a shared 2-core machine spin against the other jobs (a 16-token GPT step took 1.2 s)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class _Twice(nn.Module):
    """A stand-in for a policy's module: the same norm (its own parameters, so the state_dict keys stay), run twice."""

    def __init__(self, inner: nn.Module, change: float = 0.0):
        super().__init__()
        self.inner, self.change = inner, change

    def forward(self, x):
        self.inner(x)
        return self.inner(x) + self.change


def _swap(change: float = 0.0):
    calls = {"restored": 0}

    def apply(model, policy):
        paths = endtoend.norm_paths(model)
        for p in paths:
            parent, _, name = p.rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            setattr(owner, name, _Twice(getattr(owner, name), change))
        return {"replaced": paths, "left": []}

    def restore(model):
        calls["restored"] += 1

    return apply, restore, calls


def _gpt(layers=1):
    from normbench import catalog

    built = endtoend.build("gpt2", layers=layers, vocab=64)
    assert catalog.get("gpt2").architecture == "gpt2"
    return built


def test_norm_paths_finds_the_norms_and_nothing_else():
    built = _gpt(layers=2)
    paths = endtoend.norm_paths(built.model)
    # pre-LN GPT: two norms per block and the final one; no linear, embedding or attention module
    assert len(paths) == 2 * 2 + 1 and paths[-1] == "norm_f"
    mods = dict(built.model.named_modules())
    assert all("LayerNorm" in type(mods[p]).__name__ or type(mods[p]).__module__.startswith("normbench.norms")
               for p in paths)


def test_measure_pairs_the_two_steps_profiles_the_norms_and_writes_valid_records(tmp_path):
    from normbench import results

    built = _gpt()
    before = copy.deepcopy(built.model.state_dict())
    apply, restore, calls = _swap()
    got = []

    def apply_seen(model, policy):
        got.append(model)
        return apply(model, policy)
    steps = [endtoend.Step("prefill-1x16", 1, 16, 0), endtoend.Step("decode-2", 2, 1, 0)]
    out = endtoend.measure(built, {"policy": []}, steps, ("fwd", "fwd+bwd"), apply=apply_seen, restore=restore,
                           vocab=64, settings=FAST, log=lambda m: None)
    assert calls["restored"] == 1 and len(out) == 4
    # the policy's copy is another module tree over the same weights: every parameter and buffer is the original's
    # own tensor (two copies of the weights at other addresses differ in step time by themselves)
    (copy_,) = got
    assert copy_ is not built.model
    for kind in ("named_parameters", "named_buffers"):
        mine = dict(getattr(built.model, kind)())
        theirs = {k.replace(".inner.", "."): t for k, t in getattr(copy_, kind)()}
        assert mine and mine.keys() == theirs.keys() and all(theirs[k] is t for k, t in mine.items())
    # the original model is left as it was: its own modules and weights (only the copy got the policy)
    assert all(not isinstance(m, _Twice) for m in built.model.modules())
    assert all(torch.equal(v, built.model.state_dict()[k]) for k, v in before.items())
    prov = results.provenance(command="pytest", device="cpu")
    for m in out:
        assert len(m["samples"]["original"]) == len(m["samples"]["policy"]) == 6 == m["paired"]["n"]
        # every norm call of a forward (2 per block + final) sits in its profiler range, on both sides
        assert m["profile"]["original"]["norm_calls"] == m["profile"]["policy"]["norm_calls"] == 3
        for side in ("original", "policy"):
            assert 0 < m["profile"][side]["norm_share"] < 1
        assert m["same_outputs"]["max_abs"] == 0.0
        rec = endtoend.record(m, built, {"source": "test"}, prov)
        assert validate_record(rec) == [] and rec["kind"] == "endtoend"
        assert "suspect" not in rec["flags"]
        assert rec["metrics"]["paired"]["ratio"] == pytest.approx(m["paired"]["ratio"])
    # the records round-trip through the store, one file per model
    paths = results.write_records([endtoend.record(m, built, {"source": "test"}, prov) for m in out], tmp_path)
    assert [p.name for p in paths] == ["gpt2.json.gz"] and paths[0].parent.parent.name == "endtoend"
    assert len(results.records_that_count(tmp_path, kind="endtoend").records) == 4


def test_a_policy_that_changes_the_model_is_flagged_not_a_speed_up():
    built = _gpt()
    apply, restore, _ = _swap(change=0.5)
    [m] = endtoend.measure(built, {}, [endtoend.Step("decode-2", 2, 1, 0)], ("fwd",), apply=apply, restore=restore,
                           vocab=64, settings=FAST, log=lambda m: None)
    from normbench import results

    rec = endtoend.record(m, built, {"source": "test"}, results.provenance(command="pytest", device="cpu"))
    assert "suspect" in rec["flags"] and "not the same model" in rec["flag_reasons"]["suspect"]
    assert validate_record(rec) == []


def test_old_records_stay_valid_and_an_endtoend_record_needs_its_fields():
    from normbench import results

    built = _gpt()
    apply, restore, _ = _swap()
    [m] = endtoend.measure(built, {}, [endtoend.Step("decode-1", 1, 1, 0)], ("fwd",), apply=apply, restore=restore,
                           vocab=64, settings=FAST, log=lambda m: None)
    rec = endtoend.record(m, built, {}, results.provenance(command="pytest", device="cpu"))
    broken = copy.deepcopy(rec)
    del broken["metrics"]["paired"]
    assert any("paired" in p for p in validate_record(broken))


def _tiny_catalog(monkeypatch, arch: str):
    from normbench import catalog

    real = catalog.get("qwen3-8b" if arch == "qwen3" else "llama-3.1-8b")

    class Tiny:
        architecture = arch
        config = {**real.config, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 16}

    monkeypatch.setattr(endtoend, "_catalog_model", lambda key: Tiny)


@pytest.mark.parametrize("arch,per_layer", [("llama", 2), ("qwen3", 4)])
def test_transformers_models_are_built_from_a_config_and_their_norms_found(monkeypatch, arch, per_layer):
    pytest.importorskip("transformers")
    _tiny_catalog(monkeypatch, arch)
    built = endtoend.build("x", layers=2, vocab=64)
    paths = endtoend.norm_paths(built.model)
    assert len(paths) == 2 * per_layer + 1  # input, post-attention (+ q, k norms in Qwen3) per layer, the final
    apply, restore, _ = _swap()
    out = endtoend.measure(built, {}, [endtoend.Step("decode-2", 2, 1, 8)], ("fwd+bwd",), apply=apply,
                           restore=restore, vocab=64, settings=FAST, log=lambda m: None)
    for m in out:
        assert m["profile"]["original"]["norm_calls"] == len(paths)
        assert m["same_outputs"]["max_abs"] == 0.0


# --- the By-model page --------------------------------------------------------------------------------------------

def _e2e_record(ratio, lo, hi, share=0.2, context=128, **prov):
    import test_site_support as sup

    from normbench.records.schema import make_record

    cfg = {"model": sup.MODEL, "built": {"architecture": "transformers LlamaForCausalLM", "num_hidden_layers": 2},
           "regime": "decode-8", "batch": 8, "tokens": 1, "context": context, "pass": "fwd", "dtype": "float32",
           "device": "cpu", "threads": 8, "policy": {"source": "test"}}
    met = {"time_original_s": 1e-2, "time_policy_s": 1e-2 * ratio, "paired": {"ratio": ratio, "ci": [lo, hi],
                                                                                "n": 20, "verdict": "faster"},
           "norm_share_original": share, "norm_share_policy": share / 2, "norm_time_original_s": 2e-3,
           "norm_time_policy_s": 1e-3, "rounds": 20, "same_outputs": {"max_abs": 0.0}}
    return make_record("endtoend", sup.norm_meta("rmsnorm", title="RMSNorm"), cfg, met,
                       sup.prov(sup.CPU_HW, sup.MODEL_HW, **prov))


@pytest.mark.parametrize("ci,agree", [((0.88, 0.92), "yes"), ((0.99, 1.01), "no")])
def test_the_model_page_shows_the_measurement_beside_the_estimate_and_says_when_they_disagree(tmp_path, ci, agree):
    """Planted: decode-8 has compile 2x over eager at every plain site (test_site_support.model_records), so the
    per-site estimate says the policy halves the norm time; with a 20 % norm share the step should take
    1 - 0.2 x 0.5 = 0.9 of the original's time. A measured [0.88, 0.92] agrees; [0.99, 1.01] disagrees."""
    import re

    import test_site_support as sup

    from normbench.results import write_records
    from normbench.site import build_site
    from normbench.site.bymodel import model_file

    write_records(sup.model_records() + [_e2e_record(sum(ci) / 2, *ci)], tmp_path / "results")
    report = build_site(tmp_path / "results", tmp_path / "site", charts=False, jobs=1, cache=False)
    assert not report.rejected
    html = (tmp_path / "site" / model_file(sup.MODEL, sup.MODEL_HW)).read_text(encoding="utf-8")
    assert 'id="end-to-end"' in html
    row = re.search(r'<tr data-regime="decode-8" data-pass="fwd" data-agree="(\w*)">(.*?)</tr>', html, re.S)
    assert row and row.group(1) == agree
    assert "1.111x (norms 2.00x faster at decode-8)" in row.group(2)
    assert ("disagrees with the measurement" in row.group(2)) == (agree == "no")


def test_the_model_page_leads_with_the_newest_measurement_of_each_step(tmp_path):
    """Two decode-8 fwd records (an older dispatch's at 64 cached tokens, disagreeing; today's at 128, agreeing):
    the table holds the newest, each row says when and by which commit it was measured, and the older one is under
    "Earlier measurements" (it was shown beside the newer as if both were current)."""
    import re

    import test_site_support as sup

    from normbench.results import write_records
    from normbench.site import build_site
    from normbench.site.bymodel import model_file

    old = _e2e_record(1.0, 0.99, 1.01, context=64, ts="2026-11-27T07:55:52Z", git_commit="162561e7" + "0" * 32)
    new = _e2e_record(0.9, 0.88, 0.92, ts="2026-11-29T05:12:35Z", git_commit="4ee2ce69" + "0" * 32)
    write_records(sup.model_records() + [old, new], tmp_path / "results")
    build_site(tmp_path / "results", tmp_path / "site", charts=False, jobs=1, cache=False)
    html = (tmp_path / "site" / model_file(sup.MODEL, sup.MODEL_HW)).read_text(encoding="utf-8")
    main, _, rest = html.partition('<details class="bm-e2e-earlier">')
    rows = re.findall(r'<tr data-regime="decode-8" data-pass="fwd" data-agree="(\w*)">(.*?)</tr>', main, re.S)
    assert [a for a, _ in rows] == ["yes"] and "2026-11-29 · 4ee2ce6" in rows[0][1]
    assert "over 128 cached" in rows[0][1]
    assert "Earlier measurements (1)" in rest
    earlier = re.findall(r'<tr data-regime="decode-8" data-pass="fwd" data-agree="(\w*)">(.*?)</tr>',
                         rest.partition("</details>")[0], re.S)
    assert [a for a, _ in earlier] == ["no"] and "2026-11-27 · 162561e" in earlier[0][1]
    assert "over 64 cached" in earlier[0][1]


def test_the_end_to_end_command_refuses_what_it_cannot_measure(tmp_path, capsys):
    from normbench.cli import main

    assert main(["bench", "--end-to-end", "--out", str(tmp_path)]) != 0
    assert "--end-to-end needs --model" in capsys.readouterr().err
    # no record at the model's shapes: the policy names no backend, so there is nothing to apply (and no build)
    (tmp_path / "kernel").mkdir()
    assert main(["bench", "--model", "llama-3.1-8b", "--end-to-end", "--out", str(tmp_path)]) == 1
    assert "names no backend anywhere" in capsys.readouterr().err
