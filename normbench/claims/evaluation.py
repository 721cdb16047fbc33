"""Evaluation of the pre-registered claims (:mod:`normbench.claims.rules`) against the records.

Statistics come from :mod:`normbench.stats`. Records are read by :func:`load_records` only.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Iterable

import numpy as np

from normbench import stats as S
from normbench.claims.rules import (
    ACC_MARGIN,
    ALPHA,
    CLAIMS,
    MIN_FINISHED,
    MIN_PAIRS,
    MIN_SEEDS,
    PPL_MARGIN,
    STEPS_MARGIN,
    Accuracy,
    Arm,
    Claim,
    Speed,
)
from normbench.results.counted import one_per_id, records_that_count

# --- picking records ----------------------------------------------------------------------------------------------

def _plain(cfg: dict) -> bool:
    """A run of the plain recipe: not a smoke budget, no extra model options, no overrides beyond the recipe."""
    return (cfg.get("quick") is not True and not cfg.get("qk_norm") and not cfg.get("base_norm")
            and cfg.get("backend", "eager") in (None, "eager"))


def _in_cell(rec: dict, arm: Arm) -> bool:
    cfg = rec["config"]
    c = arm.cell
    return (rec["norm"]["name"] == arm.norm and cfg.get("task") == c.task and cfg.get("model") == c.model
            and (cfg.get("variant") or "default") == c.variant
            and (cfg.get("placement") if c.model == "gpt" else None) == c.placement and _plain(cfg))


def _arm_groups(acc: list[dict], arm: Arm) -> dict[str, dict[str, list[dict]]]:
    """{hardware: {cell key: records}} of the runs of ``arm`` (tuning runs excluded)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in acc:
        if _in_cell(r, arm) and S.record_status(r) != "tuning":
            hw = r["provenance"].get("hardware_id", "?")
            out.setdefault(hw, {}).setdefault(S.cell_key(r), []).append(r)
    return out


def _counted(recs: list[dict]) -> int:
    return sum(S.record_status(r) in ("ok", "diverged") for r in recs)


def _pick(groups: dict[str, list[dict]]) -> list[dict]:
    """The cell a comparison uses: a tuned one (learning rate chosen on the validation split, ``config.lr_search``)
    before an untuned one, then the most counted runs, then the newest."""
    def key(recs):
        tuned = any(isinstance(r["config"].get("lr_search"), dict) for r in recs)
        return (tuned, _counted(recs), max(str(r["provenance"].get("timestamp", "")) for r in recs))
    return max(groups.values(), key=key)


# --- evaluating ---------------------------------------------------------------------------------------------------

def _advantage_values(recs: list[dict], metric: str, higher: bool, log: bool) -> tuple[list[float], int, int]:
    """(values on the analysis scale, signed so larger is better; failures; counted runs)."""
    vals, fails, n = [], 0, 0
    for r in recs:
        s = S.record_status(r)
        if s not in ("ok", "diverged"):
            continue
        n += 1
        v = r["metrics"].get(metric) if s == "ok" else None
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) or (log and v <= 0):
            fails += 1
            continue
        x = math.log(v) if log else float(v)
        vals.append(x if higher else -x)
    return vals, fails, n


def _margin_text(log: bool, margin: float, metric: str) -> str:
    if metric == "steps_to_target" or log:
        return f"{(math.exp(margin) - 1) * 100:.0f}% ({'steps' if metric == 'steps_to_target' else 'perplexity'} ratio)"
    return f"{margin:g} (absolute {metric})"


def _p_for_against(ya, yb, kind, margin, threshold) -> tuple[float, float]:
    if kind == "superior":
        return (S.welch_p(ya, yb, delta=threshold, alternative="greater"),
                S.welch_p(ya, yb, delta=max(margin, threshold), alternative="less"))
    if kind == "noninferior":
        return (S.welch_p(ya, yb, delta=-margin, alternative="greater"),
                S.welch_p(ya, yb, delta=-margin, alternative="less"))
    if kind == "equivalent":
        p_for = max(S.welch_p(ya, yb, delta=-margin, alternative="greater"),
                    S.welch_p(ya, yb, delta=margin, alternative="less"))
        p_against = min(1.0, 2 * min(S.welch_p(ya, yb, delta=-margin, alternative="less"),
                                     S.welch_p(ya, yb, delta=margin, alternative="greater")))
        return p_for, p_against
    raise ValueError(f"unknown comparison kind {kind!r}")


