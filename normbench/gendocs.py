"""Numbers in ``docs/`` generated from the records (``normbench docs``): marked blocks, rewritten or checked.

A block sits between ``<!-- normbench:generated NAME begin -->`` and ``<!-- normbench:generated NAME end -->``;
everything outside the markers is prose and is left alone. ``normbench docs --check`` exits 1 when a block differs
from what the committed records give (the test suite runs the same check).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from normbench import claims as C
from normbench import stats as S
from normbench.results.counted import one_per_id

DOC = Path("docs") / "accuracy.md"
_BLOCK = re.compile(r"(<!-- normbench:generated (?P<name>[a-z0-9-]+) begin -->\n)(?P<body>.*?)"
                    r"(<!-- normbench:generated (?P=name) end -->)", re.S)
MARKER_LINE = re.compile(r"^<!-- normbench:generated [a-z0-9-]+ (begin|end) -->\n?", re.M)


def _fmt(v, metric: str | None = None) -> str:
    if v is None:
        return "–"
    if metric and metric.lower() in ("top1", "top5", "accuracy", "acc"):
        return f"{v:.3f}"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def cells_markdown(records: list[dict]) -> str:
    """One table per task, model, variant and machine (cells never compare across hardware): every cell ranked by
    divergence rate, then the metric."""
    acc = [r for r in one_per_id(records) if r.get("kind") == "accuracy"]
    if not acc:
        return "No accuracy records yet."
    by_table: dict[tuple, list[dict]] = {}
    for r in acc:
        cfg = r["config"]
        key = (cfg.get("task_offline") is not True, str(cfg.get("task")), str(cfg.get("model")),
               str(cfg.get("variant") or "default"), cfg.get("quick") is True,
               str(r["provenance"].get("hardware_id")))
        by_table.setdefault(key, []).append(r)
    out = []
    for key in sorted(by_table):
        _, task, model, variant, quick, hardware = key
        cells = S.aggregate(by_table[key])
        c0 = cells[0]
        log = S.is_log_metric(c0["metric"])
        centre = "geometric mean [95% CI]" if log else "mean [95% CI]"
        spread = "sd of log" if log else "sd"
        title = f"{task}/{model}" + ("" if variant == "default" else f"/{variant}") + (" (quick)" if quick else "")
        direction = "higher" if c0["higher_is_better"] else "lower"
        out.append(f"#### `{C.escape_md(title).replace('`', '')}` on {C.escape_md(hardware)} "
                   f"({C.escape_md(c0['metric'])}, {direction} is better)\n")
        ref = S.reference_of(model)
        vs = ("vs " + ref[0] + (f" ({ref[1]})" if ref[1] else "") + (": ratio" if log else ": difference")
              + " [95% CI], Welch p (MWU p)") if ref else "vs reference"
        out.append(f"| # | norm | placement | {centre} | {spread} | runs | diverged | steps to target "
                   f"(geometric mean, reached) | {vs} | flagged | tuning runs |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        tuning = [c for c in cells if c["n"] == 0 and c["tuning"]]
        cells = [c for c in cells if not (c["n"] == 0 and c["tuning"])]
        for i, c in enumerate(cells, 1):
            f = c["final"]
            ci = f" [{_fmt(f['ci_low'], c['metric'])}, {_fmt(f['ci_high'], c['metric'])}]" if f["ci_low"] is not None \
                else ""
            stt = c["steps_to_target"]
            out.append(f"| {i} | {C.escape_md(c['norm'])} | {C.escape_md(c['placement'] or '')} | "
                       f"{_fmt(f['mean'], c['metric'])}{ci} | "
                       f"{_fmt(f['std'])} | {c['n']} | {c['diverged']} | {_fmt(stt['mean'])} "
                       f"({c['reached']}/{c['n']}) | {(c['vs_reference'] or {}).get('text', '')} | "
                       f"{c['flagged']} | {c['tuning']} |")
        if tuning:
            out.append("")
            out.append("Learning-rate search (validation split; never ranked):\n")
            out.append(f"| norm | placement | lr | {centre.split(' [')[0]} | runs | diverged |")
            out.append("|---|---|---|---|---|---|")
            for c in sorted(tuning, key=lambda c: (c["norm"], c["placement"] or "", c["lr"] or 0)):
                t = c["tuning_final"]
                out.append(f"| {C.escape_md(c['norm'])} | {C.escape_md(c['placement'] or '')} | {_fmt(c['lr'])} | "
                           f"{_fmt(t['mean'], c['metric'])} | {c['tuning']} | {c['tuning'] - t['n']} |")
        out.append("")
    return "\n".join(out).rstrip()


def ceiling_rankings_markdown(records: list[dict], n: int = 5) -> str:
    """Per CPU or GPU: the "closest to the ceiling" ranking as it was (every ranked kernel record by percent of the DRAM
    copy ceiling) beside the rankings of issue #28 (records that are not cache-resident by the DRAM percentage;
    cache-resident ones by percent of their same-size copy), and how each record's residency is known."""
    from collections import Counter

    from normbench.records.residency import known_caches, ranked_against_dram, record_residency

    kern = [r for r in one_per_id(records) if r.get("kind") == "kernel"]
    if not kern:
        return "No kernel records yet."
    known = known_caches(kern)

    def pct(r, key):
        v = (r.get("metrics") or {}).get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def line(i, r, key):
        c, m = r["config"], r["metrics"]
        ws = m.get("working_set_bytes") or m.get("bytes_moved") or 0
        res, how = record_residency(r, known)
        return (f"| {i} | {C.escape_md(r['norm']['name'])} | {C.escape_md(str(c.get('backend')))} | "
                f"{C.escape_md(str(c.get('shape_label') or c.get('shape')))} | {c.get('dtype')} | {c.get('pass')} | "
                f"{ws / 2**20:.1f} | {res or 'unknown'} ({how}) | {_fmt(pct(r, key))} |")

    head = ("| # | norm | backend | shape | dtype | pass | working set (MiB) | cache (how known) | {} |\n"
            "|---|---|---|---|---|---|---|---|---|")
    out = []
    for hw in sorted({r["provenance"]["hardware_id"] for r in kern}):
        rows = [r for r in kern if r["provenance"]["hardware_id"] == hw and not r.get("flags")]
        res = {id(r): record_residency(r, known) for r in rows}
        by_dram = sorted((r for r in rows if pct(r, "pct_of_ceiling") is not None),
                         key=lambda r: -pct(r, "pct_of_ceiling"))
        dram = [r for r in by_dram if ranked_against_dram(res[id(r)][0])]
        copy = sorted((r for r in rows if not ranked_against_dram(res[id(r)][0])
                       and pct(r, "pct_of_same_size_copy") is not None), key=lambda r: -pct(r, "pct_of_same_size_copy"))
        hows = Counter(f"{res[id(r)][0] or 'unknown'} ({res[id(r)][1]})" for r in rows)
        out.append(f"#### {C.escape_md(hw)}\n")
        caches = known.get(hw)
        out.append(f"{len(rows)} ranked kernel records; cache sizes "
                   + (f"L2 {caches['l2_bytes'] / 2**20:g} MiB per core, last level {caches['llc_bytes'] / 2**20:g} MiB"
                      if caches and caches.get("l2_bytes") and caches.get("llc_bytes") else "not recorded")
                   + "; residency: " + ", ".join(f"{k}: {v}" for k, v in sorted(hows.items())) + ".\n")
        out.append(f"Before (every ranked record by % of the DRAM ceiling), top {n}:\n")
        out.append(head.format("% of DRAM ceiling"))
        out += [line(i, r, "pct_of_ceiling") for i, r in enumerate(by_dram[:n], 1)] or ["| – |"]
        out.append(f"\nNow, not cache-resident, by % of the DRAM ceiling ({len(dram)} records), top {n}:\n")
        out.append(head.format("% of DRAM ceiling"))
        out += [line(i, r, "pct_of_ceiling") for i, r in enumerate(dram[:n], 1)] or ["| – | none |"]
        out.append(f"\nNow, cache-resident, by % of a same-size copy ({len(copy)} records), top {n}:\n")
        out.append(head.format("% of same-size copy"))
        out += [line(i, r, "pct_of_same_size_copy") for i, r in enumerate(copy[:n], 1)] or ["| – | none |"]
        out.append("")
    return "\n".join(out).rstrip("\n")


