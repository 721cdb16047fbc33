"""``normbench compare BASE NEW``: per kernel case, the time ratio NEW/BASE with a noise-aware verdict.

Cases are matched on everything that defines a measurement (hardware, norm and config, without the implementation
hash: comparing two implementations is the point). Where a set holds several records of one case (re-measured after
a code change), the newest counts.

Verdict, as ``asv compare`` decides it: a ratio beyond ``factor`` (or below ``1/factor``) is a change only when it is
also larger than the noise, judged from each record's quantiles and repetition count. The distribution-free 99 %
confidence interval of a median of ``n`` samples runs between the order statistics at quantiles ``0.5 ± 2.576 · 0.5 /
√n`` (normal approximation of the binomial); the record's quantile function is interpolated linearly through its
minimum, q25, median and q75, and above q75 towards Tukey's fence ``q75 + 1.5 · IQR`` (records keep no maximum). Timings
are skewed (a preempted repetition is slow, never fast), which is why no normal-theory interval is used. Two cases
differ when their intervals do not overlap. Verdicts: ``slower`` (a regression), ``faster``, ``within noise`` (a ratio
beyond the factor that the noise explains), ``same`` (within the factor), ``failed`` (NEW is invalid, e.g. NaN output,
where BASE was not: also a regression), and ``only in base`` / ``only in new``. Flags of either record are shown beside
the verdict.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from normbench.records.schema import ID_IGNORED_CONFIG, is_invalid, record_flags

#: The default factor: a 10 % change (``asv compare``'s default).
DEFAULT_FACTOR = 1.1
_Z99 = 2.5758


@dataclass
class Row:
    """One compared case."""

    case: str
    base: dict | None
    new: dict | None
    ratio: float | None = None
    verdict: str = ""
    flags: list = field(default_factory=list)

    def to_dict(self) -> dict:
        def side(r):
            if r is None:
                return None
            m = r["metrics"]
            return {"id": r["id"], "impl_hash": r.get("impl_hash", ""), "time_median_s": m.get("time_median_s"),
                    "time_iqr_s": m.get("time_iqr_s"), "reps": m.get("reps"), "flags": record_flags(r)}

        return {"case": self.case, "verdict": self.verdict, "ratio": self.ratio, "flags": self.flags,
                "base": side(self.base), "new": side(self.new)}


def _quantile_fn(m: dict):
    med = m["time_median_s"]
    iqr = m.get("time_iqr_s") or 0.0
    q25 = m.get("time_q25_s", med - iqr / 2)
    q75 = m.get("time_q75_s", med + iqr / 2)
    q25 = med - iqr / 2 if q25 is None else q25
    q75 = med + iqr / 2 if q75 is None else q75
    lo = m.get("time_min_s")
    lo = min(q25, lo) if lo is not None else q25
    points = [(0.0, lo), (0.25, q25), (0.5, med), (0.75, q75), (1.0, q75 + 1.5 * (q75 - q25))]

    def q(p: float) -> float:
        for (p0, v0), (p1, v1) in zip(points, points[1:]):
            if p <= p1:
                return v0 + (v1 - v0) * (p - p0) / (p1 - p0)
        return points[-1][1]

    return q


def median_interval(rec: dict, z: float = _Z99) -> tuple[float, float]:
    """The approximate 99 % confidence interval of a record's median time (see the module docstring)."""
    m = rec["metrics"]
    n = max(1, int(m.get("reps") or 1))
    d = min(0.5, z * 0.5 / math.sqrt(n))
    q = _quantile_fn(m)
    return q(0.5 - d), q(0.5 + d)


def differs(base: dict, new: dict) -> bool:
    """True when the two medians' confidence intervals do not overlap: the change is larger than the noise."""
    lo_b, hi_b = median_interval(base)
    lo_n, hi_n = median_interval(new)
    return hi_b < lo_n or hi_n < lo_b


def _case_key(rec: dict, ignore_hardware: bool) -> str:
    cfg = {k: v for k, v in rec["config"].items() if k not in ID_IGNORED_CONFIG}
    hw = "" if ignore_hardware else rec["provenance"]["hardware_id"]
    return json.dumps([hw, rec["norm"]["name"], cfg], sort_keys=True, default=str)


def describe_case(rec: dict, with_hardware: bool = True) -> str:
    cfg = rec["config"]
    shape = "x".join(str(d) for d in cfg.get("shape") or [])
    parts = [rec["norm"]["name"], str(cfg.get("backend")), f"{cfg.get('layout')}:{shape}", str(cfg.get("dtype")),
             str(cfg.get("pass"))]
    if cfg.get("device") != "cpu" and cfg.get("timing"):
        parts.append(str(cfg["timing"]))
    if cfg.get("harness") not in (None, "cli"):
        parts.append(str(cfg["harness"]))
    if with_hardware:
        parts.append(rec["provenance"]["hardware_id"])
    return "/".join(parts)


def _latest(records, ignore_hardware: bool) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for rec in records:
        key = _case_key(rec, ignore_hardware)
        cur = out.get(key)
        if cur is None or str(rec["provenance"].get("timestamp")) >= str(cur["provenance"].get("timestamp")):
            out[key] = rec
    return out


