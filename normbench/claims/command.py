"""The ``normbench claims`` command and the claims' text and Markdown output (also for the site and the docs)."""

from __future__ import annotations

import math

import numpy as np

from normbench.claims.evaluation import evaluate, load_records
from normbench.claims.rules import ALPHA, MIN_SEEDS, VERDICTS

# --- output ---------------------------------------------------------------------------------------------------------

def format_p(v) -> str:
    """A p-value as the tables print it: "–" when there is none."""
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.2g}" if v < 0.001 else f"{v:.3f}"


def comparison_line(r: dict) -> str:
    if not r["decidable"]:
        return f"{r['label']}: cannot decide yet ({r['reason']})"
    parts = [f"{r['label']} [{r['hardware']}]: n {r['n_a']}/{r['n_b']}"]
    if r["type"] == "accuracy" and (r["failed_a"] or r["failed_b"]):
        parts.append(f"failed {r['failed_a']}/{r['failed_b']}")
    if r.get("effect_text"):
        parts.append(r["effect_text"])
    parts.append(f"test {r['test']}, p(claim) {format_p(r['p_for_holm'])}, "
                 f"p(refute) {format_p(r['p_against_holm'])} (Holm)")
    if r.get("p_welch") is not None:
        parts.append(("Welch" if r["type"] == "accuracy" else "t") + f" p {format_p(r['p_welch'])}, "
                     + ("Mann–Whitney" if r["type"] == "accuracy" else "Wilcoxon")
                     + f" p {format_p(r['p_mann_whitney'])}")
    return "; ".join(parts) + f" -> {r['verdict']}"


def to_text(results: list[dict]) -> str:
    lines = []
    for c in results:
        lines.append(f"[{c['verdict'].upper()}] {c['id']}: {c['claim']}")
        lines.append(f"    {c['paper']} ({c['url']})")
        for r in c["comparisons"]:
            lines.append("    - " + comparison_line(r))
        for m in c["missing"]:
            lines.append(f"    missing run: {m}")
        lines.append(f"    scale: {c['scale_caveat']}")
    counts = {v: sum(c["verdict"] == v for c in results) for v in VERDICTS}
    lines.append(", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(results)} claims")
    return "\n".join(lines)


def to_markdown(results: list[dict]) -> str:
    """A Markdown table of every claim and its comparisons (the block generated into ``docs/accuracy.md``)."""
    out = ["| claim | paper | verdict | comparison | n (A/B) | effect [95% CI] "
           "| p two-sided: Welch (t) / MWU (Wilcoxon) | p Holm (claim / refute) |",
           "|---|---|---|---|---|---|---|---|"]
    for c in results:
        first = True
        for r in c["comparisons"]:
            head = (f"`{c['id']}`: {escape_md(c['claim'])}", f"[{escape_md(c['paper'])}]({c['url']})",
                    f"**{c['verdict']}**") if first else ("", "", "")
            first = False
            if r["decidable"]:
                cells = (f"{r['n_a']}/{r['n_b']}" + (f" (failed {r['failed_a']}/{r['failed_b']})"
                                                     if r["failed_a"] or r["failed_b"] else ""),
                         escape_md(r.get("effect_text") or "–"),
                         f"{format_p(r.get('p_welch'))} / {format_p(r.get('p_mann_whitney'))}",
                         f"{format_p(r['p_for_holm'])} / {format_p(r['p_against_holm'])}")
            else:
                cells = ("–", "cannot decide yet: " + escape_md(r["reason"]), "–", "–")
            out.append("| " + " | ".join(head + (escape_md(r["label"]) + f" → {r['verdict']}",) + cells) + " |")
    return "\n".join(out)


def escape_md(s: str) -> str:
    """``s`` made safe for one cell of a Markdown table."""
    return str(s).replace("|", "\\|").replace("\n", " ")


# --- command ----------------------------------------------------------------------------------------------------------

def register(sub) -> None:
    p = sub.add_parser("claims", help="each paper claim: reproduced / not reproduced / inconclusive, from the records")
    p.add_argument("--results", default="results", help="results directory (default: results)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--markdown", action="store_true", help="a Markdown table (as generated into docs/accuracy.md)")
    p.set_defaults(func=_cmd_claims)


def _cmd_claims(args) -> int:
    import json

    from normbench._stdout import document_stream

    results = evaluate(load_records(args.results))
    if args.json:
        print(json.dumps(_clean({"alpha": ALPHA, "min_seeds": MIN_SEEDS, "claims": results}), indent=1,
                         allow_nan=False), file=document_stream())
    elif args.markdown:
        print(to_markdown(results))
    else:
        print(to_text(results))
    return 0


def _clean(o):
    """JSON-safe: numpy scalars to Python, an infinite statistic (exact difference, zero variance) to "inf"."""
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.floating, np.integer)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return o
