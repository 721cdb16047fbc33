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
#: normbench.contract.BF16_TOL, and 2^-7 for float16's 10-bit mantissa at outputs of a few units).
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


#: Flags a paired verdict may look past: ``noisy`` says the record's own samples are spread wide (or the machine was
#: busy), which makes its absolute time unfit for the leaderboard, but the ratio of rounds timed in turn with a partner
#: still cancels that drift; a decisive paired interval stands (docs/measurement.md, "The verdict rule"). Every other
#: flag bars a record from any ranking.
PAIRED_OK_FLAGS = ("noisy",)
#: A GPU record whose host time (``metrics.host_s``, one call's launch and Python work) bounds its GPU time: its
#: device time is not what a caller waits for, so it is never ranked (shown with both times).
HOST_BOUND = "host_bound"


def _why_not(rec) -> str:
    """Why a record can never be ranked ("" when it can: perhaps only through a paired verdict, :func:`_needs_pair`)."""
    bad = [f for f in rec.get("flags") or () if f not in PAIRED_OK_FLAGS]
    if bad:
        return "flagged " + ", ".join(bad)
    ok, why = _err_ok(rec)
    return "" if ok else why


def _needs_pair(rec) -> bool:
    """A record whose own spread is too wide for its median to rank it (``noisy``): only a paired verdict can."""
    return any(f in PAIRED_OK_FLAGS for f in rec.get("flags") or ())


def _clean(rec) -> bool:
    """No flag at all and the error within tolerance: its absolute time may be shown as a ranked number."""
    return not rec.get("flags") and _err_ok(rec)[0]


def _paired_entry(a: dict, b: dict) -> dict | None:
    for p in (a.get("metrics") or {}).get("paired") or ():
        if p.get("partner") == b["id"]:
            return p
    return None


def _pair(a: dict, b: dict) -> dict:
    """a against b: the paired entry a's record holds for b, else a comparison of the medians (unpaired: its verdict
    is ``apart``, never a winner)."""
    p = _paired_entry(a, b)
    if p is not None:
        return {"ratio": p["ratio"], "ci": list(p["ci"]), "n": p["n"], "verdict": p["verdict"], "paired": True}
    q = _paired_entry(b, a)  # only b holds the pairing: its mirror
    if q is not None:
        lo, hi = 1 / q["ci"][1], 1 / q["ci"][0]
        return {"ratio": 1 / q["ratio"], "ci": [lo, hi], "n": q["n"], "verdict": verdict_of(lo, hi), "paired": True}
    r = a["metrics"]["time_median_s"] / b["metrics"]["time_median_s"]
    return {"ratio": r, "ci": None, "n": None, "verdict": "apart", "paired": False}


def _times(rec) -> dict:
    m = rec.get("metrics") or {}
    out = {"time_s": m.get("time_median_s"), "clock": "gpu" if str(rec["config"].get("device", "")).startswith(
        "cuda") else "cpu"}
    if m.get("host_s") is not None:
        out["host_s"] = m["host_s"]
    return out


def _not_ranked(rec, why: str) -> dict:
    return {"backend": rec["config"]["backend"], "verdict": "not_ranked", "record": rec["id"],
            "flags": list(rec.get("flags") or ()), "why": why, **_times(rec)}


def _reference(cands: list[dict]) -> dict:
    """The candidate no other is paired-faster than, starting from the fastest median (a pairing outranks medians:
    two medians taken in the same rounds can still order differently from their per-round ratios)."""
    ref = cands[0]
    for _ in range(len(cands)):
        quicker = [r for r in cands if r is not ref and _pair(r, ref)["verdict"] == "faster"]
        if not quicker:
            return ref
        ref = min(quicker, key=lambda r: r["metrics"]["time_median_s"])
    return ref


