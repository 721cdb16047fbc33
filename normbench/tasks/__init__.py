"""Accuracy tasks: the registry of datasets (real ones through Hugging Face ``datasets``, offline generated ones).

A :class:`Task` says what the data is and how to score a model on it; ``task.load(...)`` returns a
:class:`TaskData` of tensors (``uint8`` images ``[N, 3, H, W]`` with ``int64`` labels, or a 1-D ``int64``
token stream) that the training harness batches. Real tasks need the dataset on disk (the ``datasets`` cache
or ``--data-dir``); offline tasks are generated from a seed and run anywhere.
"""

from __future__ import annotations

from normbench.tasks.base import Task, TaskData, split_summary
from normbench.tasks.hub import DatasetUnavailable

__all__ = [
    "DatasetUnavailable",
    "Task",
    "TaskData",
    "all_tasks",
    "get_task",
    "list_tasks",
    "default_task",
    "load_task",
    "data_config",
    "split_summary",
]


_SUMMARIES: dict = {}


def data_config(name: str, data_dir: str | None = None, quick: bool = False) -> dict:
    """The ``config["data"]`` of an accuracy record: where the splits came from and what a run saw of them."""
    key = (name, data_dir, quick)
    if key in _CACHE:
        return dict(_CACHE[key].info.get("data", {}))
    task = get_task(name)
    if task.summarize is None:
        return dict(load_task(name, data_dir=data_dir, quick=quick).info.get("data", {}))
    if key not in _SUMMARIES:
        _SUMMARIES[key] = task.summarize(task, data_dir=data_dir, quick=quick)
    return dict(_SUMMARIES[key])


def _registry() -> dict[str, Task]:
    from normbench.tasks import synthetic, text, vision

    tasks = [*synthetic.TASKS, *vision.TASKS, *text.TASKS]
    return {t.name: t for t in tasks}


_TASKS: dict[str, Task] | None = None


def _tasks() -> dict[str, Task]:
    global _TASKS
    if _TASKS is None:
        _TASKS = _registry()
    return _TASKS


def all_tasks() -> list[Task]:
    """Every task, offline ones first."""
    return list(_tasks().values())


def list_tasks() -> list[str]:
    return list(_tasks())


def get_task(name: str) -> Task:
    """The task called ``name``; an unknown name raises ``KeyError`` listing the tasks."""
    tasks = _tasks()
    if name not in tasks:
        import difflib

        close = difflib.get_close_matches(name, tasks, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise KeyError(f"unknown task {name!r}{hint}; tasks: {', '.join(tasks)} (see `normbench tasks`)")
    return tasks[name]


def default_task(layouts) -> str:
    """The offline task a norm trains on when no ``--task`` is given: language if it has a token layout."""
    return "synth-lm" if "tokens" in tuple(layouts) else "synth-shapes"


_CACHE: dict = {}


def load_task(name: str, data_dir: str | None = None, quick: bool = False) -> TaskData:
    """``get_task(name).load(...)``, memoised per process so a sweep loads each dataset once."""
    key = (name, data_dir, quick)
    if key not in _CACHE:
        _CACHE[key] = get_task(name).load(data_dir=data_dir, quick=quick)
    return _CACHE[key]
