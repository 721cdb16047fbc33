"""Is a record's code still today's code? The stale judgement of the ranking reader and of ``normbench prune``.

A record names the code it came from: ``impl_hash`` (the norm's implementation with its backend or baseline,
``measure.baselines.impl_hash``), and for accuracy records ``config.model_hash`` (``models.model_hash``) and the
recipe it ran. Today's sources are hashed again **at the library versions the record names** (its provenance's
torch, Triton and, for timm models, timm), so a record measured on another machine with another torch is judged by
its code, not by that machine's torch. This needs the norm, model and recipe code, so it sits above measuring and
training, never in the storage layer (``normbench.records``).
"""

from __future__ import annotations


def _libraries(rec: dict) -> dict:
    """The library versions a record was made with, for ``measure.baselines.impl_hash``: torch and Triton (its
    provenance) and, for an external baseline, the baseline library's (``config.baseline_version``, "<dist>
    <version>" or "<dist> not installed")."""
    prov, cfg = rec.get("provenance") or {}, rec.get("config") or {}
    libs = {"torch": prov.get("torch"), "triton": prov.get("triton")}
    if isinstance(cfg.get("baseline_version"), str):
        version = cfg["baseline_version"].partition(" ")[2]
        libs["baseline"] = None if version == "not installed" else version
    return libs


def model_hash_at(model: str, timm_version: str | None) -> str:
    """``models.model_hash(model)`` as it would be with timm ``timm_version`` installed (a record's
    ``provenance.timm``; None: absent): the same sources and bytes, hashed the same way (a test holds the two
    equal at the installed version). It cannot live in ``normbench.models``: that package's ``__init__.py`` is part
    of every model's hash, so any edit there makes every accuracy record stale."""
    import hashlib

    from normbench import models

    installed = models.model_hash(model)  # also reads the sources into models._SOURCES, once per process
    if "timm_models.py" not in models._MODEL_SOURCES[model]:
        return installed
    h = hashlib.sha256()
    for name in ("__init__.py", "norms.py", *models._MODEL_SOURCES[model]):
        h.update(name.encode() + b"\0" + models._SOURCES[name] + b"\0")
    h.update(f"timm=={timm_version}".encode() if timm_version else b"timm==absent")
    return h.hexdigest()[:16]


def _impl_hash_at(name: str, backend: str, libs: dict) -> str:
    """The implementation hash of today's code of ``name`` run by ``backend`` at the versions ``libs``; KeyError for a
    norm, backend or external baseline this installation does not have."""
    import normbench
    from normbench.measure import baselines

    spec = normbench.get_norm(name)
    if backend not in spec.backends and ((backend, name) not in baselines.REGISTRY or "baseline" not in libs):
        raise KeyError(f"norm {name!r} has no backend or baseline {backend!r} here")
    return baselines.impl_hash(spec, backend, libraries=libs)


def stale_reason(rec: dict, _cache: dict | None = None) -> tuple[str | None, str | None]:
    """(why ``rec`` is stale, None), (None, why it cannot be judged) or (None, None) if it is current.

    Stale means made by code that has since changed: today's sources hash differently **at the library versions
    the record names** (its provenance's torch, Triton and, for timm models, timm), so a record measured on
    another machine with another torch is judged by its code, not by that machine's torch. A kernel record is
    judged by its implementation hash alone; an accuracy record also by its model's code and its recipe. A record
    without an implementation hash (a migrated schema-v1 record) is not judged by it.
    """
    cache = {} if _cache is None else _cache
    if rec.get("kind") not in ("kernel", "accuracy"):
        return None, None
    cfg, prov = rec.get("config") or {}, rec.get("provenance") or {}
    name = (rec.get("norm") or {}).get("name")
    backend = cfg.get("backend") or "eager"
    reasons = []
    try:
        if rec.get("impl_hash"):
            libs = _libraries(rec)
            key = ("impl", name, backend, repr(sorted(libs.items())))
            if key not in cache:
                cache[key] = _impl_hash_at(name, backend, libs)
            if rec["impl_hash"] != cache[key]:
                reasons.append(f"norm code changed ({name}/{backend}: {rec['impl_hash']} -> {cache[key]})")
        if rec["kind"] == "accuracy":
            # Imported here: they import torch, which a kernel record whose hash is in ``cache`` does not need.
            from normbench.models import model_hash
            from normbench.train.recipes import norm_kwargs_from_recipe

            model = cfg.get("model")
            # Records made before provenance named timm's version: judged with the installed one.
            key = ("model", model, prov["timm"] if "timm" in prov else "installed")
            if key not in cache:
                cache[key] = model_hash(model) if key[2] == "installed" else model_hash_at(model, key[2])
            if cfg.get("model_hash") and cfg["model_hash"] != cache[key]:
                reasons.append(f"model code changed ({model}: {cfg['model_hash']} -> {cache[key]})")
            recipe = cfg.get("recipe")
            if isinstance(recipe, dict):
                given = recipe.get("norm_kwargs") or {}
                missing = {k: v for k, v in norm_kwargs_from_recipe(name, recipe).items() if k not in given}
                if missing:
                    options = ", ".join(f"{k}={v!r}" for k, v in missing.items())
                    reasons.append(f"recipe changed ({name} now gets {options} from its recipe; "
                                   "train.recipes.NORM_KWARGS_FROM_RECIPE)")
    except (KeyError, ValueError, ImportError) as exc:
        return None, f"cannot recompute its hashes here ({exc})"
    return ("; ".join(reasons) or None), None


def stale_flag_reason(rec: dict, _cache: dict | None = None) -> str | None:
    """The reason the ranking reader (``results.counted``) gives the ``stale`` flag of ``rec``, or None where it is
    current or cannot be judged here."""
    why, _unknown = stale_reason(rec, _cache)
    if not why:
        return None
    todo = ("`normbench bench` on that machine measures today's code" if rec.get("kind") == "kernel"
            else "`normbench prune` removes it; re-run the cell for today's code")
    return f"made by code that has since changed: {why}; {todo}"
