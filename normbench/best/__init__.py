"""The answer: for each norm site of a model (or one shape), which implementation to use on this hardware.

:func:`answer` reads records only, through ``normbench.results.records_that_count`` (never measures), and for each
(site, regime, dtype, pass, hardware) finds the records of the site's norm at the site's shape and decides:

* **eligible**: no flag at all (stale, legacy, unchecked, forced, noisy, fell_back, suspect, non_finite, ...: a
  flagged record is shown, never ranked) and the output's error against float64 within :data:`ERR_TOL` for its
  dtype;
* **winner**: the fastest eligible record (median time) when its paired comparison with the runner-up (the two
  timed head to head, interleaved: ``metrics.paired``) says ``faster``; ``tie`` when the paired interval of the ratio
  lies inside [1/1.1, 1.1] (every backend tying with the fastest is named); ``undecided`` when the interval holds 1
  but reaches beyond the band. Records measured apart (no paired entry) are compared by their medians and marked
  ``paired: false``; a ratio within the band is a tie, else the faster wins;
* **flagged**: only flagged records: the flags and the command that re-measures;
* **missing**: no record: the command that measures it.

``--json`` (:func:`to_policy`) is a selection policy a framework can load: shape -> backend, with the evidence's
record ids; :data:`SCHEMA` is its JSON Schema (``normbench best --schema``).
"""

from __future__ import annotations

import math
import shlex

from normbench import catalog
from normbench.stats import TIE_FACTOR, verdict_of

#: Largest max |y - y_float64| a backend may have and still win, by dtype: float32 1e-4 (a few ulps of O(1) normalised
#: outputs, 2^-23 each, summed over a row's reduction); bfloat16 0.06 and float16 0.01 (the check's bf16 tolerance,
#: normbench.check.BF16_TOL, and 2^-7 for float16's 10-bit mantissa at outputs of a few units).
ERR_TOL = {"float32": 1e-4, "bfloat16": 0.06, "float16": 0.01, "float64": 1e-10}


def _dims(rec) -> tuple:
    return tuple(rec["config"].get("shape") or ())


def _err_ok(rec) -> tuple[bool, str]:
    dtype = rec["config"].get("dtype")
    tol = ERR_TOL.get(dtype)
    y = ((rec.get("metrics") or {}).get("err") or {}).get("y") or {}
    e = y.get("max_abs")
    if tol is None or e is None:
        return True, ""
    if not (isinstance(e, (int, float)) and math.isfinite(e)) or e > tol:
        return False, f"error {e:.3g} against float64 above the {dtype} tolerance {tol:g}"
    return True, ""


def _why_not(rec) -> str:
    bad = list(rec.get("flags") or ())
    if bad:
        return "flagged " + ", ".join(bad)
    ok, why = _err_ok(rec)
    return "" if ok else why


def _pair(a: dict, b: dict) -> dict:
    """a against b: the paired entry a's record holds for b, else a comparison of the medians (unpaired)."""
    for p in (a.get("metrics") or {}).get("paired") or ():
        if p.get("partner") == b["id"]:
            return {"ratio": p["ratio"], "ci": list(p["ci"]), "n": p["n"], "verdict": p["verdict"], "paired": True}
    r = a["metrics"]["time_median_s"] / b["metrics"]["time_median_s"]
    return {"ratio": r, "ci": None, "n": None, "verdict": verdict_of(r, r, TIE_FACTOR), "paired": False}


def decide(records: list[dict]) -> dict:
    """The answer for one (shape, dtype, pass, hardware) from its records (any backends, any flags)."""
    if not records:
        return {"status": "missing"}
    eligible = [r for r in records if not _why_not(r)]
    if not eligible:
        reasons = sorted({_why_not(r) for r in records})
        return {"status": "flagged", "reasons": reasons, "evidence": [r["id"] for r in records]}
    eligible.sort(key=lambda r: r["metrics"]["time_median_s"])
    best = eligible[0]
    out = {"evidence": [r["id"] for r in eligible], "fastest": best["config"]["backend"],
           "times_s": {r["config"]["backend"]: r["metrics"]["time_median_s"] for r in eligible}}
    if len(eligible) == 1:
        return {**out, "status": "only", "winner": out["fastest"], "runner_up": None, "margin": None}
    second = eligible[1]
    margin = _pair(best, second)
    out.update(runner_up=second["config"]["backend"], margin=margin)
    if margin["verdict"] == "faster":
        return {**out, "status": "winner", "winner": out["fastest"]}
    if margin["verdict"] == "tie":
        ties = [best["config"]["backend"]] + [r["config"]["backend"] for r in eligible[1:]
                                              if _pair(best, r)["verdict"] == "tie"]
        return {**out, "status": "tie", "winner": None, "ties": ties}
    return {**out, "status": "undecided", "winner": None, "ties": [out["fastest"], out["runner_up"]]}


