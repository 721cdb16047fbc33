"""The "By model" pages: for each catalog model and device, ``normbench best``'s answer per norm site and regime,
and what each implementation choice costs the whole model in norm time.

Every cell is :func:`normbench.best.answer` on the records the site shows (the reader every ranking uses,
``results.records_that_count``), asked as ``normbench best --model M --device HW --dtype D --pass P`` would ask it,
so a page never disagrees with ``best`` (``tests/test_site_bymodel.py`` compares them). Cells link to their records'
anchors on the record pages.

The estimate (:func:`estimate`) sums, over the model's sites, a site's median time at the regime's shape times how
often the site runs per forward pass (the catalog's ``count``: layers, or 1 for the final norm): per forward pass of
the prefill's tokens, per decode step (one token for each of the batch's sequences). Only eligible records count
(the ``times_s`` of ``best``'s answer: unflagged, error within tolerance); a choice lacking one site has no total.
The residual-fused sites (``add_rmsnorm`` / ``add_layernorm``) are the serving stacks' alternative to running the
adds and the norms apart, so they are estimated on their own and never added to the plain norms' total (that would
count those norms twice). Norm time only: not the model's time, nor what fusing the norm into a neighbour saves.
"""

from __future__ import annotations

import re

from normbench import best, catalog
from normbench.site.fmt import fmt_time
from normbench.site.records import slug

PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
_STEM = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: The statuses of ``best.answer`` (``normbench.best.SCHEMA``), and those that name a backend to use.
STATUSES = ("winner", "only", "tie", "undecided", "flagged", "missing")
ANSWERED = ("winner", "only", "tie")


def model_stem(key: str) -> str:
    return key if _STEM.match(key) and ".." not in key else slug("m", key)


def model_file(key: str, hw: str) -> str:
    """A model's page on one device, relative to the site root."""
    return f"models/{model_stem(key)}--{slug(hw)}.html"


def model_hub_file(key: str) -> str:
    """A model's one page in a many-machine site (``pages.MANY_MACHINES``): a machine picker whose choice loads that
    machine's answer (``model_part_file``), relative to the site root."""
    return f"models/{model_stem(key)}.html"


def model_part_file(key: str, hw: str) -> str:
    """A model's answer on one machine as a data file the model's page loads on demand (many machines). At the same
    depth as ``models/``, so the part's relative links are the page's."""
    return f"data/model-{model_stem(key)}--{slug(hw)}.js"


def part_id(key: str, hw: str) -> str:
    """The id a model's part on one machine is loaded under (its file's name without ``.js``)."""
    return model_part_file(key, hw)[len("data/"):-len(".js")]


def combo_anchor(dtype: str, pass_: str) -> str:
    return slug("c", dtype, pass_)


def _dims(rec) -> tuple:
    return tuple(rec["config"].get("shape") or ())


def fused(site: catalog.Site) -> bool:
    """A site that fuses the residual add with the norm (an alternative to a plain norm site, never summed with it)."""
    return site.norm.startswith("add_")


def regime_unit(family: str, regime: str) -> str:
    """What one estimate of ``regime`` is for."""
    for name, batch, seq, _quick in catalog.REGIMES[family]:
        if name == regime:
            if family == "llm" and seq == 1:
                return f"per decode step: one new token for each of {batch} sequence{'s' if batch > 1 else ''}"
            if family == "llm":
                return f"per forward pass of {batch} x {seq} tokens"
            return f"per forward pass of a batch of {batch}"
    return "per forward pass"


