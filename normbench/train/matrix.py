"""A sweep's matrix: which (task, model, variant, placement) cells it trains, and which norms in each."""

from __future__ import annotations

from typing import Iterable, Sequence

EMPTY_SWEEP = "normbench: the sweep matrix is empty (no norm supports the chosen models/variants)"


class EmptySweep(ValueError):
    """No norm of the sweep supports any of its cells."""

    def __init__(self, message: str = EMPTY_SWEEP):
        super().__init__(message)


def norm_names(selectors: Iterable[str]) -> list[str]:
    """Registry names for ``selectors``: names, or ``"activation"`` (every activation-kind norm, plugins included)
    or ``"all"`` (every norm but the softmax ones); unknown names raise ``KeyError`` before any training."""
    import normbench

    names = []
    for sel in selectors:
        if sel in ("activation", "all"):
            for name in normbench.list_norms():
                kind = normbench.get_norm(name).kind
                if (sel == "all" and kind != "softmax") or kind == "activation":  # softmax is no layer norm
                    names.append(name)
        else:
            normbench.get_norm(sel)  # unknown names fail here, before any training
            names.append(sel)
    return list(dict.fromkeys(names))


def cells(norms: Sequence[str] = ("activation",), tasks: Sequence[str] | None = None,
          models: Sequence[str] | None = None, variants: Sequence[str] = ("default",),
          placements: Sequence[str] | None = None) -> list[tuple]:
    """The sweep's cells in order: (task, model, variant, placement or None, [norms it supports]).

    ``tasks``: default the offline tasks; ``models``: default each task's default model; ``placements``: GPT
    placements (default pre_ln; ``["all"]`` for every one).
    """
    from normbench.models import supports
    from normbench.models.gpt import PLACEMENTS
    from normbench.tasks import all_tasks, get_task
    from normbench.train.recipes import variants as recipe_variants

    placements = list(placements) if placements else None
    every = placements == ["all"]
    task_list = [get_task(t) for t in tasks] if tasks else [t for t in all_tasks() if t.offline]
    names = norm_names(norms)
    out = []
    for task in task_list:
        for model in models or [task.default_model]:
            if model not in task.models:
                continue
            for variant in variants:
                if variant not in recipe_variants(task.name, model):
                    continue
                cell_placements = [None]
                if model == "gpt":
                    cell_placements = list(PLACEMENTS) if every else (placements or ["pre_ln"])
                for placement in cell_placements:
                    ok = [n for n in names if supports(model, n) is None]
                    if placement == "ngpt" and every:
                        # nGPT's Norm is the unit-sphere projection: with "all", the placement runs with its own
                        # norm only (name it with --placements ngpt --norms ... to try others).
                        ok = ["ngpt"]
                    if ok:
                        out.append((task.name, model, variant, placement if model == "gpt" else None, ok))
    return out
