"""One run's training step outside the loop, built as ``train`` builds it: what the ASV and pytest-benchmark suites
time (``time_``) and measure memory over (``peakmem_``).

``StepBench(run)`` loads the task (or takes ``data`` already loaded), seeds, builds the model, optimizer and batcher
exactly as :func:`normbench.train.loop.train` does for that run, and ``step()`` runs the loop's own
:func:`~normbench.train.loop.train_step` on the next batch. Nothing is recorded: the metric comes from the run itself
(``normbench.train.run``).
"""

from __future__ import annotations

import torch

from normbench.models import build_model
from normbench.tasks import get_task, load_task
from normbench.train.data import Batcher
from normbench.train.loop import Run, _agc_params, _sync, make_optimizer, model_options, seed_everything, train_step


class StepBench:
    """The model, optimizer and batches of ``run`` on one process, ready for :meth:`step`."""

    def __init__(self, run: Run, data=None):
        self.run = run
        self.device = torch.device(run.device)
        if run.threads and self.device.type == "cpu":
            torch.set_num_threads(int(run.threads))
        self.task = get_task(run.task)
        self.recipe = recipe = run.recipe()
        if data is None:
            data = load_task(run.task, data_dir=run.data_dir, quick=run.quick)
        seed_everything(run.seed)
        built = build_model(run.model, self.task, run.model_spec(recipe), placement=run.placement,
                            qk_norm=run.qk_norm, base_norm=run.base_norm, backend=run.backend,
                            **model_options(run.model, recipe))
        self.model = built.module.to(self.device)
        self.model.train()
        self.opt = make_optimizer(self.model, recipe)
        self.batcher = Batcher(data, recipe, run.seed, self.device)
        self.agc = None
        if recipe.agc:
            from normbench.norms.weights import adaptive_grad_clip

            self.agc = adaptive_grad_clip
        self.agc_params = _agc_params(self.model) if recipe.agc else None
        self.after_step = getattr(self.model, "after_step", None)
        self.steps = 0

    def step(self) -> float:
        """One training step (the recipe's schedule at this step, wrapping round after the recipe's last step);
        returns its loss (``nan`` when it was not finite: nothing was updated)."""
        i = self.steps % self.recipe.steps
        flag = train_step(self.model, self.model, self.opt, self.batcher, self.recipe, i, 1, self.agc,
                          self.agc_params, self.after_step)
        _sync(self.device)
        self.steps += 1
        return float("nan") if flag[1] > 0 else float(flag[0])