def _undecided(base: dict, reason: str, missing: list[str]) -> dict:
    base.update(decidable=False, reason=reason, missing=missing, p_for=1.0, p_against=1.0)
    return base


def evaluate_accuracy(comp: Accuracy, acc: list[dict]) -> dict:
    """One accuracy comparison from the accuracy records (before the multiplicity correction)."""
    out = {"type": "accuracy", "label": comp.label, "kind": comp.kind, "a": comp.a.label, "b": comp.b.label,
           "cells": sorted({comp.a.cell.label, comp.b.cell.label}), "metric": comp.metric, "test": None,
           "hardware": None, "n_a": 0, "n_b": 0, "failed_a": 0, "failed_b": 0, "effect": None, "p_welch": None,
           "p_mann_whitney": None, "p_fisher": None}
    ga, gb = _arm_groups(acc, comp.a), _arm_groups(acc, comp.b)
    # The machine with the most counted runs of both arms decides; a tie goes to the first hardware id (a set's
    # order changes between processes, and the claims must not).
    both = sorted(set(ga) & set(gb), key=lambda hw: (-(_counted(_pick(ga[hw])) + _counted(_pick(gb[hw]))), hw))
    if not both:
        missing = [arm.command() for arm, g in ((comp.a, ga), (comp.b, gb)) if not g]
        if not missing:  # each arm ran, but on different machines
            missing = [comp.b.command() + f"   # on {sorted(ga)[0]}"]
        return _undecided(out, "no records of " + " and ".join(
            arm.label + f" in {arm.cell.label}" for arm, g in ((comp.a, ga), (comp.b, gb)) if not g)
            if any(not g for g in (ga, gb)) else "the two arms ran on different machines", missing)
    hw = both[0]
    ra, rb = _pick(ga[hw]), _pick(gb[hw])
    met = (ra[0]["metrics"])
    higher = met.get("higher_is_better") is not False
    log = comp.metric == "steps_to_target" or S.is_log_metric(met.get("metric"))
    if comp.metric == "steps_to_target":
        higher = False
    metric_name = "steps_to_target" if comp.metric == "steps_to_target" else str(met.get("metric"))
    margin = STEPS_MARGIN if comp.metric == "steps_to_target" else (PPL_MARGIN if log else ACC_MARGIN)
    ya, fa, na = _advantage_values(ra, comp.metric, higher, log)
    yb, fb, nb = _advantage_values(rb, comp.metric, higher, log)
    out["records"] = sorted(r["id"] for r in ra + rb if S.record_status(r) in ("ok", "diverged"))
    out.update(hardware=hw, n_a=na, n_b=nb, failed_a=fa, failed_b=fb, metric=metric_name, scale="log" if log else
               "linear", margin=margin, margin_text=_margin_text(log, margin, comp.metric),
               summary_a=S.summarize(_natural(ya, higher, log), log=log).to_dict(),
               summary_b=S.summarize(_natural(yb, higher, log), log=log).to_dict())
    short = [(arm, n) for arm, n in ((comp.a, na), (comp.b, nb)) if n < MIN_SEEDS]
    if short:
        return _undecided(out, "too few seeds: " + ", ".join(f"{arm.label} has {n} of {MIN_SEEDS}" for arm, n in short),
                          [arm.command() for arm, _ in short])
    p_fail_a = S.fisher_worse(fa, na, fb, nb) if fa + fb else 1.0
    p_fail_b = S.fisher_worse(fb, nb, fa, na) if fa + fb else 1.0
    out["p_fisher"] = min(p_fail_a, p_fail_b)
    if min(p_fail_a, p_fail_b) < ALPHA:
        out["test"] = "fisher"
        if comp.kind in ("superior", "noninferior"):
            p_for, p_against = p_fail_b, p_fail_a
        else:  # a difference in failures refutes a match and can never show one
            p_for, p_against = 1.0, min(p_fail_a, p_fail_b)
    else:
        if len(ya) < MIN_FINISHED or len(yb) < MIN_FINISHED:
            return _undecided(out, f"fewer than {MIN_FINISHED} finished runs in an arm and no significant difference "
                                   "in failures", [])
        out["test"] = "welch"
        p_for, p_against = _p_for_against(ya, yb, comp.kind, margin, comp.threshold)
        if fa > fb:
            p_for = 1.0  # finished runs alone cannot show A better, or matching, while A fails more often than B
    if len(ya) >= 2 and len(yb) >= 2:
        d = S.difference(ya, yb)
        out.update(effect=d.effect, ci_low=d.low, ci_high=d.high, p_welch=d.p, p_mann_whitney=d.mwu_p,
                   effect_meaning="advantage of A over B on the analysis scale (positive: A better; log of B/A "
                                  "for perplexity and steps)" if log else "advantage of A over B (positive: A better)",
                   mann_whitney_u=d.mwu_u, welch_t=d.t, welch_df=d.df)
        out["effect_text"] = _effect_text(d.effect, d.low, d.high, log, comp.metric, metric_name)
    out.update(decidable=True, p_for=p_for, p_against=p_against, missing=[], reason="")
    return out


