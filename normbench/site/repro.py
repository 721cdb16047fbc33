"""The command line that reproduces a record, built from its config (not from what the record says was run)."""

from __future__ import annotations

import json
import re
import shlex

_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _q(v) -> str:
    return shlex.quote(str(v))


#: Recipe fields a command line can set (``train``/``sweep`` options), in the order they are written.
_OVERRIDABLE = (("steps", "--steps"), ("batch_size", "--batch-size"), ("lr", "--lr"))


def _recipe_args(cfg: dict, norm: str, tuned: bool) -> tuple[list[str], list[str]]:
    """(options that turn this normbench's recipe for the record's cell into the recipe the record ran, fields of
    the record's recipe that no option sets). Overrides are not stored in a record; they are recovered by comparing
    its recipe with the current one, so a recipe changed since the record shows up as the second list."""
    from normbench.train.recipes import cell_recipe

    ran = cfg.get("recipe")
    if not isinstance(ran, dict) or not isinstance(cfg.get("task"), str) or not isinstance(cfg.get("model"), str):
        return [], []
    cell = (cfg["task"], cfg["model"], norm, cfg.get("placement"), cfg.get("variant"), cfg.get("quick") is True)
    try:
        current = cell_recipe(*cell)
        change = {key: ran[key] for key, _ in _OVERRIDABLE
                  if key in ran and ran[key] != getattr(current, key) and not (tuned and key == "lr")}
        now = cell_recipe(*cell, overrides=change).to_dict()
    except (KeyError, TypeError, ValueError):
        return [], ["the whole recipe (this normbench has no recipe for the cell)"]
    args = [a for key, flag in _OVERRIDABLE if key in change for a in (flag, _q(change[key]))]
    now = json.loads(json.dumps(now, default=str))  # as a record holds it (tuples become lists)
    differ = sorted(str(k) for k in set(ran) | set(now) if not (tuned and k == "lr") and ran.get(k) != now.get(k))
    return args, differ


def command(rec: dict) -> str:
    """``normbench bench ...`` for a kernel record, ``normbench train ...`` (or the ``sweep --tune`` that chose the
    learning rate) for an accuracy record; every value shell-quoted."""
    cfg, norm = rec.get("config") or {}, (rec.get("norm") or {}).get("name", "?")
    if rec.get("kind") == "kernel":
        parts = ["normbench", "bench", "--norm", _q(norm), "--backend", _q(cfg.get("backend", "?"))]
        if cfg.get("shape_class"):
            parts += ["--shape-class", _q(cfg["shape_class"])]
        if cfg.get("shape_label"):
            parts += ["--shape", _q(cfg["shape_label"])]
        parts += ["--layout", _q(cfg.get("layout", "?")), "--dtype", _q(cfg.get("dtype", "?")),
                  "--pass", _q(cfg.get("pass", "?")), "--device", _q(cfg.get("device", "?")),
                  "--timing", _q(cfg.get("timing", "?"))]
        if cfg.get("threads"):
            parts += ["--threads", _q(cfg["threads"])]
        if cfg.get("mode"):
            parts += ["--mode", _q(cfg["mode"])]
        if cfg.get("graphs") is True:
            parts.append("--graphs")
        if cfg.get("l2_flush") == "rw":
            parts += ["--flush", "rw"]
        if str(cfg.get("device", "")).startswith("cuda") and cfg.get("keep_ahead") is not True:
            parts.append("--no-keep-ahead")  # keep-ahead is the default on CUDA since issue #35
        return " ".join(parts)
    tuned = isinstance(cfg.get("lr_search"), dict) or "tuning" in (rec.get("flags") or [])
    if tuned:
        # The learning rate came from the search on the validation split: rerunning the search reproduces it.
        parts = ["normbench", "sweep", "--tune", "--norms", _q(norm), "--tasks", _q(cfg.get("task", "?")),
                 "--models", _q(cfg.get("model", "?"))]
        if cfg.get("placement"):
            parts += ["--placements", _q(cfg["placement"])]
        if cfg.get("variant") and cfg["variant"] != "default":
            parts += ["--variants", _q(cfg["variant"])]
    else:
        parts = ["normbench", "train", "--norm", _q(norm), "--task", _q(cfg.get("task", "?")),
                 "--model", _q(cfg.get("model", "?"))]
        if cfg.get("placement"):
            parts += ["--placement", _q(cfg["placement"])]
        if cfg.get("variant") and cfg["variant"] != "default":
            parts += ["--variant", _q(cfg["variant"])]
        parts += ["--seeds", "1", "--seed-start", _q(cfg.get("seed", 0))]
        if cfg.get("base_norm"):
            parts += ["--base-norm", _q(cfg["base_norm"])]
        if cfg.get("qk_norm") is True:
            parts.append("--qk-norm")
        if cfg.get("backend") and cfg["backend"] != "eager":
            parts += ["--backend", _q(cfg["backend"])]
    if cfg.get("quick") is True:
        parts.append("--quick")
    parts += ["--device", _q(cfg.get("device", "cpu"))]
    args, differ = _recipe_args(cfg, norm, tuned)
    parts += args
    text = " ".join(parts)
    if differ:
        # A shell comment: only plain words go in (a newline in a hostile key would start a new command).
        commit = (rec.get("provenance") or {}).get("git_commit")
        where = (f"git checkout {commit[:12]}" if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,40}", commit)
                 else "the normbench that made it")
        names = [k if _WORD.match(str(k)) else "(an unnamed field)" for k in differ]
        text += f"  # the record's recipe differs from this normbench's in {', '.join(names)}: run it with {where}"
    return text
