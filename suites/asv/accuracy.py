"""ASV accuracy benchmarks: how well models train with each norm, tracked across commits, over ``normbench train``.

Parameters: norm x task (``task[/model[/placement]]``). Every cell is trained once per ASV run (``setup_cache``)
through ``normbench.train.run`` at the task's quick budget, seed 0, one CPU thread: deterministic, so a tracked
value changes only when code or recipe changes. The records go to ``.asv/normbench/accuracy/<commit>-<env>`` and
``normbench ingest-asv`` turns them into accuracy records.

* ``Perplexity.track_perplexity`` (text tasks) and ``Top1Error.track_top1_error`` (image tasks, in percent): the final
  metric, oriented so that larger is worse as ASV reads every benchmark; ``track_diverged``: 1 when the run
  diverged (its metric is then ``nan``), else 0.
* ``TrainingStep.time_step``: one training step (the loop's own ``train_step``), ASV-timed;
  ``TrainingStep.peakmem_train``: the process's peak memory once the model, optimizer and a few steps are in it.

Grid: ``NORMBENCH_ASV_TASKS``, ``NORMBENCH_ASV_NORMS``, ``NORMBENCH_ASV_DATA_DIR`` (see ``normbench.suites``).
"""

import os
from pathlib import Path

from normbench import suites
from normbench.measure import suite

# Side records go next to ASV's results (results_dir ".asv/results" in asv.conf.json, two levels up from here).
os.environ.setdefault(suite.SIDECAR_ENV, str(Path(__file__).resolve().parents[2] / ".asv" / "normbench"))
PARAMS = suites.accuracy_grid(env_prefix="NORMBENCH_ASV")
BY_METRIC = suites.split_by_metric(PARAMS)
DATA_DIR = suites.data_dir("NORMBENCH_ASV")


class _Tracked:
    """The final metric and divergence of each cell of one metric, from one training pass over the grid."""

    param_names = suites.PARAM_NAMES
    rounds = 1
    repeat = 1
    number = 1
    timeout = 3600

    def setup(self, cache, norm, task):
        key = suites.cell_key(norm, task)
        if key not in cache["results"]:
            raise NotImplementedError(cache["skipped"].get(key, "not trained"))
        self.result = cache["results"][key]

    def track_diverged(self, cache, norm, task):
        return self.result["diverged"]

    track_diverged.unit = "diverged (0 or 1)"


if "perplexity" in BY_METRIC:
    class Perplexity(_Tracked):
        """Final test perplexity of the text tasks' cells (larger is worse)."""

        params = BY_METRIC["perplexity"]

        def setup_cache(self):
            return suites.asv_train(self.params)

        setup_cache.timeout = 3600

        def track_perplexity(self, cache, norm, task):
            return self.result["tracked"]

        track_perplexity.unit = "perplexity"


if "top1" in BY_METRIC:
    class Top1Error(_Tracked):
        """Final top-1 test error of the image tasks' cells, in percent (larger is worse)."""

        params = BY_METRIC["top1"]

        def setup_cache(self):
            return suites.asv_train(self.params)

        setup_cache.timeout = 3600

        def track_top1_error(self, cache, norm, task):
            return self.result["tracked"]

        track_top1_error.unit = "% top-1 error"


class TrainingStep:
    """One training step of each cell, ASV-timed, and the peak memory of training."""

    params = PARAMS
    param_names = suites.PARAM_NAMES
    rounds = 1
    number = 1
    repeat = (3, 10, 2.0)
    warmup_time = 0
    timeout = 900

    def setup_cache(self):
        return suites.load_step_data(PARAMS, DATA_DIR)

    setup_cache.timeout = 1800

    def setup(self, cache, norm, task):
        self.bench = suites.step_bench(cache, norm, task, DATA_DIR)

    def time_step(self, cache, norm, task):
        self.bench.step()

    def peakmem_train(self, cache, norm, task):
        self.bench.step()
