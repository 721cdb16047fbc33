"""Learning-rate tuning per norm and cell (``normbench sweep --tune``): the recipe's grid x its tune seeds on the
validation split (records flagged ``tuning``), then the final seeds at the chosen rate on the test split.
"""

from __future__ import annotations

import math
import sys

from normbench.train.runner import ExecSettings, RunSettings, execute

#: How the rate is chosen, as recorded in each final record's ``config.lr_search.rule``.
RULE = ("fewest diverged, then best mean validation metric (log perplexity); a best rate on an edge "
        "of the grid extends it one step that way (at most lr_extend times)")


def choose_lr(grid: list[float], records: list[dict]) -> tuple[float, dict]:
    """The learning rate of ``grid`` whose tuning runs did best on the validation split, and every rate's score.

    Rule (fixed before any run): fewest diverged seeds first; then the best mean validation metric over seeds
    (mean log perplexity for perplexity, mean accuracy otherwise); a tie keeps the earlier rate of the grid.
    """
    by_lr: dict[float, list] = {lr: [] for lr in grid}
    for r in records:
        lr = float(f"{r['config']['recipe']['lr']:.4g}")
        if lr in by_lr:
            by_lr[lr].append(r)
    scores, best, best_key = {}, None, None
    for lr in grid:
        rs = by_lr[lr]
        if not rs:
            raise ValueError(f"no tuning record for lr {lr:g}")
        higher = rs[0]["metrics"]["higher_is_better"]
        log = rs[0]["metrics"]["metric"] == "perplexity"
        n_div = sum(1 for r in rs if r["metrics"]["diverged"] or r["metrics"]["final"] is None)
        vals = [r["metrics"]["final"] for r in rs if not r["metrics"]["diverged"] and r["metrics"]["final"] is not None]
        score = None
        if vals:
            score = sum(math.log(v) if log else v for v in vals) / len(vals)
        scores[f"{lr:g}"] = {"seeds": len(rs), "diverged": n_div,
                             "score": score, "score_is": "mean log perplexity" if log else "mean " + rs[0]["metrics"][
                                 "metric"]}
        key = (n_div, math.inf if score is None else (-score if higher else score))
        if best_key is None or key < best_key:
            best, best_key = lr, key
    return best, scores


def plan_line(settings: RunSettings, norm: str, task: str, model: str, variant: str, placement: str | None,
              seeds: int | None) -> dict:
    """What tuning one norm in one cell would run (``sweep --tune --dry-run``): the grid and the seeds."""
    r = settings.runs(norm, task, model, variant, placement, [0])[0].recipe()
    return {"norm": norm, "task": task, "model": model, "variant": variant, "placement": placement,
            "lr_grid": r.lr_candidates(), "tune_seeds": r.tune_seeds,
            "final_seeds": seeds if seeds is not None else r.final_seeds}


def tune_cell(settings: RunSettings, how: ExecSettings, norm: str, task: str, model: str, variant: str,
              placement: str | None, store: dict, seeds: int | None = None) -> tuple[list, list]:
    """One norm in one cell: the learning-rate search on the validation split, then the final seeds (``seeds``,
    default the recipe's ``final_seeds``) at the chosen rate. Returns (records, failures) of the last step run:
    the tuning runs' when one of them failed, else the final runs'.

    ``store``: record id -> record of what ``how.out`` already holds (reused, not trained again; new records are
    added). The search runs the recipe's grid; when the best rate sits on an edge of it (and, at the top edge, did
    not diverge), it adds the next rate beyond that edge, at most ``recipe.lr_extend`` times per side.
    """
    recipe = settings.runs(norm, task, model, variant, placement, [0])[0].recipe()
    grid = recipe.lr_candidates()
    step = grid[1] / grid[0] if len(grid) > 1 else 3.0
    extended = {"up": 0, "down": 0}
    while True:
        tuning = []
        for lr in grid:
            tuning.extend(settings.runs(norm, task, model, variant, placement, range(recipe.tune_seeds),
                                        split="val", lr=lr))
        t_recs, failures = execute(tuning, how, skip=store, include_skipped=True)
        if failures:
            return t_recs, failures
        chosen, scores = choose_lr(grid, t_recs)
        # The best rate on an edge of the grid: look one grid step beyond it (the same rule for every norm).
        if chosen == grid[-1] and extended["up"] < recipe.lr_extend and not scores[f"{chosen:g}"]["diverged"]:
            grid.append(float(f"{grid[-1] * step:.4g}"))
            extended["up"] += 1
        elif chosen == grid[0] and len(grid) > 1 and extended["down"] < recipe.lr_extend:
            grid.insert(0, float(f"{grid[0] / step:.4g}"))
            extended["down"] += 1
        else:
            break
    where = f"{norm} {recipe.name}" + (f" {placement}" if placement else "")
    parts = []
    for k, v in scores.items():
        score = "all diverged" if v["score"] is None else f"{v['score']:.4g}"
        parts.append(f"{k}: {score}" + (f" ({v['diverged']} diverged)" if v["diverged"] else ""))
    print(f"tuned {where}: lr {chosen:g} chosen ({'; '.join(parts)})", file=sys.stderr)
    search = {"grid": grid, "chosen": chosen, "seeds_per_rate": recipe.tune_seeds, "split": "val", "rule": RULE}
    n = seeds if seeds is not None else recipe.final_seeds
    finals = settings.runs(norm, task, model, variant, placement, range(n), lr=chosen, lr_search=search)
    return execute(finals, how, skip=store, include_skipped=True)
