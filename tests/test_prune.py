"""``normbench prune``: accuracy records from changed model or norm code leave results/; current ones, kernel
records and records this installation cannot judge stay."""

from __future__ import annotations

import test_site_support as sup

import normbench
from normbench.cli import main
from normbench.models import model_hash
from normbench.records.schema import make_record
from normbench.records.store import iter_records, write_records
from normbench.results.staleness import model_hash_at


def _accuracy(norm: str, seed: int, *, model_h: str | None = None, impl_h: str | None = None,
              recipe: dict | None = None) -> dict:
    rec = sup.accuracy(norm, seed, 0.5, task="synth-shapes", model="resnet", offline=True)
    if recipe is not None:
        rec["config"]["recipe"] = recipe
    rec["config"]["model_hash"] = model_h or model_hash("resnet")
    impl = impl_h or (sup.current_impl_hash(norm, "eager", rec["provenance"]) if norm in normbench.list_norms()
                      else "a" * 16)
    return make_record("accuracy", rec["norm"], rec["config"], rec["metrics"], rec["provenance"], impl_hash=impl)


def test_prune_removes_only_records_of_changed_code(tmp_path, capsys):
    current = _accuracy("groupnorm", 0)
    old_model = _accuracy("groupnorm", 1, model_h="0" * 16)
    old_norm = _accuracy("batchnorm", 0, impl_h="f" * 16)
    plugin = _accuracy(dict(sup.norm_meta("groupnorm"), name="not_installed_norm"), 2)
    write_records([current, old_model, old_norm, plugin], tmp_path)
    before = {r["id"] for _, r in iter_records(tmp_path)}
    assert len(before) == 4

    assert main(["prune", "--dry-run", str(tmp_path)]) == 0
    assert {r["id"] for _, r in iter_records(tmp_path)} == before  # a dry run changes nothing
    out = capsys.readouterr().out
    assert "would remove 2 stale" in out and "model code changed" in out and "norm code changed" in out

    assert main(["prune", str(tmp_path)]) == 0
    after = {r["id"] for _, r in iter_records(tmp_path)}
    assert after == {current["id"], plugin["id"]}
    assert "cannot recompute" in capsys.readouterr().err  # the unknown norm is reported, not removed
    assert main(["prune", str(tmp_path)]) == 0 and {r["id"] for _, r in iter_records(tmp_path)} == after


def test_prune_removes_records_made_before_the_norm_took_an_option_from_its_recipe(tmp_path, capsys):
    # PowerNorm's warm-up now comes from the recipe (train.recipes.NORM_KWARGS_FROM_RECIPE); a record whose recipe
    # lacks it ran PowerNorm with its one-step default, so it is another, stale cell.
    from normbench.train.recipes import cell_recipe

    now = cell_recipe("synth-shapes", "resnet", "powernorm").to_dict()
    assert now["norm_kwargs"] == {"warmup_iters": now["warmup_steps"]}
    before = {k: v for k, v in now.items() if k != "norm_kwargs"}
    ln_recipe = cell_recipe("synth-shapes", "resnet", "layernorm").to_dict()
    current, old, other = (_accuracy("powernorm", 0, recipe=now), _accuracy("powernorm", 1, recipe=before),
                           _accuracy("layernorm", 0, recipe=ln_recipe))
    write_records([current, old, other], tmp_path)
    assert main(["prune", str(tmp_path)]) == 0
    assert "recipe changed (powernorm now gets warmup_iters=12" in capsys.readouterr().out
    assert {r["id"] for _, r in iter_records(tmp_path)} == {current["id"], other["id"]}


def test_a_record_from_a_machine_with_other_library_versions_is_judged_by_its_code(tmp_path, capsys):
    # A GPU machine's records name its own torch, Triton and timm; today's code hashes the same there, so they are
    # current, not "changed code" because this machine's torch differs. A record of changed code from that machine
    # is still stale.
    libs = {"torch": "2.99.0+cu129", "triton": "9.9.9"}
    other = {**libs, "timm": "0.0.1"}
    gpu = _accuracy("groupnorm", 0, model_h=model_hash_at("resnet", other["timm"]),
                    impl_h=normbench.get_norm("groupnorm").impl_hash("eager", libraries=libs))
    gpu_old = _accuracy("groupnorm", 1, model_h=model_hash_at("resnet", other["timm"]), impl_h="f" * 16)
    for rec in (gpu, gpu_old):
        rec["provenance"].update(other)
    assert gpu["impl_hash"] != normbench.get_norm("groupnorm").impl_hash("eager")  # what the old prune compared
    assert gpu["config"]["model_hash"] != model_hash("resnet")
    write_records([gpu, gpu_old], tmp_path)
    assert main(["prune", str(tmp_path)]) == 0
    assert "removed 1 stale" in capsys.readouterr().out
    assert {r["id"] for _, r in iter_records(tmp_path)} == {gpu["id"]}