class ByModel:
    """The kernel records indexed by device and shape, and the catalog's models with their targets."""

    def __init__(self, entries, per_machine=None):
        """``per_machine(what, hw, make)``: where a machine's aggregates are kept between builds
        (``pages.Site.per_machine``): its models (``pairs``) are then read from there, and a machine's records are
        indexed (``by_hw_norm``, ``at``) only when one of its answers is made."""
        self.by_hw_norm: dict[tuple[str, str], list] = {}
        self.at: dict[tuple, list] = {}
        self.e2e: dict[tuple[str, str], list] = {}
        self._kernel: dict[str, list] = {}   # each machine's kernel entries, in order
        self._indexed: set[str] = set()
        self._per_machine = per_machine
        self._pairs: list[tuple[str, str]] | None = None
        for e in entries:
            kind = e.kind
            if kind == "endtoend":
                self.e2e.setdefault((e.rec["config"]["model"], e.rec["provenance"]["hardware_id"]), []).append(e)
            elif kind == "kernel":
                self._kernel.setdefault(e.hw, []).append(e)
        self.models = catalog.models()
        self.targets = {m.key: best.model_targets(m) for m in self.models}
        self.hws = sorted(set(self._kernel) | {hw for _, hw in self.e2e})

    def _index(self, hw: str) -> None:
        """``by_hw_norm`` and ``at`` of one machine's kernel entries, in order (once)."""
        if hw in self._indexed:
            return
        self._indexed.add(hw)
        for e in self._kernel.get(hw, ()):
            rec = e.rec
            norm = rec["norm"]["name"]
            self.by_hw_norm.setdefault((hw, norm), []).append(e)
            self.at.setdefault((hw, norm, rec["config"].get("layout"), _dims(rec)), []).append(e)

    def model(self, key: str) -> catalog.Model:
        return next(m for m in self.models if m.key == key)

    def at_targets(self, key: str, hw: str) -> list:
        """The records on ``hw`` at any of the model's (norm, shape) targets, each once."""
        self._index(hw)
        seen, out = set(), []
        for t in self.targets[key]:
            k = (hw, t["norm"], t["layout"], tuple(t["dims"]))
            if k in seen:
                continue
            seen.add(k)
            out += self.at.get(k, [])
        return out

    def pairs(self) -> list[tuple[str, str]]:
        """(model, device) with any record of the model's sites, in catalog order, devices sorted."""
        if self._pairs is None:
            def measured(hw: str) -> list[str]:
                return [m.key for m in self.models if self.at_targets(m.key, hw) or (m.key, hw) in self.e2e]

            keys = {hw: set(self._per_machine("model_pairs", hw, lambda hw=hw: measured(hw)) if self._per_machine
                            else measured(hw)) for hw in self.hws}
            self._pairs = [(m.key, hw) for m in self.models for hw in self.hws if m.key in keys[hw]]
        return self._pairs

    def combos(self, key: str, hw: str) -> list[tuple[str, str]]:
        """The (dtype, pass) the records at the model's shapes on ``hw`` hold."""
        found = {(e.rec["config"]["dtype"], e.rec["config"]["pass"]) for e in self.at_targets(key, hw)}
        return sorted(found, key=lambda c: (c[0], PASS_ORDER.get(c[1], 9), c[1]))

    def answer(self, key: str, hw: str, dtype: str, pass_: str) -> list[dict]:
        """``normbench best --model KEY --device HW --dtype D --pass P`` on the site's records."""
        norms = sorted({t["norm"] for t in self.targets[key]})
        self._index(hw)
        pool = [e.rec for n in norms for e in self.by_hw_norm.get((hw, n), [])]
        return best.answer(pool, self.targets[key], hardware=hw, dtypes=[dtype], passes=[pass_],
                           model_arg=f"--model {key}")

    def records_at(self, row: dict) -> list:
        """The entries of one answer row's shape, dtype and pass (every backend, flagged ones included)."""
        self._index(row["hardware_id"])
        es = self.at.get((row["hardware_id"], row["norm"], row["layout"], tuple(row["shape"])), [])
        return sorted((e for e in es if e.rec["config"]["dtype"] == row["dtype"]
                       and e.rec["config"]["pass"] == row["pass"]),
                      key=lambda e: (e.rec["config"]["backend"], e.rid))


# --- a cell ---------------------------------------------------------------------------------------------------------

def _short_margin(row: dict) -> str:
    m = row.get("margin")
    if not m:
        return ""
    unpaired = "" if m.get("paired") else " (medians, unpaired)"
    return f"{best.speedup_text(m)} over {row['runner_up']}{unpaired}"


