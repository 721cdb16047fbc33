"""Training harness for the accuracy suite: recipes, the training loop, multi-seed statistics and the CLI."""

from __future__ import annotations

from normbench.stats import aggregate, summarize
from normbench.train.loop import Run, record_id_for, run_config, train
from normbench.train.recipes import RECIPES, Recipe, get_recipe

__all__ = ["RECIPES", "Recipe", "Run", "aggregate", "get_recipe", "record_id_for", "run_config", "summarize", "train"]