def _speedup(m) -> tuple[str, str | None]:
    """A margin's speed-up (runner-up time / winner time), ``1.31x``, and its paired interval, ``[1.29, 1.33]``
    (None when the two were measured apart)."""
    x = f"{1 / m['ratio']:.2f}x"
    if not m.get("paired"):
        return x, None
    lo, hi = m["ci"]
    return x, f"[{1 / hi:.2f}, {1 / lo:.2f}]"


def speedup_text(m) -> str:
    """``1.31x [1.29, 1.33]`` (paired) or ``1.31x``; empty without a margin."""
    if not m:
        return ""
    x, ci = _speedup(m)
    return f"{x} {ci}" if ci else x


def margin_text(m) -> str:
    """A margin as ``best`` prints it: runner-up time / winner time, with its paired interval where there is one."""
    if not m:
        return ""
    x, ci = _speedup(m)
    if ci:
        return f"{x} faster {ci} (paired, n={m['n']})"
    return f"{x} faster (medians, measured apart: no interval)"


def describe(r: dict) -> str:
    """One answer row (:func:`answer`) as a line of text: what ``normbench best`` prints and the site shows."""
    st = r["status"]
    if st == "winner":
        return f"{r['winner']} over {r['runner_up']}: {margin_text(r['margin'])}"
    if st == "only":
        return f"{r['winner']} (the only eligible backend)"
    if st == "tie":
        m = r["margin"]
        ci = f" [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]" if m and m.get("ci") else ""
        return f"tie: {', '.join(r['ties'])} (ratio {m['ratio']:.2f}{ci} inside [1/1.1, 1.1])"
    if st == "undecided":
        m = r["margin"]
        return (f"undecided: {' vs '.join(r['ties'])} (ratio {m['ratio']:.2f} [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]"
                " holds 1 and leaves the tie band: re-measure on a quieter machine)")
    if st == "flagged":
        return f"no ranked record ({'; '.join(r['reasons'])}): {r['command']}"
    return f"missing: {r['command']}"


def _matching(records, norm: str, layout: str, dims: tuple) -> list[dict]:
    return [r for r in records if r.get("kind") == "kernel" and r["norm"]["name"] == norm
            and r["config"].get("layout") == layout and _dims(r) == dims]


def _command(model_arg: str, regime: str | None, norm: str, dtype: str, pass_: str, device: str, redo: bool) -> str:
    parts = ["normbench", "bench", *model_arg.split(), "--norm", norm, "--dtype", dtype, "--pass", pass_,
             "--device", device]
    if regime:
        parts += ["--regime", regime]
    if redo:
        parts.append("--redo")
    return " ".join(shlex.quote(p) for p in parts)


def answer(records: list[dict], targets: list[dict], *, hardware: str | None = None, dtypes=None, passes=None,
           model_arg: str = "") -> list[dict]:
    """One row per target x dtype x pass x hardware. ``targets``: dicts with site, regime, norm, layout, dims.

    Without ``hardware`` every hardware id with records of the targets' norms answers; without ``dtypes`` /
    ``passes`` those the records at the targets' shapes hold (float32 and fwd where there are none)."""
    kernel = [r for r in records if r.get("kind") == "kernel"]
    norms = {t["norm"] for t in targets}
    pool = [r for r in kernel if r["norm"]["name"] in norms]
    hws = [hardware] if hardware else sorted({r["provenance"]["hardware_id"] for r in pool}) or ["(none)"]
    rows = []
    for hw in hws:
        here = [r for r in pool if r["provenance"]["hardware_id"] == hw]
        device = "cuda" if any(r["config"].get("device", "").startswith("cuda") for r in here) else "cpu"
        founds = [_matching(here, t["norm"], t["layout"], tuple(t["dims"])) for t in targets]
        at_targets = [r for found in founds for r in found]
        ds = list(dtypes) if dtypes else sorted({r["config"]["dtype"] for r in at_targets}) or ["float32"]
        ps = list(passes) if passes else sorted({r["config"]["pass"] for r in at_targets}) or ["fwd"]
        for t, found in zip(targets, founds):
            for d in ds:
                for p in ps:
                    recs = [r for r in found if r["config"]["dtype"] == d and r["config"]["pass"] == p]
                    res = decide(recs)
                    row = {"site": t.get("site"), "regime": t.get("regime"), "norm": t["norm"],
                           "layout": t["layout"], "shape": list(t["dims"]), "dtype": d, "pass": p,
                           "hardware_id": hw, **res}
                    if res["status"] in ("missing", "flagged"):
                        row["command"] = _command(model_arg or t.get("shape_arg", ""), t.get("regime"), t["norm"],
                                                  d, p, device, res["status"] == "flagged")
                    rows.append(row)
    return rows


