"""Training harness for the accuracy suite: recipes, the training loop, multi-seed statistics, and the Python API
that ``normbench train`` / ``normbench sweep`` call (``run``, ``sweep``, ``sweep_plan``; ``normbench.train.api``).

Modules: ``recipes`` (fixed recipes per cell), ``loop`` (one run), ``runner`` (runs through an executor, records
written), ``matrix`` (a sweep's cells), ``tune`` (the learning-rate search), ``api`` (run, sweep), ``command``
(the argparse front end only).
"""

from __future__ import annotations

from normbench.stats import aggregate, summarize
from normbench.train.api import TrainResult, run, sweep, sweep_plan
from normbench.train.loop import Run, record_id_for, run_config, train
from normbench.train.recipes import RECIPES, Recipe, get_recipe

__all__ = ["RECIPES", "Recipe", "Run", "TrainResult", "aggregate", "get_recipe", "record_id_for", "run", "run_config",
           "summarize", "sweep", "sweep_plan", "train"]