def blocks(records: list[dict]) -> dict[str, str]:
    from normbench.softmax import softmax_markdown

    return {"claims": C.to_markdown(C.evaluate(records)), "cells": cells_markdown(records),
            "softmax": softmax_markdown(records), "ceiling-rankings": ceiling_rankings_markdown(records)}


def render(text: str, generated: dict[str, str]) -> str:
    """``text`` with each marked block's body replaced by its generated content (unknown blocks are left alone)."""
    def sub(m):
        name = m.group("name")
        if name not in generated:
            return m.group(0)
        return m.group(1) + generated[name].rstrip("\n") + "\n" + m.group(4)

    return _BLOCK.sub(sub, text)


def stale(path: Path, records: list[dict], gen: dict[str, str] | None = None) -> list[str]:
    """Names of the blocks in ``path`` that differ from what ``records`` give (empty: up to date)."""
    text = path.read_text(encoding="utf-8")
    gen = blocks(records) if gen is None else gen
    return [m.group("name") for m in _BLOCK.finditer(text)
            if m.group("name") in gen and m.group("body").rstrip("\n") != gen[m.group("name")].rstrip("\n")]


def documents(docs_dir: Path = DOC.parent) -> list[Path]:
    """The Markdown files under ``docs_dir`` that hold generated blocks."""
    return sorted(p for p in docs_dir.glob("*.md") if _BLOCK.search(p.read_text(encoding="utf-8")))


def register(sub) -> None:
    p = sub.add_parser("docs", help="regenerate the statistics blocks in docs/*.md from the records")
    p.add_argument("--results", default="results", help="results directory (default: results)")
    p.add_argument("--doc", nargs="+", default=None, metavar="PATH",
                   help="documents with generated blocks (default: every docs/*.md that has one)")
    p.add_argument("--check", action="store_true", help="only check; exit 1 if a block is out of date")
    p.set_defaults(func=_cmd_docs)


def _cmd_docs(args) -> int:
    from normbench.records import atomic_write_text

    paths = [Path(d) for d in args.doc] if args.doc else documents()
    if not paths:
        raise ValueError(f"no document with generated blocks under {DOC.parent}/ (run from the repository root, "
                         "or pass --doc PATH)")
    records = C.load_records(args.results)
    gen = blocks(records)
    status = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if not _BLOCK.search(text):
            raise ValueError(f"{path} has no generated blocks (<!-- normbench:generated NAME begin --> ... end -->)")
        if args.check:
            for n in stale(path, records, gen):
                print(f"{path}: block {n!r} is out of date; run `normbench docs`", file=sys.stderr)
                status = 1
            continue
        new = render(text, gen)
        if new != text:
            atomic_write_text(path, new)
            print(f"updated {path}", file=sys.stderr)
    return status