def test_stale_reason_judges_kernel_records_by_their_implementation_hash():
    from normbench.results.staleness import stale_reason

    spec = normbench.get_norm("rmsnorm")
    p = {"torch": "2.99.0+cu129", "triton": "9.9.9"}
    now = sup.kernel("rmsnorm", "compile", [8, 512], 1e-4)
    now["provenance"].update(p)
    now["impl_hash"] = spec.impl_hash("compile", libraries=p)
    assert stale_reason(now) == (None, None)
    assert spec.impl_hash("compile", libraries=p) != spec.impl_hash("eager", libraries=p)  # the backend's code counts
    old = {**now, "impl_hash": spec.impl_hash("eager", libraries=p)}
    why, unknown = stale_reason(old)
    assert unknown is None and "norm code changed (rmsnorm/compile" in why
    legacy = {**now, "impl_hash": ""}  # a migrated v1 record: nothing to judge it by
    assert stale_reason(legacy) == (None, None)
    plugin = {**now, "norm": {**now["norm"], "name": "not_installed_norm"}}
    assert stale_reason(plugin)[0] is None and "cannot recompute" in stale_reason(plugin)[1]


def test_impl_hash_at_this_machines_library_versions_is_the_default():
    from normbench.records.provenance import provenance

    spec, p = normbench.get_norm("layernorm"), provenance(device="cpu")
    assert spec.impl_hash("eager", libraries={"torch": p["torch"], "triton": p["triton"]}) == spec.impl_hash("eager")
    assert spec.impl_hash("eager", libraries={"torch": "0.0", "triton": p["triton"]}) != spec.impl_hash("eager")
    from normbench.models import MODEL_LAYOUT

    for model in MODEL_LAYOUT:  # the re-implementation hashes exactly as models.model_hash does
        assert model_hash_at(model, p["timm"]) == model_hash(model), model
    assert model_hash_at("resnet", "0.0.1") != model_hash("resnet")


def test_stale_reason_judges_an_external_baselines_record_at_its_library_version():
    # F.rms_norm ("native", library torch): the hash covers the adapter's code and the library's version, which the
    # record names in config.baseline_version; an adapter edit since (here: another hash) makes the record stale.
    from normbench.measure import baselines
    from normbench.results.staleness import stale_reason

    spec = normbench.get_norm("rmsnorm")
    libs = {"torch": "2.99.0+cu129", "triton": "9.9.9", "baseline": "2.99.0+cu129"}
    rec = sup.kernel("rmsnorm", "native", [8, 512], 1e-4)
    rec["provenance"].update(torch=libs["torch"], triton=libs["triton"])
    rec["config"]["baseline_version"] = f"torch {libs['baseline']}"
    rec["impl_hash"] = baselines.impl_hash(spec, "native", libraries=libs)
    assert rec["impl_hash"] != baselines.impl_hash(spec, "native")  # this machine's torch is another
    assert stale_reason(rec) == (None, None)
    older = {**rec, "config": {**rec["config"], "baseline_version": "torch 2.98.0+cu129"}}
    assert "norm code changed (rmsnorm/native" in stale_reason(older)[0]
    unknown = {**rec, "config": {**rec["config"], "backend": "some_library"}}
    assert stale_reason(unknown)[0] is None and "cannot recompute" in stale_reason(unknown)[1]


def test_the_pandas_loader_flags_stale_records_unless_asked_for_them_as_stored(tmp_path):
    from normbench import results

    now = sup.kernel("rmsnorm", "compile", [8, 512], 1e-4)
    old = make_record("kernel", now["norm"], now["config"], now["metrics"], now["provenance"], impl_hash="f" * 16,
                      check=now["check"])
    write_records([now, old], tmp_path)
    df = results.load(tmp_path).set_index("id")
    assert df.loc[now["id"], "flags"] == () and df.loc[old["id"], "flags"] == ("stale",)
    assert "norm code changed (rmsnorm/compile" in df.loc[old["id"], "flag_reasons"]["stale"]
    assert results.load(tmp_path, as_stored=True).set_index("id").loc[old["id"], "flags"] == ()