def cell(row: dict, recs: list, up: str) -> dict:
    """What a grid cell shows of one answer row: the status, the choice, a short note, ``best``'s own line (its
    hover text), the command for a flagged or missing cell, and links to the records at its shape."""
    st = row["status"]
    if st in ("winner", "only"):
        choice = row["winner"]
        head, note = choice, _short_margin(row) if st == "winner" else "the only eligible backend"
    elif st in ("tie", "undecided"):
        choice = ", ".join(row["ties"])
        head = "undecided: measured apart" if row.get("undecided_by") == "measured apart" else st
        m = row["margin"]
        ci = f" [{m['ci'][0]:.2f}, {m['ci'][1]:.2f}]" if m.get("ci") else ""
        note = f"{' = '.join(row['ties']) if st == 'tie' else ' vs '.join(row['ties'])}: ratio {m['ratio']:.2f}{ci}"
    elif st == "flagged":
        choice, head = "", "flagged: " + ", ".join(sorted({f for r in recs for f in r.rec.get("flags") or ()}) or
                                                   ["error above tolerance"])
        note = "; ".join(r for r in row["reasons"] if not r.startswith("flagged "))  # the errors above tolerance
    else:
        choice, head, note = "", "missing", ""
    links = []
    for e in recs:
        flags = list(e.rec.get("flags") or ())
        links.append({"backend": e.rec["config"]["backend"], "href": f"{up}{e.href}", "flags": ", ".join(flags),
                      "eligible": e.rid in (row.get("evidence") or ()) and st != "flagged",
                      "time": fmt_time(e.rec["metrics"].get("time_median_s"))})
    return {"status": st, "choice": choice, "head": head, "note": note, "line": best.describe(row),
            "command": row.get("command", ""), "shape": "x".join(map(str, row["shape"])), "records": links}


# --- the estimate ---------------------------------------------------------------------------------------------------

def estimate(rows: list[dict], sites: list[catalog.Site], regime: str, recs_at) -> list[dict]:
    """Per choice (the fastest eligible record per site, then each backend with any record at these sites), the
    sum over ``sites`` of median time x count in ``regime``: ``{"choice", "total" (s, None when incomplete),
    "lacks": [(site, why)], "parts": [(site, time, count)]}``. ``recs_at(row)``: the records at a row's shape."""
    by_site = {r["site"]: r for r in rows if r["regime"] == regime}
    mine = [s for s in sites if s.name in by_site]
    if not mine:
        return []
    backends = sorted({e.rec["config"]["backend"] for s in mine for e in recs_at(by_site[s.name])})
    out = []
    for choice in ["fastest per site"] + backends:
        parts, lacks = [], []
        for s in mine:
            row = by_site[s.name]
            times = row.get("times_s") or {}
            b = row.get("fastest") if choice == "fastest per site" else choice
            t = times.get(b) if b else None
            if t is None:
                if choice == "fastest per site":
                    why = {"missing": "no record", "flagged": "only flagged records"}.get(row["status"], "no record")
                    if b and row["status"] not in ("missing", "flagged"):  # ranked by a pairing, its median noisy
                        why = f"{b}'s record is flagged noisy: its time is not counted"
                else:
                    had = [e for e in recs_at(row) if e.rec["config"]["backend"] == choice]
                    why = ("flagged " + ", ".join(sorted({f for e in had for f in e.rec.get("flags") or ()}))
                           if had and any(e.rec.get("flags") for e in had)
                           else "error above tolerance" if had else "no record")
                lacks.append((s.name, why))
            else:
                parts.append((s.name, b, t, s.count))
        total = sum(t * n for _, _, t, n in parts) if not lacks else None
        out.append({"choice": choice, "total": total, "lacks": lacks, "parts": parts})
    return out


def _estimate_view(est: list[dict]) -> list[dict]:
    best_total = min((x["total"] for x in est if x["total"] is not None), default=None)
    view = []
    for x in est:
        t = x["total"]
        view.append({
            "choice": x["choice"], "total": t, "text": fmt_time(t) if t is not None else "no total",
            "vs": f"{t / best_total:.2f}x" if t is not None and best_total else "",
            "lacks": "; ".join(f"{s}: {why}" for s, why in x["lacks"]),
            "parts": " + ".join(f"{s} ({b}) {fmt_time(t)} x {n}" for s, b, t, n in x["parts"])})
    return view


# --- the end-to-end measurement beside the estimate ---------------------------------------------------------------

def catalog_regime(family: str, rec: dict) -> str | None:
    """The catalog regime whose per-site answers stand for an endtoend record's step: its decode batch, or the
    first prefill regime (the policy dispatches by regime bucket: docs/measurement.md, "End to end")."""
    names = [n for n, *_ in catalog.REGIMES.get(family, ())]
    reg = rec["config"]["regime"]
    if reg.startswith("decode-"):
        return reg if reg in names else next((n for n in names if n.startswith("decode-")), None)
    return next((n for n in names if n.startswith("prefill-")), None)