def decide(records: list[dict]) -> dict:
    """The answer for one (shape, dtype, pass, hardware) from its records (any backends, any flags).

    Every backend is named in ``backends``: ``winner``, ``tie``, ``slower`` (its paired ratio to the chosen one and
    interval), ``undecided`` (paired, the interval holds 1 and leaves the tie band), ``apart`` (measured apart from
    the chosen one: no paired interval, so no verdict) or ``not_ranked`` (its flag or error, and why)."""
    if not records:
        return {"status": "missing", "backends": []}
    listed, cands = [], []
    for r in records:
        why = _why_not(r)
        if why:
            if HOST_BOUND in (r.get("flags") or ()):
                why += (" (its host time per call bounds the GPU time: the GPU time is not what a caller waits for;"
                        " batch more work per call or capture it in a CUDA graph)")
            listed.append(_not_ranked(r, why))
        else:
            cands.append(r)
    cands.sort(key=lambda r: r["metrics"]["time_median_s"])
    # A noisy record ranks only through a paired verdict with a candidate it was timed with in the same rounds; its
    # median alone ranks nothing.
    paired_ok = []
    for r in cands:
        if _needs_pair(r) and not any(_pair(r, o)["paired"] for o in cands if o is not r):
            listed.append(_not_ranked(r, "flagged noisy: its own spread is too wide for its median to rank it and "
                                         "it has no paired partner here; measure it head to head"))
        else:
            paired_ok.append(r)
    cands = paired_ok
    if not cands:
        reasons = sorted({b["why"] for b in listed})
        return {"status": "flagged", "reasons": reasons, "evidence": [r["id"] for r in records], "backends": listed}
    ref = _reference(cands)
    out = {"evidence": [r["id"] for r in cands], "fastest": ref["config"]["backend"],
           "times_s": {r["config"]["backend"]: r["metrics"]["time_median_s"] for r in cands if _clean(r)}}
    if len(cands) == 1:
        if _needs_pair(ref):  # its only partners are not ranked: no decisive verdict stands for it
            listed.append(_not_ranked(ref, "flagged noisy: its paired partners here are not ranked, so no paired "
                                           "verdict can rank it"))
            return {"status": "flagged", "reasons": sorted({b["why"] for b in listed}),
                    "evidence": [r["id"] for r in records], "backends": listed}
        me = {"backend": ref["config"]["backend"], "verdict": "only", "record": ref["id"], "flags": [], **_times(ref)}
        return {**out, "status": "only", "winner": out["fastest"], "runner_up": None, "margin": None,
                "backends": [me] + listed}
    others = [r for r in cands if r is not ref]
    vs = {r["id"]: _pair(r, ref) for r in others}  # other / reference
    named = []
    for r in others:
        m = vs[r["id"]]
        if m["verdict"] == "faster":  # only when the pairings order the candidates in a cycle: no verdict stands
            m = vs[r["id"]] = {**m, "verdict": "undecided"}   # (the runner-up is chosen from vs)
        named.append({"backend": r["config"]["backend"], "verdict": m["verdict"], "record": r["id"],
                      "flags": list(r.get("flags") or ()), "vs": ref["config"]["backend"], "ratio": m["ratio"],
                      "ci": m["ci"], "n": m["n"], "paired": m["paired"], **_times(r)})
    verdicts = {b["verdict"] for b in named}
    ref_b = ref["config"]["backend"]
    me = {"backend": ref_b, "record": ref["id"], "flags": list(ref.get("flags") or ()), **_times(ref)}

    def closest(kind):
        ks = [r for r in others if vs[r["id"]]["verdict"] == kind]
        return min(ks, key=lambda r: vs[r["id"]]["ratio"]) if ks else None

    def margin_vs(r):  # the reference against r (reference / r), as the margin always was
        m = _pair(ref, r)
        return m if m["paired"] else {**vs[r["id"]], "ratio": 1 / vs[r["id"]]["ratio"], "ci": None}

    if "apart" in verdicts:
        apart = [r for r in others if vs[r["id"]]["verdict"] == "apart"]
        r = min(apart, key=lambda r: vs[r["id"]]["ratio"])
        me["verdict"] = "apart"
        return {**out, "status": "undecided", "undecided_by": "measured apart", "winner": None,
                "runner_up": r["config"]["backend"], "margin": margin_vs(r),
                "ties": [ref_b] + [x["config"]["backend"] for x in apart], "backends": [me] + named + listed}
    if "undecided" in verdicts:
        r = closest("undecided")
        me["verdict"] = "undecided"
        return {**out, "status": "undecided", "undecided_by": "interval", "winner": None,
                "runner_up": r["config"]["backend"], "margin": margin_vs(r),
                "ties": [ref_b] + [b["backend"] for b in named if b["verdict"] in ("undecided", "tie")],
                "backends": [me] + named + listed}
    if "tie" in verdicts:
        r = closest("tie")
        me["verdict"] = "tie"
        return {**out, "status": "tie", "winner": None, "runner_up": r["config"]["backend"], "margin": margin_vs(r),
                "ties": [ref_b] + [b["backend"] for b in named if b["verdict"] == "tie"],
                "backends": [me] + named + listed}
    r = closest("slower")
    me["verdict"] = "winner"
    return {**out, "status": "winner", "winner": ref_b, "runner_up": r["config"]["backend"], "margin": margin_vs(r),
            "backends": [me] + named + listed}


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