def _natural(y: list[float], higher: bool, log: bool) -> list[float]:
    """Undo the sign and log of :func:`_advantage_values` (for summaries on the metric's own scale)."""
    vals = [v if higher else -v for v in y]
    return [math.exp(v) for v in vals] if log else vals


def _effect_text(eff: float, lo: float, hi: float, log: bool, metric: str, name: str) -> str:
    """The advantage of A over B in words a reader can check against the tables."""
    if log:
        # eff is log(B/A) for a lower-is-better metric: A's value is exp(-eff) times B's.
        r, rl, rh = math.exp(-eff), math.exp(-hi), math.exp(-lo)
        what = "steps" if metric == "steps_to_target" else name
        return f"A/B {what} ratio {r:.3f} [{rl:.3f}, {rh:.3f}]"
    return f"A − B {name} {eff:+.4f} [{lo:+.4f}, {hi:+.4f}]"


# --- speed ----------------------------------------------------------------------------------------------------------

def _krow_key(r: dict) -> tuple:
    cfg = r["config"]
    return (cfg.get("layout"), tuple(cfg.get("shape") or ()), cfg.get("dtype"), cfg.get("pass"), cfg.get("device"),
            cfg.get("timing"), cfg.get("threads"), cfg.get("harness", "cli"))


def _run_key(r: dict) -> tuple:
    p = r["provenance"]
    # One run: one machine (hardware id and host), one commit, one command line.
    return (p.get("hardware_id"), p.get("git_commit"), p.get("command"), p.get("node"))


def _min_row(comp: Speed, r: dict) -> int:
    m = comp.min_row_bytes
    return m.get(r["config"].get("device"), max(m.values())) if isinstance(m, dict) else m


def _sizes(r: dict) -> tuple[int, int]:
    """(bytes of one row, bytes of the whole input) of a kernel record."""
    cfg = r["config"]
    size = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}.get(cfg.get("dtype"), 4)
    shape = [int(d) for d in (cfg.get("shape") or [0])]
    return shape[-1] * size, int(np.prod(shape)) * size