def load_set(path) -> list[dict]:
    """The valid kernel records at ``path`` (a results directory or a record file); invalid ones are warned about."""
    from normbench.records.store import iter_records

    return [rec for _, rec in iter_records(path, kind="kernel", errors="warn")]


def compare(base: list[dict], new: list[dict], factor: float = DEFAULT_FACTOR,
            ignore_hardware: bool = False) -> list[Row]:
    """Every case of ``base`` and ``new``, compared; sorted by ratio, largest slow-down first."""
    if not factor > 1.0:
        raise ValueError(f"--factor must be greater than 1 (1.1 = a 10% change), got {factor}")
    b, n = _latest(base, ignore_hardware), _latest(new, ignore_hardware)
    rows = []
    for key in sorted(set(b) | set(n)):
        rb, rn = b.get(key), n.get(key)
        ref = rn or rb
        row = Row(describe_case(ref, not ignore_hardware), rb, rn)
        row.flags = sorted({f"base:{f}" for f in (record_flags(rb) if rb else ())}
                           | {f"new:{f}" for f in (record_flags(rn) if rn else ())})
        if rb is None:
            row.verdict = "only in new"
        elif rn is None:
            row.verdict = "only in base"
        elif is_invalid(rn) and not is_invalid(rb):
            row.verdict = "failed"
        elif is_invalid(rb) or is_invalid(rn):
            row.verdict = "invalid"  # both broken (or only the base): no time to compare
        else:
            row.ratio = rn["metrics"]["time_median_s"] / rb["metrics"]["time_median_s"]
            if row.ratio >= factor or row.ratio <= 1.0 / factor:
                if differs(rb, rn):
                    row.verdict = "slower" if row.ratio > 1 else "faster"
                else:
                    row.verdict = "within noise"
            else:
                row.verdict = "same"
        rows.append(row)
    order = {"failed": 0}
    rows.sort(key=lambda r: (order.get(r.verdict, 1), -(r.ratio if r.ratio is not None else -math.inf), r.case))
    return rows


REGRESSIONS = ("slower", "failed")
_MARK = {"slower": "+", "faster": "-", "within noise": "~", "same": " ", "failed": "!", "invalid": "x",
         "only in base": "<", "only in new": ">"}


def _fmt_time(rec: dict | None) -> str:
    if rec is None:
        return "–"
    m = rec["metrics"]
    t, iqr = m["time_median_s"], m.get("time_iqr_s") or 0.0
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if t >= scale or unit == "ns":
            return f"{t / scale:.3g}±{iqr / scale:.2g}{unit}"
    return f"{t:.3g}s"


def format_table(rows: list[Row], only_changed: bool = False) -> str:
    shown = [r for r in rows if not only_changed or r.verdict in ("slower", "faster", "failed")]
    lines = [f"{'':1} {'before':>16} {'after':>16} {'ratio':>7}  {'verdict':<13} case"]
    for r in shown:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "–"
        flags = f"  [{', '.join(r.flags)}]" if r.flags else ""
        lines.append(f"{_MARK.get(r.verdict, '?')} {_fmt_time(r.base):>16} {_fmt_time(r.new):>16} {ratio:>7}  "
                     f"{r.verdict:<13} {r.case}{flags}")
    return "\n".join(lines)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare two sets of kernel records: per case the time ratio and a noise-aware verdict",
        description="Match the kernel cases of BASE and NEW (results directories or record files) and print, per "
                    "case, before and after median ± IQR, the ratio NEW/BASE and a verdict: slower / faster when the "
                    "ratio is beyond --factor and larger than the noise (99%% confidence intervals of the medians "
                    "from the recorded IQR and repetitions do not overlap), within noise when it is not, same "
                    "within the factor, failed when NEW is invalid (e.g. NaN output). Sorted by ratio, largest "
                    "slow-down first. Exit status 1 when any case is slower or failed, like `asv compare`'s "
                    "regressions.")
    p.add_argument("base", metavar="BASE", help="the reference records (directory or file)")
    p.add_argument("new", metavar="NEW", help="the records to judge (directory or file)")
    p.add_argument("--factor", type=float, default=DEFAULT_FACTOR,
                   help=f"the smallest ratio counted as a change (default {DEFAULT_FACTOR}: 10%%)")
    p.add_argument("--only-changed", action="store_true", help="list only slower, faster and failed cases")
    p.add_argument("--ignore-hardware", action="store_true",
                   help="match cases across machines (compare one GPU with another)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args) -> int:
    for path in (args.base, args.new):
        if not Path(path).exists():
            print(f"{path}: no such file or directory (pass a results directory or a record file)", file=sys.stderr)
            return 2
    try:
        rows = compare(load_set(args.base), load_set(args.new), args.factor, args.ignore_hardware)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    if args.json:
        from normbench._stdout import document_stream

        print(json.dumps({"factor": args.factor, "counts": counts, "rows": [r.to_dict() for r in rows]}, indent=1),
              file=document_stream())
    else:
        if not rows:
            print("no kernel records to compare")
        else:
            print(format_table(rows, args.only_changed))
        summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        print(f"\n{len(rows)} cases: {summary or 'none'} (factor {args.factor:g})")
    regressions = sum(counts.get(v, 0) for v in REGRESSIONS)
    if regressions:
        print(f"{regressions} regression(s): slower beyond {args.factor:g}x and the noise, or failed",
              file=sys.stderr)
        return 1
    return 0
