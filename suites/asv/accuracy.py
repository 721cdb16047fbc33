"""ASV accuracy benchmarks: how well models train with each norm, tracked across commits, over ``normbench train``.

Parameters: norm x task (``task[/model[/placement]]``), in one class per metric (ASV gives a benchmark one unit):
``TextTasks`` (perplexity) and ``ImageTasks`` (top-1 error). One ``setup_cache``, shared by both, trains every cell
once per ASV run through ``normbench.train.run`` at the task's quick budget, seed 0, one CPU thread: deterministic,
so a tracked value changes only when code or recipe changes. The records go to
``.asv/normbench/accuracy/<commit>-<env>``; ``normbench ingest-asv`` turns them into accuracy records.

* ``track_perplexity`` / ``track_top1_error`` (percent): the final test metric, oriented so that larger is worse, as
  ASV reads every benchmark; ``nan`` when the run diverged. ``track_diverged``: 1 when the run diverged, else 0.
* ``time_step``: one training step (the loop's own ``train_step``), ASV-timed; ``peakmem_train``: the process's peak
  memory with the model, optimizer and batches of the run in it, after a few steps. Both are recorded by ``asv run``
  but left out of the README's ``asv continuous`` set: one process per commit, so on a shared machine they follow
  its load (issue #40); the value of these cells is the tracked accuracy, which is exact.

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
_STEP = {}  # this benchmark process's training step (each parameter set runs in a process of its own)


def _setup_step(cache, norm, task):
    _STEP["bench"] = suites.step_bench(cache, norm, task, DATA_DIR)


class _Accuracy:
    """What the metric classes share: one ``setup_cache`` (ASV runs it once for every class that inherits it)."""

    param_names = suites.PARAM_NAMES
    timeout = 900

    def setup_cache(self):
        return suites.asv_setup(PARAMS)

    setup_cache.timeout = 3600

    def setup(self, cache, norm, task):
        key = suites.cell_key(norm, task)
        if key not in cache["results"]:
            raise NotImplementedError(cache["skipped"].get(key, "not trained"))
        self.result = cache["results"][key]

    def track_diverged(self, cache, norm, task):
        return self.result["diverged"]

    track_diverged.unit = "diverged (0 or 1)"

    def time_step(self, cache, norm, task):
        _STEP["bench"].step()

    time_step.setup = _setup_step  # after the class's setup; only the step benchmarks build a model
    time_step.number = 1
    time_step.rounds = 1  # ASV's default 2 starts a second process per parameter set
    time_step.repeat = (3, 10, 1.0)
    time_step.warmup_time = 0

    def peakmem_train(self, cache, norm, task):
        _STEP["bench"].step()

    peakmem_train.setup = _setup_step


if "perplexity" in BY_METRIC:
    class TextTasks(_Accuracy):
        """Cells of the text tasks: final test perplexity."""

        params = BY_METRIC["perplexity"]

        def track_perplexity(self, cache, norm, task):
            return self.result["tracked"]

        track_perplexity.unit = "perplexity"


if "top1" in BY_METRIC:
    class ImageTasks(_Accuracy):
        """Cells of the image tasks: final top-1 test error, in percent."""

        params = BY_METRIC["top1"]

        def track_top1_error(self, cache, norm, task):
            return self.result["tracked"]

        track_top1_error.unit = "% top-1 error"