def fmt_seconds(t: float) -> str:
    """``12.3 us``, ``4.56 ms``, ``1.23 s``."""
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= f:
            return f"{t / f:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def _clock(b: dict) -> str:
    """A backend's time as ``best`` shows it: its median, labelled with its clock, and the host time per call beside
    a GPU time where the record has one."""
    t = b.get("time_s")
    if t is None:
        return ""
    text = f"{b.get('clock', 'cpu').upper()} {fmt_seconds(t)}"
    if b.get("host_s") is not None:
        text += f", host {fmt_seconds(b['host_s'])} per call"
    return text


def backend_text(b: dict) -> str:
    """One backend of an answer (``decide``'s ``backends``) as a line: its verdict, ratio and interval or why."""
    v, name = b["verdict"], b["backend"]
    times = _clock(b)
    times = f" ({times})" if times else ""
    if v in ("winner", "only", "tie", "undecided", "apart") and "ratio" not in b:
        label = {"winner": "winner", "only": "the only ranked backend", "tie": "tie (the fastest of the tied)",
                 "undecided": "undecided (the fastest median)", "apart": "undecided (measured apart)"}[v]
        return f"{name}: {label}{times}{' [its own spread is wide: noisy]' if b.get('flags') else ''}"
    if v == "not_ranked":
        cmd = f": {b['command']}" if b.get("command") else ""
        return f"{name}: not ranked, {b['why']}{times}{cmd}"
    ratio = f"{b['ratio']:.2f}x {b['vs']}'s time"
    if b.get("paired"):
        ratio += f" [{b['ci'][0]:.2f}, {b['ci'][1]:.2f}] (paired, n={b['n']})"
    else:
        ratio += " (medians, measured apart: no interval)"
    label = {"slower": "slower", "tie": "tie", "undecided": "undecided", "apart": "undecided, measured apart"}[v]
    noisy = " [noisy record: the paired interval decides]" if b.get("flags") else ""
    return f"{name}: {label}, {ratio}{times}{noisy}"


def describe(r: dict) -> str:
    """One answer row (:func:`answer`) as a line of text: its :func:`headline` and every other backend named (slower
    with its ratio, or not ranked and why): what the site shows."""
    rest = [b for b in r.get("backends") or () if b["verdict"] in ("slower", "not_ranked")]
    tail = "; ".join(f"{b['backend']} {_short(b)}" for b in rest)
    return headline(r) + (f"; {tail}" if tail else "")


def headline(r: dict) -> str:
    """The answer of one row: the winner and its margin, the tie, why undecided, or the command."""
    st = r["status"]
    if st == "winner":
        return f"{r['winner']} over {r['runner_up']}: {margin_text(r['margin'])}"
    if st == "only":
        return f"{r['winner']} (the only eligible backend)"
    if st == "tie":
        m = r["margin"]
        ci = f" [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]" if m and m.get("ci") else ""
        return f"tie: {', '.join(r['ties'])} (ratio {m['ratio']:.2f}{ci} inside [1/1.1, 1.1])"
    if st == "undecided" and r.get("undecided_by") == "measured apart":
        m = r["margin"]
        return (f"undecided: measured apart ({' vs '.join(r['ties'])}: medians {1 / m['ratio']:.2f}x apart, no "
                f"paired interval; a winner needs them timed head to head): {r.get('command', '')}")
    if st == "undecided":
        m = r["margin"]
        return (f"undecided: {' vs '.join(r['ties'])} (ratio {m['ratio']:.2f} [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]"
                f" holds 1 and leaves the tie band: re-measure on a quieter machine)")
    if st == "flagged":
        return f"no ranked record ({'; '.join(r['reasons'])}): {r['command']}"
    return f"missing: {r['command']}"


