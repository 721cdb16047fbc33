"""The command line that reproduces a record, built from its config (not from what the record says was run)."""

from __future__ import annotations

import shlex


def _q(v) -> str:
    return shlex.quote(str(v))


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
        if cfg.get("keep_ahead") is True:
            parts.append("--keep-ahead")
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
    return " ".join(parts)