def evaluate_speed(comp: Speed, kern: list[dict]) -> list[dict]:
    """One speed comparison per device with records (its latest run that measured both sides)."""
    names = {comp.fast, comp.slow}
    # The two norms' records first (a cheap test: a leaderboard holds tens of thousands of other records).
    ok = [r for r in kern if r["norm"]["name"] in names and S.record_status(r) == "ok"
          and r["config"].get("pass") in comp.passes
          and _sizes(r)[0] > _min_row(comp, r) and _sizes(r)[1] > comp.min_input_bytes]
    by_run: dict[tuple, list[dict]] = {}
    for r in ok:
        by_run.setdefault(_run_key(r), []).append(r)
    devices: dict[str, list[tuple[str, list]]] = {}
    for key, recs in by_run.items():
        pairs = _speed_pairs(comp, recs)
        latest = max(str(r["provenance"].get("timestamp", "")) for r in recs)
        devices.setdefault(key[0], []).append((latest, pairs, key))
    base = {"type": "speed", "label": comp.label, "kind": "superior", "a": comp.fast, "b": comp.slow,
            "cells": ["kernel records"], "metric": "time_median_s", "test": None, "effect": None, "p_welch": None,
            "p_mann_whitney": None, "p_fisher": None, "n_a": 0, "n_b": 0, "failed_a": 0, "failed_b": 0,
            "scale": "log", "margin": math.log(comp.margin),
            "margin_text": f"{(comp.margin - 1) * 100:.0f}% speed-up"}
    cmd = f"normbench bench --norm {' '.join(sorted(names))}"
    if comp.backend_pairs:
        cmd += " --backend " + " ".join(b for pair in comp.backend_pairs for b in pair) + " --pass fwd"
    if not devices:
        what = ("two-pass and three-pass backends of " + comp.fast if comp.backend_pairs
                else f"{comp.fast} and {comp.slow}")
        return [_undecided(dict(base, hardware=None), f"no unflagged kernel records of {what}"
                           + (" with out-of-cache rows" if comp.min_input_bytes else ""), [cmd])]
    out = []
    for hw in sorted(devices):
        runs = sorted(devices[hw], key=lambda t: (len(t[1]) >= MIN_PAIRS, t[0]))
        latest, pairs, key = runs[-1]
        row = dict(base, hardware=hw, run=f"{key[2]} @ {str(key[1])[:10]}", n_a=len(pairs), n_b=len(pairs),
                   cells=[f"kernel records on {hw}: {key[2]} @ {str(key[1])[:10]}"])
        if len(pairs) < MIN_PAIRS:
            out.append(_undecided(row, f"{len(pairs)} matched configurations in one run on {hw}; "
                                       f"{MIN_PAIRS} needed", [cmd]))
            continue
        row["records"] = sorted({i for p in pairs for i in p[2:]})
        y = [math.log(slow / fast) for fast, slow, _, _ in pairs]   # log speed-up of ``fast``
        thr, mar = math.log(comp.threshold), math.log(max(comp.margin, comp.threshold))
        p_for = S.one_sample_p(y, popmean=thr, alternative="greater")
        p_against = S.one_sample_p(y, popmean=mar, alternative="less")
        sm = S.summarize([math.exp(v) for v in y], log=True)
        row.update(test="one-sample t on log time ratios", effect=float(np.mean(y)),
                   effect_meaning="mean log speed-up of A (log of B's time / A's time; positive: A faster)",
                   ci_low=math.log(sm.low),
                   ci_high=math.log(sm.high), p_welch=S.one_sample_p(y), p_mann_whitney=S.wilcoxon_p(y),
                   effect_text=f"speed-up {sm.mean:.3f}x [{sm.low:.3f}, {sm.high:.3f}] over {len(y)} configurations",
                   decidable=True, p_for=p_for, p_against=p_against, missing=[], reason="")
        out.append(row)
    return out


def _speed_pairs(comp: Speed, recs: list[dict]) -> list[tuple[float, float, str, str]]:
    """(fast time, slow time, fast record id, slow record id) for each configuration both sides measured."""
    idx: dict[tuple, tuple[float, str]] = {}
    for r in recs:
        t = r["metrics"].get("time_median_s")
        if isinstance(t, (int, float)) and t > 0:
            idx[(r["norm"]["name"], r["config"].get("backend")) + _krow_key(r)] = (float(t), r["id"])
    pairs = []
    for (norm, backend, *rest), (t, rid) in sorted(idx.items(), key=lambda kv: str(kv[0])):
        other = None
        if comp.backend_pairs:
            if norm == comp.fast:
                for fb, sb in comp.backend_pairs:
                    if backend == fb:
                        other = idx.get((norm, sb, *rest))
        elif norm == comp.fast:
            other = idx.get((comp.slow, backend, *rest))
        if other is not None:
            pairs.append((t, other[0], rid, other[1]))
    return pairs


# --- all claims -----------------------------------------------------------------------------------------------------

def _verdict(row: dict) -> str:
    if not row["decidable"]:
        return "inconclusive"
    if row["p_for_holm"] < ALPHA:
        return "reproduced"
    if row["p_against_holm"] < ALPHA:
        return "not reproduced"
    return "inconclusive"


def reads(rec: dict) -> bool:
    """Whether ``evaluate`` may read ``rec``: every record but a kernel record of a norm no speed comparison names
    (``evaluate_speed`` reads only its two norms' records), so a caller holding one record per id can leave those out
    (the site's tens of thousands of kernel records) with the same outcome."""
    return rec.get("kind") != "kernel" or rec["norm"]["name"] in _speed_norms()


@functools.cache
def _speed_norms() -> frozenset:
    return frozenset(n for c in CLAIMS for comp in c.comparisons if isinstance(comp, Speed)
                     for n in (comp.fast, comp.slow))


def machine_speed_rows(records: Iterable[dict]) -> dict[str, list[dict]]:
    """One machine's rows of every speed comparison (``evaluate_speed`` of its kernel records alone), by comparison
    (``"<claim id>/<index>"``): a speed row reads one machine's records only, so a caller that keeps these per
    machine (the site, between builds) passes their union to :func:`evaluate` as ``speed`` with the same outcome."""
    kern = [r for r in one_per_id(r for r in records if isinstance(r, dict)) if r.get("kind") == "kernel"]
    return {f"{claim.id}/{i}": [row for row in evaluate_speed(comp, kern) if row.get("hardware") is not None]
            for claim in CLAIMS for i, comp in enumerate(claim.comparisons) if isinstance(comp, Speed)}


