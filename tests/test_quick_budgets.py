"""``--quick`` is minutes on a laptop CPU for every task: on a real task it shrinks the model, the batch, the GPT's
context and the evaluations with the steps, and the record's recipe says so; offline recipes are their own quick
budget, unchanged. (Sizes, not timings: the measured times are in docs/accuracy.md.)"""

from __future__ import annotations

import pytest

from normbench.tasks import get_task
from normbench.train.recipes import RECIPES, cell_recipe, recipe_hash

REAL = sorted(n for n, r in RECIPES.items() if not get_task(r.task).offline)
OFFLINE = sorted(n for n, r in RECIPES.items() if get_task(r.task).offline)
#: A norm each model trains with.
NORM = {"resnet": "groupnorm", "vit": "layernorm", "gpt": "layernorm", "fixup_resnet": "none",
        "skipinit_resnet": "none", "nf_resnet": "scaled_ws"}


def _params(recipe) -> int:
    from normbench.models import build_model
    from normbench.train.loop import model_options

    built = build_model(recipe.model, get_task(recipe.task), NORM[recipe.model],
                        **model_options(recipe.model, recipe))
    return sum(p.numel() for p in built.module.parameters())


def test_every_real_task_has_a_quick_budget():
    assert {RECIPES[n].task for n in REAL} == {"cifar10", "cifar100", "imagenette", "tiny-imagenet", "wikitext-2",
                                               "wikitext-103"}


@pytest.mark.parametrize("name", REAL)
def test_quick_recipe_of_a_real_task_is_smaller_than_its_full_recipe(name):
    r = RECIPES[name]
    norm = NORM[r.model]
    full = cell_recipe(r.task, r.model, norm, variant=r.variant)
    quick = cell_recipe(r.task, r.model, norm, variant=r.variant, quick=True)
    assert quick.steps < full.steps and quick.eval_every <= quick.steps and quick.warmup_steps < quick.steps
    assert quick.eval_limit < full.eval_limit
    if r.variant == "bs2":  # the micro-batch cell keeps its batch size: that is the cell
        assert quick.batch_size == full.batch_size == 2
    else:
        assert quick.batch_size < full.batch_size
    if r.model == "gpt":
        assert quick.seq_len < full.seq_len
    assert _params(quick) < _params(full) / 3
    # What ran is recorded, marked quick; the budget itself never is, so the full recipe's hash is unchanged.
    assert quick.to_dict()["quick"] is True and "quick" not in full.to_dict()
    assert "quick_budget" not in quick.to_dict() and "quick_budget" not in full.to_dict()
    assert recipe_hash(quick) != recipe_hash(full)


@pytest.mark.parametrize("name", OFFLINE)
def test_offline_recipes_are_their_own_quick_budget(name):
    r = RECIPES[name]
    norm = NORM[r.model]
    assert cell_recipe(r.task, r.model, norm, variant=r.variant, quick=True) == cell_recipe(
        r.task, r.model, norm, variant=r.variant)
    assert "quick" not in r.to_dict() and not r.quick_budget


def test_quick_keeps_what_a_norm_paper_prescribes_and_command_line_overrides_win():
    # DyT in a GPT: the paper's embedding scalar and alpha0 stay; the quick model size comes on top.
    quick = cell_recipe("wikitext-103", "gpt", "dyt", quick=True)
    assert quick.model_options["embed_scale"] is True and quick.model_options["n_embd"] == 128
    assert quick.adapted_for == ("norm:dyt",)
    # --batch-size / --steps with --quick: the option wins, the rest of the quick budget stays.
    over = cell_recipe("cifar10", "resnet", "groupnorm", quick=True, overrides={"batch_size": 4, "steps": 7})
    assert (over.batch_size, over.steps, over.quick) == (4, 7, True)
    assert over.model_options == cell_recipe("cifar10", "resnet", "groupnorm", quick=True).model_options
