"""Reading ``normbench best --json``'s selection policy: the one place that knows its schema (a change is one edit).

:func:`read` turns the document into a :class:`Policy`: per (site, regime, dtype, pass, hardware) and per (norm,
layout, shape, dtype, pass, hardware) the backend ``best`` chose (or none, with its status), plus who made it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from normbench import best


@dataclass(frozen=True)
class Choice:
    """What the policy says for one shape: ``backend`` (None when ``best`` named none: tie-less undecided,
    flagged or missing, see ``status``) and the shape it was measured at."""

    backend: str | None
    status: str
    norm: str
    layout: str
    shape: tuple[int, ...]


@dataclass
class Policy:
    """``best``'s policy, read: look-ups by site and regime (a model's policy) and by exact shape (any policy)."""

    model: str | None
    made_with: dict                 # {"normbench": version, "torch": version} of the process that made it ({} unknown)
    hardware_ids: tuple[str, ...]
    by_site: dict = field(default_factory=dict)    # (site, regime, dtype, pass, hardware_id) -> Choice
    by_shape: dict = field(default_factory=dict)   # (norm, layout, shape, dtype, pass, hardware_id) -> Choice
    site_norms: dict = field(default_factory=dict)  # site -> (norm, layout, width)
    source: str = "a policy object"

    @property
    def sites(self) -> set[str]:
        return set(self.site_norms)


def _doc(policy) -> tuple[dict, str]:
    if isinstance(policy, (str, Path)):
        p = Path(policy)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"no policy file at {p}; write one with `normbench best --model NAME --json "
                                    f"> {p.name}`") from None
        try:
            return json.loads(text), str(p)
        except ValueError as exc:
            raise ValueError(f"{p} is not JSON ({exc}); it should hold `normbench best ... --json`'s output") from None
    if isinstance(policy, dict):
        return policy, "the policy dict"
    raise TypeError(f"a policy is `normbench best ... --json`'s document (a dict), a path to it, or a "
                    f"normbench.policy.Policy; got {type(policy).__name__}")


def read(policy) -> Policy:
    """A :class:`Policy` from ``normbench best --json``'s document, a path to it, or a :class:`Policy` (returned as
    is). Raises ``ValueError`` saying what is wrong with a document that is not one."""
    if isinstance(policy, Policy):
        return policy
    doc, source = _doc(policy)
    import jsonschema

    try:
        jsonschema.validate(doc, best.SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        raise ValueError(f"{source} is not a `normbench best --json` policy: at {where}: {exc.message}") from None
    out = Policy(model=doc.get("model"), made_with=dict(doc.get("made_with") or {}), hardware_ids=(),
                 source=source)
    for e in doc["policy"]:
        key = (e["norm"], e["layout"], tuple(e["shape"]), e["dtype"], e["pass"], e["hardware_id"])
        out.by_shape[key] = Choice(e.get("backend"), e["status"], e["norm"], e["layout"], tuple(e["shape"]))
    for a in doc["answers"]:
        key = (a["norm"], a["layout"], tuple(a["shape"]), a["dtype"], a["pass"], a["hardware_id"])
        if a.get("site") is None or key not in out.by_shape:
            continue
        out.by_site[(a["site"], a.get("regime"), a["dtype"], a["pass"], a["hardware_id"])] = out.by_shape[key]
        width = a["shape"][-1] if a["layout"] == "tokens" else a["shape"][1]
        out.site_norms.setdefault(a["site"], (a["norm"], a["layout"], int(width)))
    out.hardware_ids = tuple(sorted({e["hardware_id"] for e in doc["policy"]}))
    return out