def _short(b: dict) -> str:
    if b["verdict"] == "slower":
        ci = f" [{b['ci'][0]:.2f}, {b['ci'][1]:.2f}]" if b.get("ci") else ""
        return f"slower {b['ratio']:.2f}x{ci}"
    return f"not ranked ({b['why']})"


def _command(model_arg: str, regime: str | None, norm: str, dtype: str, pass_: str, device: str, redo: bool) -> str:
    parts = ["normbench", "bench", *shlex.split(model_arg), "--norm", norm, "--dtype", dtype, "--pass", pass_,
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
    ``passes`` those the records at the targets' shapes hold (float32 and fwd where there are none). ``model_arg``:
    the question's own arguments as shell words (a path quoted), repeated in each row's command."""
    kernel = [r for r in records if r.get("kind") == "kernel"]
    norms = {t["norm"] for t in targets}
    pool = [r for r in kernel if r["norm"]["name"] in norms]
    hws = [hardware] if hardware else sorted({r["provenance"]["hardware_id"] for r in pool}) or ["(none)"]
    rows = []
    for hw in hws:
        here = [r for r in pool if r["provenance"]["hardware_id"] == hw]
        device = "cuda" if any(r["config"].get("device", "").startswith("cuda") for r in here) else "cpu"
        # each target's records (its norm, layout and dims), from one pass over them (dozens of targets)
        at_key: dict[tuple, list[dict]] = {}
        for r in here:   # kernel records (``pool``)
            at_key.setdefault((r["norm"]["name"], r["config"].get("layout"), _dims(r)), []).append(r)
        founds = [at_key.get((t["norm"], t["layout"], tuple(t["dims"])), []) for t in targets]
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
                    apart = res.get("undecided_by") == "measured apart"
                    redo = _command(model_arg or t.get("shape_arg", ""), t.get("regime"), t["norm"], d, p, device,
                                    True)
                    if res["status"] in ("missing", "flagged") or apart:
                        row["command"] = redo if res["status"] != "missing" else _command(
                            model_arg or t.get("shape_arg", ""), t.get("regime"), t["norm"], d, p, device, False)
                    # a re-run measures the set whole, head to head, so the re-measured record is paired
                    row["backends"] = [{**b, "command": redo} if b["verdict"] == "not_ranked" else b
                                       for b in res.get("backends") or ()]
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
        "tie_factor": TIE_FACTOR, "confidence": 0.95, "err_tol": ERR_TOL, "winner_needs": "a paired interval",
        "paired_ok_flags": list(PAIRED_OK_FLAGS), "never_ranked_flags": "every other flag, host_bound included"},
        "answers": rows, "policy": policy}


_STATUS = ["winner", "only", "tie", "undecided", "flagged", "missing"]
#: What ``backends`` says of each backend measured at a shape (:func:`decide`).
BACKEND_VERDICTS = ["winner", "only", "tie", "slower", "undecided", "apart", "not_ranked"]
_num = {"type": "number"}
_BACKEND = {
    "type": "object", "required": ["backend", "verdict", "record", "flags"],
    "properties": {
        "backend": {"type": "string"}, "verdict": {"enum": BACKEND_VERDICTS}, "record": {"type": "string"},
        "flags": {"type": "array", "items": {"type": "string"}},
        "vs": {"type": "string", "description": "the backend the ratio is against (the chosen one)"},
        "ratio": {**_num, "description": "this backend's time / vs's time (paired: median per-round ratio)"},
        "ci": {"type": ["array", "null"], "items": _num}, "n": {"type": ["integer", "null"]},
        "paired": {"type": "boolean"},
        "time_s": {"type": ["number", "null"], "description": "median time on its clock"},
        "clock": {"enum": ["cpu", "gpu"]},
        "host_s": {**_num, "description": "host time of one call (GPU records that have it)"},
        "why": {"type": "string"}, "command": {"type": "string"}}}
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
                "undecided_by": {"enum": ["measured apart", "interval"]},
                "backends": {"type": "array", "items": _BACKEND},
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
