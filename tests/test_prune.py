"""``normbench prune``: accuracy records from changed model or norm code leave results/; current ones, kernel
records and records this installation cannot judge stay."""

from __future__ import annotations

import test_site_support as sup

import normbench
from normbench.cli import main
from normbench.models import model_hash
from normbench.results.schema import make_record
from normbench.results.store import iter_records, write_records


def _accuracy(norm: str, seed: int, *, model_h: str | None = None, impl_h: str | None = None,
              recipe: dict | None = None) -> dict:
    rec = sup.accuracy(norm, seed, 0.5, task="synth-shapes", model="resnet", offline=True)
    if recipe is not None:
        rec["config"]["recipe"] = recipe
    rec["config"]["model_hash"] = model_h or model_hash("resnet")
    impl = impl_h or (normbench.get_norm(norm).impl_hash("eager") if norm in normbench.list_norms() else "a" * 16)
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