def policy_ratio(rows: list[dict], sites: list[catalog.Site], regime: str) -> float | None:
    """The estimate's norm-time ratio at ``regime``: what the policy runs (per site: the winner, the first of a tie,
    else eager, as ``apply_policy`` falls back) against eager everywhere. Each site's ratio is its paired one (the
    chosen backend's time / eager's in the same rounds: ``best``'s ``backends``), weighted by eager's median x the
    site's count; so a noisy record's decisive pairing counts (its median only weighs). None where a site has no
    eager record or its choice no pairing with eager."""
    by_site = {r["site"]: r for r in rows if r["regime"] == regime}
    num = den = 0.0
    for s in sites:
        row = by_site.get(s.name)
        if not row:
            return None
        bs = {b["backend"]: b for b in row.get("backends") or ()}
        eager = bs.get("eager")
        if not eager or not eager.get("time_s"):
            return None
        pick = (row.get("winner") or (row.get("ties") or ["eager"])[0]) if row["status"] in ANSWERED else "eager"
        if pick == "eager":
            ratio = 1.0
        elif eager.get("vs") == pick and eager.get("paired") and eager.get("ratio"):
            ratio = 1.0 / eager["ratio"]  # eager's entry is eager / the chosen one
        else:
            return None
        w = eager["time_s"] * s.count
        num += w * ratio
        den += w
    return num / den if den else None


def e2e_view(rec: dict, predicted_norm_ratio: float | None, regime: str | None) -> dict:
    """One endtoend record as the page shows it, with the estimate's prediction for the whole step and whether the
    measurement agrees: the estimate's norm-time ratio (:func:`policy_ratio` at the catalog regime) scaled by the
    measured norm share gives a predicted whole-step ratio ``1 - share x (1 - ratio)``; it *disagrees* when that lies
    outside the measured paired interval."""
    m, c, prov = rec["metrics"], rec["config"], rec["provenance"]
    p = m["paired"]
    share = m.get("norm_share_original")
    out = {"regime": c["regime"], "pass": c["pass"], "catalog_regime": regime or "",
           "shape": (f"{c['batch']} x {c['tokens']} tokens" if c["regime"].startswith("prefill")
                     else f"{c['batch']} sequences, 1 new token over {c['context']} cached"),
           "original": fmt_time(m["time_original_s"]), "policy": fmt_time(m["time_policy_s"]),
           "speedup": f"{1 / p['ratio']:.3f}x", "ci": f"[{1 / p['ci'][1]:.3f}, {1 / p['ci'][0]:.3f}]",
           "verdict": {"faster": "policy faster", "slower": "policy slower"}.get(p["verdict"], p["verdict"]),
           "n": p["n"], "flags": ", ".join(rec.get("flags") or ()),
           "flag_reasons": "; ".join(f"{k}: {v}" for k, v in (rec.get("flag_reasons") or {}).items()),
           "share": f"{100 * share:.1f}%" if share is not None else "?",
           "share_policy": (f"{100 * m['norm_share_policy']:.1f}%" if m.get("norm_share_policy") is not None
                            else "?"),
           "measured_norm": "", "predicted": "", "agree": None, "id": rec["id"],
           # when and by which code: a row measured by an earlier dispatch is read as such
           "when": f"{(prov.get('timestamp') or '')[:10]} · {(prov.get('git_commit') or '?')[:7]}"}
    no, np_ = m.get("norm_time_original_s"), m.get("norm_time_policy_s")
    if no and np_:
        out["measured_norm"] = f"{no / np_:.2f}x"
    if predicted_norm_ratio is not None and share is not None:
        step = 1 - share * (1 - predicted_norm_ratio)
        out["predicted"] = f"{1 / step:.3f}x (norms {1 / predicted_norm_ratio:.2f}x faster at {regime})"
        out["agree"] = p["ci"][0] <= step <= p["ci"][1]
    return out


def e2e_rows(bm: "ByModel", key: str, hw: str) -> tuple[list[dict], list[dict]]:
    """The model's endtoend records on ``hw`` with the estimate's prediction (from ``best``'s answers at the catalog
    regime, the record's dtype and pass; the kernel pass ``fwd`` for a ``fwd`` step, ``fwd+bwd`` for a training
    step): (the newest record of each step, pass and dtype; the earlier ones, newest first), an earlier one being
    what an older dispatch or other settings measured."""
    m = bm.model(key)
    plain = [s for s in m.sites if not fused(s)]
    latest, earlier, seen = [], [], set()
    recs = sorted(bm.e2e.get((key, hw), []), key=lambda e: e.rec["provenance"].get("timestamp") or "", reverse=True)
    for e in sorted(recs, key=lambda e: (e.rec["config"]["regime"], PASS_ORDER.get(e.rec["config"]["pass"], 9))):
        rec = e.rec
        reg = catalog_regime(m.family, rec)
        ratio = None
        if reg:
            rows = bm.answer(key, hw, rec["config"]["dtype"], rec["config"]["pass"])
            ratio = policy_ratio(rows, plain, reg)
        step = (rec["config"]["regime"], rec["config"]["pass"], rec["config"]["dtype"])
        (earlier if step in seen else latest).append({**e2e_view(rec, ratio, reg), "href": e.href})
        seen.add(step)
    return latest, earlier


