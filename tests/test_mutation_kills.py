"""Tests written to kill the mutants scripts/mutation.sh found surviving (issue #52 item 2; docs/mutation-report.md):
each pins a behaviour the earlier tests left free. Records are the committed ones in results/, read through the
store's reader."""

from __future__ import annotations

import copy
import importlib.metadata
from pathlib import Path

import pytest

from normbench.records import iter_records
from normbench.results import staleness

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def committed() -> dict:
    """A current committed kernel record and a current committed accuracy record of results/."""
    out = {}
    files = {"kernel": "kernel/cpu-amd-epyc-2c/rmsnorm.json.gz", "accuracy": "accuracy/synth-lm/cpu-amd-epyc-2c"}
    for kind, where in files.items():
        for _, rec in iter_records(ROOT / "results" / where, kind=kind, errors="raise"):
            if staleness.stale_reason(rec) == (None, None) and rec.get("impl_hash"):
                out[kind] = rec
                break
    assert set(out) == {"kernel", "accuracy"}
    return out


# --- results/staleness.py ------------------------------------------------------------------------------------------

def test_the_stale_flags_reason_names_the_change_and_what_to_do(committed):
    kernel = copy.deepcopy(committed["kernel"])
    now = kernel["impl_hash"]
    kernel["impl_hash"] = "0" * 16
    name, backend = kernel["norm"]["name"], kernel["config"]["backend"]
    assert staleness.stale_flag_reason(kernel) == (
        f"made by code that has since changed: norm code changed ({name}/{backend}: {'0' * 16} -> {now}); "
        "`normbench bench` on that machine measures today's code")
    acc = copy.deepcopy(committed["accuracy"])
    acc["config"]["model_hash"] = "1" * 16
    why = staleness.stale_flag_reason(acc)
    assert why.startswith("made by code that has since changed: model code changed (")
    assert why.endswith("; `normbench prune` removes it; re-run the cell for today's code")
    assert staleness.stale_flag_reason(committed["kernel"]) is None


def test_the_callers_cache_is_filled_and_used(committed):
    cache: dict = {}
    assert staleness.stale_flag_reason(committed["kernel"], cache) is None
    [(key, value)] = cache.items()
    assert key[0] == "impl" and value == committed["kernel"]["impl_hash"]
    cache[key] = "f" * 16  # what the cache says is what the record is judged by
    assert "-> " + "f" * 16 in staleness.stale_reason(committed["kernel"], cache)[0]


def test_a_baselines_library_version_and_its_absence():
    assert staleness._libraries({"config": {"baseline_version": "liger-kernel 0.5.10"}})["baseline"] == "0.5.10"
    assert staleness._libraries({"config": {"baseline_version": "liger-kernel not installed"}})["baseline"] is None
    assert staleness._libraries({"provenance": {"torch": "2.13.0", "triton": None}}) == {"torch": "2.13.0",
                                                                                          "triton": None}


def test_a_record_of_an_unknown_backend_says_which(committed):
    rec = copy.deepcopy(committed["kernel"])
    rec["config"]["backend"] = "no_such_backend"
    why, unknown = staleness.stale_reason(rec)
    assert why is None and f"norm {rec['norm']['name']!r} has no backend or baseline 'no_such_backend' here" in unknown


def test_model_hash_without_timm_is_the_hash_at_no_timm_version(monkeypatch):
    """A record made where timm was absent (provenance without a timm version) is judged by the hash models.model_hash
    gives without timm."""
    from normbench import models

    real = importlib.metadata.version

    def version(dist):
        if dist == "timm":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    timm_models = [m for m, srcs in models._MODEL_SOURCES.items() if "timm_models.py" in srcs]
    assert timm_models
    monkeypatch.setattr(importlib.metadata, "version", version)
    for m in timm_models:
        assert staleness.model_hash_at(m, None) == models.model_hash(m), m


def test_a_shared_cache_keeps_library_versions_apart(committed):
    """Two records of one norm and backend, one at the installed torch and one naming another torch, judged with one
    cache: the second is judged by the hash at its own torch version (stale), not by the first one's cached hash."""
    cache: dict = {}
    now = committed["kernel"]
    assert staleness.stale_reason(now, cache) == (None, None)
    other = copy.deepcopy(now)
    other["provenance"]["torch"] = "0.0.1"
    why, _ = staleness.stale_reason(other, cache)
    assert why and "norm code changed" in why
    assert staleness.stale_reason(now, cache) == (None, None) and len(cache) == 2


def test_a_recipe_change_lists_every_option_the_norm_now_gets(committed, monkeypatch):
    """The recipe-changed reason names each option a norm's recipe now derives, comma-separated (today only
    PowerNorm derives one; two are planted here)."""
    from normbench.train import recipes

    monkeypatch.setitem(recipes.NORM_KWARGS_FROM_RECIPE, "powernorm", lambda recipe: {"a": 1, "b": "x"})
    acc = copy.deepcopy(committed["accuracy"])
    acc["norm"]["name"], acc["impl_hash"] = "powernorm", ""
    acc["config"]["recipe"] = dict(acc["config"].get("recipe") or {}, norm_kwargs={})
    why, _ = staleness.stale_reason(acc)
    assert why == ("recipe changed (powernorm now gets a=1, b='x' from its recipe; "
                   "train.recipes.NORM_KWARGS_FROM_RECIPE)")


def test_every_reason_a_record_is_stale_is_given(committed):
    acc = copy.deepcopy(committed["accuracy"])
    acc["impl_hash"], acc["config"]["model_hash"] = "0" * 16, "1" * 16
    why, _ = staleness.stale_reason(acc)
    norm, model = why.split("; ")
    assert norm.startswith("norm code changed (") and model.startswith("model code changed (")