def evaluate(records: Iterable[dict], speed: dict[str, list[dict]] | None = None) -> list[dict]:
    """Every claim's verdict from ``records`` (kernel and accuracy, any mix), with per-comparison statistics.
    ``speed``: the speed comparisons' rows already evaluated per machine (``machine_speed_rows`` of every machine,
    each list in the machines' order); ``records`` then needs no kernel records."""
    recs = one_per_id(r for r in records if isinstance(r, dict))
    acc = [r for r in recs if r.get("kind") == "accuracy"]
    kern = [r for r in recs if r.get("kind") == "kernel"]
    per_claim: list[tuple[Claim, list[dict]]] = []
    for claim in CLAIMS:
        rows = []
        for i, comp in enumerate(claim.comparisons):
            if isinstance(comp, Accuracy):
                rows.append(evaluate_accuracy(comp, acc))
            elif speed is None:
                rows.extend(evaluate_speed(comp, kern))
            else:   # copies: the rows gain Holm's p-values and a verdict below
                rows.extend([dict(r) for r in speed.get(f"{claim.id}/{i}", [])] or evaluate_speed(comp, []))
        per_claim.append((claim, rows))
    flat = [row for _, rows in per_claim for row in rows]
    for key in ("p_for", "p_against"):
        for row, adj in zip(flat, S.holm([row[key] for row in flat]), strict=True):
            row[key + "_holm"] = adj
    out = []
    for claim, rows in per_claim:
        for row in rows:
            row["verdict"] = _verdict(row)
        vs = [r["verdict"] for r in rows]
        verdict = ("reproduced" if all(v == "reproduced" for v in vs) else
                   "not reproduced" if "not reproduced" in vs else "inconclusive")
        missing = [m for r in rows for m in r.get("missing", [])]
        out.append({
            "id": claim.id, "paper": claim.paper, "url": claim.url, "claim": claim.claim, "verdict": verdict,
            "decided": all(r["decidable"] for r in rows),
            "why": _why(verdict, rows),
            "missing": list(dict.fromkeys(missing)),
            "cells": sorted({c for r in rows for c in r["cells"]}),
            # Distinct records the comparisons used (runs for accuracy, kernel records for speed).
            "n": len({i for r in rows for i in r.get("records", [])}),
            "scale_caveat": claim.caveat, "note": claim.note,
            **_deciding(verdict, rows),
            "comparisons": rows,
        })
    return out


def _deciding(verdict: str, rows: list[dict]) -> dict:
    """The comparison that carries the verdict (the weakest reproduced one, the strongest refutation, or what is
    missing), summarised at the claim's level: its effect with interval and its Holm-corrected p-value."""
    if verdict == "reproduced":
        row, p = max(rows, key=lambda r: r["p_for_holm"]), "p_for_holm"
    elif verdict == "not reproduced":
        row, p = min((r for r in rows if r["verdict"] == "not reproduced"), key=lambda r: r["p_against_holm"]), \
            "p_against_holm"
    else:
        undecided = [r for r in rows if not r["decidable"]]
        row, p = (undecided[0] if undecided else min(rows, key=lambda r: r["p_for_holm"])), "p_for_holm"
    return {"deciding_comparison": row["label"], "effect": row.get("effect_text"), "effect_ci":
            [row.get("ci_low"), row.get("ci_high")], "p_holm": row[p] if row["decidable"] else None,
            "p_kind": "claim" if p == "p_for_holm" else "refute"}


def _why(verdict: str, rows: list[dict]) -> str:
    undecided = [r for r in rows if not r["decidable"]]
    if undecided:
        return "cannot decide yet: " + "; ".join(r["reason"] for r in undecided)
    if verdict == "reproduced":
        return "every comparison reproduces the claim after Holm's correction"
    if verdict == "not reproduced":
        bad = [r["label"] for r in rows if r["verdict"] == "not reproduced"]
        return "refuted by: " + "; ".join(bad)
    return "the evidence decides neither way at α = 0.05 after Holm's correction"


def load_records(root: str | Path = "results") -> list[dict]:
    """The records that count under ``root`` (``normbench.results.records_that_count``: one per id, those made by
    code that has since changed flagged ``stale`` and never-checked kernel records flagged ``legacy``, so they count
    nowhere); invalid ones are the business of ``normbench validate``."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no results at {root}: pass --results DIR")
    return records_that_count(root).records