# --- the pages' contexts ----------------------------------------------------------------------------------------------

def page_context(bm: ByModel, key: str, hw: str, up: str) -> dict:
    m = bm.model(key)
    regimes = [name for name, _b, _s in catalog.regimes(m.family)]
    plain = [s for s in m.sites if not fused(s)]
    fusd = [s for s in m.sites if fused(s)]
    combos = []
    for dtype, pass_ in bm.combos(key, hw):
        rows = bm.answer(key, hw, dtype, pass_)
        grid = []
        for s in m.sites:
            cells = []
            for reg in regimes:
                row = next(r for r in rows if r["site"] == s.name and r["regime"] == reg)
                cells.append(cell(row, bm.records_at(row), up))
            grid.append({"site": s.name, "norm": s.norm, "width": s.width, "count": s.count, "fused": fused(s),
                         "cells": cells})
        counts = {st: sum(r["status"] == st for r in rows) for st in STATUSES}
        est = [{"regime": reg, "unit": regime_unit(m.family, reg),
                "plain": _estimate_view(estimate(rows, plain, reg, bm.records_at)),
                "fused": _estimate_view(estimate(rows, fusd, reg, bm.records_at))} for reg in regimes]
        combos.append({"dtype": dtype, "pass": pass_, "anchor": combo_anchor(dtype, pass_), "grid": grid,
                       "counts": counts, "estimate": est,
                       "best_command": f"normbench best --model {key} --device {hw} --dtype {dtype} --pass {pass_}"})
    return {"key": key, "name": m.name, "family": m.family, "config_url": m.config_url, "hw": hw,
            "endtoend": (e2e := e2e_rows(bm, key, hw))[0], "endtoend_earlier": e2e[1],
            "regimes": [(r, regime_unit(m.family, r)) for r in regimes], "combos": combos,
            "plain_sites": ", ".join(s.name for s in plain), "fused_sites": ", ".join(s.name for s in fusd),
            "sites": [{"site": s.name, "norm": s.norm, "width": s.width, "count": s.count,
                       "rows_per_token": s.rows_per_token, "tokens": s.tokens, "note": s.note} for s in m.sites],
            "tie_factor": best.TIE_FACTOR, "err_tol": ", ".join(f"{d} {t:g}" for d, t in best.ERR_TOL.items())}


def machine_index_rows(bm: ByModel, hw: str, hub: bool = False) -> dict[str, list[dict]]:
    """``index_rows`` of one device, by model: a function of that device's records alone (cached per machine).
    ``hub``: link the model's one page with the machine picked (many machines) instead of a page per machine."""
    out: dict[str, list[dict]] = {}
    for m in bm.models:
        if not (bm.at_targets(m.key, hw) or (m.key, hw) in bm.e2e):
            continue
        rows_of = out.setdefault(m.key, [])
        for dtype, pass_ in bm.combos(m.key, hw):
            rows = bm.answer(m.key, hw, dtype, pass_)
            counts = {st: sum(r["status"] == st for r in rows) for st in STATUSES}
            rows_of.append({"key": m.key, "name": m.name, "family": m.family, "hw": hw, "dtype": dtype,
                            "pass": pass_, "href": (f"{model_hub_file(m.key)}#m={slug(hw)}" if hub else
                                                    f"{model_file(m.key, hw)}#{combo_anchor(dtype, pass_)}"),
                            "cells": len(rows), "answered": sum(counts[s] for s in ANSWERED), **counts})
    return out


def index_rows(bm: ByModel, per_machine=None, hub: bool = False) -> list[dict]:
    """One row per model, device, dtype and pass with records: how many cells are answered, undecided, ...
    ``per_machine(what, hw, make)``: where a device's rows are kept between builds (``pages.Site.per_machine``)."""
    what = "models_index_hub" if hub else "models_index"
    by_hw = {hw: (per_machine(what, hw, lambda hw=hw: machine_index_rows(bm, hw, hub)) if per_machine
                  else machine_index_rows(bm, hw, hub)) for hw in bm.hws}
    return [r for key, hw in bm.pairs() for r in by_hw[hw].get(key, [])]