def model_targets(model: catalog.Model, regimes=None, quick: bool = False) -> list[dict]:
    return [{"site": ss.site.name, "regime": ss.regime, "norm": ss.norm, "layout": ss.layout, "dims": ss.dims}
            for ss in catalog.site_shapes(model, quick=quick, regime_names=regimes)]


def shape_targets(records: list[dict], text: str, norms=None) -> list[dict]:
    """The targets of one ``--shape``: a record's shape label, or dims (``140x4096``, ``images:NxCxHxW``)."""
    labelled = [r for r in records if r.get("kind") == "kernel" and r["config"].get("shape_label") == text]
    if labelled:
        layout, dims = labelled[0]["config"]["layout"], _dims(labelled[0])
    else:
        layout, dims = catalog.parse_dims(text)
    found = sorted({r["norm"]["name"] for r in records if r.get("kind") == "kernel"
                    and r["config"].get("layout") == layout and _dims(r) == dims})
    names = list(norms) if norms else found
    if not names:
        raise ValueError(f"no records at shape {text} ({layout} {'x'.join(map(str, dims))}); name the norm with "
                         f"--norm to get the command that measures it")
    return [{"site": None, "regime": None, "norm": n, "layout": layout, "dims": dims,
             "shape_arg": f"--shape {layout}:{'x'.join(map(str, dims))}"} for n in names]


def made_with() -> dict:
    """The normbench and torch versions answering now: ``normbench.apply_policy`` refuses a policy made with others
    (the records that count were measured with this torch: a record of another one is stale, never ranked)."""
    from normbench.versions import __version__, dist_version

    return {"normbench": __version__, "torch": dist_version("torch")}


def to_policy(rows: list[dict], about: dict) -> dict:
    """The ``--json`` document: every row, and the policy (one entry per shape, dtype, pass and hardware)."""
    policy = []
    seen = set()
    for r in rows:
        key = (r["norm"], r["layout"], tuple(r["shape"]), r["dtype"], r["pass"], r["hardware_id"])
        if key in seen:
            continue
        seen.add(key)
        choice = r.get("winner") or (r.get("ties") or [None])[0] if r["status"] in ("winner", "only", "tie") else None
        policy.append({"norm": r["norm"], "layout": r["layout"], "shape": r["shape"], "dtype": r["dtype"],
                       "pass": r["pass"], "hardware_id": r["hardware_id"], "backend": choice,
                       "status": r["status"], "evidence": r.get("evidence", [])})
    return {"schema": "normbench.best", "version": 1, **about, "made_with": made_with(), "rule": {
        "tie_factor": TIE_FACTOR, "confidence": 0.95, "err_tol": ERR_TOL}, "answers": rows, "policy": policy}


_STATUS = ["winner", "only", "tie", "undecided", "flagged", "missing"]
_num = {"type": "number"}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "normbench-best.schema.json",
    "title": "normbench best --json: a selection policy (shape -> backend) with its evidence",
    "type": "object",
    "required": ["schema", "version", "rule", "answers", "policy"],
    "properties": {
        "schema": {"const": "normbench.best"}, "version": {"const": 1},
        "model": {"type": ["string", "null"]}, "shape": {"type": ["string", "null"]},
        "made_with": {"type": "object", "properties": {"normbench": {"type": "string"},
                                                       "torch": {"type": ["string", "null"]}}},
        "rule": {"type": "object", "required": ["tie_factor", "confidence", "err_tol"]},
        "answers": {"type": "array", "items": {
            "type": "object",
            "required": ["site", "regime", "norm", "layout", "shape", "dtype", "pass", "hardware_id", "status"],
            "properties": {
                "site": {"type": ["string", "null"]}, "regime": {"type": ["string", "null"]},
                "norm": {"type": "string"}, "layout": {"enum": ["tokens", "images"]},
                "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "dtype": {"type": "string"}, "pass": {"enum": ["fwd", "bwd", "fwd+bwd"]},
                "hardware_id": {"type": "string"}, "status": {"enum": _STATUS},
                "winner": {"type": ["string", "null"]}, "runner_up": {"type": ["string", "null"]},
                "ties": {"type": "array", "items": {"type": "string"}},
                "margin": {"type": ["object", "null"], "required": ["ratio", "ci", "verdict", "paired"],
                           "properties": {"ratio": _num, "ci": {"type": ["array", "null"], "items": _num},
                                          "n": {"type": ["integer", "null"]}, "paired": {"type": "boolean"},
                                          "verdict": {"enum": ["faster", "slower", "tie", "undecided"]}}},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "reasons": {"type": "array", "items": {"type": "string"}},
                "command": {"type": "string"}}}},
        "policy": {"type": "array", "items": {
            "type": "object", "required": ["norm", "layout", "shape", "dtype", "pass", "hardware_id", "backend",
                                           "status", "evidence"],
            "properties": {"backend": {"type": ["string", "null"]}, "status": {"enum": _STATUS},
                           "evidence": {"type": "array", "items": {"type": "string"}}}}},
    },
}
