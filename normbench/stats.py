"""The one statistics module (scipy): seed summaries, cell ranking, Welch/Mann–Whitney/TOST comparisons, Holm.

Every statistic normbench publishes (the ``train`` summary, the site, ``normbench claims``, the generated blocks in
``docs/``) comes from here. Rules, each stated once:

- **Scale.** Perplexity (and any other ratio-like metric in :data:`LOG_METRICS`) is summarised on a log scale: the
  centre is the geometric mean and the interval is the Student-t interval of log values, mapped back. Accuracy is
  summarised on its own scale.
- **Failures are results.** A diverged run has no final metric; it counts in its cell's divergence rate, and cells rank
  by divergence rate first and metric second. Runs flagged ``tuning`` belong to the learning-rate search: shown, never
  in a cell's statistics. Runs with any other flag (``non_finite``, ``unchecked``, ...) are shown and never counted.
- **Zero variance** gives a defined answer, never NaN: the interval collapses to the mean, and a difference between
  two zero-variance cells is exact (p = 0 when the means differ, 1 when they are equal).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np


def _st():
    """scipy.stats, imported when a statistic is first computed: it takes ~1.2 s to import, which every ``normbench``
    command paid at start (its subcommands' modules import this one) whether it computed a statistic or not."""
    from scipy import stats

    return stats


def _sp():
    from scipy import special

    return special


#: Metrics aggregated on a log scale (geometric mean, interval on log values).
LOG_METRICS = ("perplexity", "ppl", "steps_to_target")
CONFIDENCE = 0.95


def is_log_metric(metric: str | None) -> bool:
    return isinstance(metric, str) and metric.lower() in LOG_METRICS


# --- one sample --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """Centre, spread and confidence interval of one cell's values over seeds.

    ``mean`` is the arithmetic mean, or the geometric mean when ``log``; ``std`` is the sample standard deviation
    (ddof 1) on the analysis scale (of log values when ``log``); ``low``/``high`` bound the ``confidence`` interval
    of the centre on the metric's own scale. With one value ``std`` and the interval are None.
    """

    n: int
    mean: float | None
    std: float | None
    low: float | None
    high: float | None
    log: bool = False
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (symmetric on the linear scale; an approximation on the log scale)."""
        return None if self.low is None or self.high is None else (self.high - self.low) / 2

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "std": self.std, "ci_low": self.low, "ci_high": self.high,
                "scale": "log" if self.log else "linear", "confidence": self.confidence}


def _constant(x) -> bool:
    """Zero variance, decided exactly: every value identical (a computed variance can be 1e-33, not 0)."""
    x = np.asarray(x, float)
    return bool(len(x) and np.all(x == x[0]))


def _finite(values: Iterable) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            continue
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return out


def summarize(values: Iterable, *, log: bool = False, confidence: float = CONFIDENCE) -> Summary:
    """Summarise finite numbers (None, NaN and non-numbers are skipped: count failures separately)."""
    xs = _finite(values)
    if log:
        bad = [x for x in xs if x <= 0]
        if bad:
            raise ValueError(f"a log-scale summary needs positive values, got {bad[0]!r}")
        xs = [math.log(x) for x in xs]
    n = len(xs)
    back = math.exp if log else (lambda v: v)
    if n == 0:
        return Summary(0, None, None, None, None, log, confidence)
    arr = np.asarray(xs, dtype=float)
    centre = float(arr.mean())
    if n == 1:
        return Summary(1, back(centre), None, None, None, log, confidence)
    if _constant(arr):
        centre = float(arr[0])
        return Summary(n, back(centre), 0.0, back(centre), back(centre), log, confidence)
    std = float(arr.std(ddof=1))
    lo, hi = _st().t.interval(confidence, n - 1, loc=centre, scale=std / math.sqrt(n))
    return Summary(n, back(centre), std, back(float(lo)), back(float(hi)), log, confidence)


# --- two samples -------------------------------------------------------------------------------------------------

def welch_p(a: Sequence[float], b: Sequence[float], *, delta: float = 0.0, alternative: str = "two-sided") -> float:
    """Welch's t-test p-value of H0: mean(a) − mean(b) = ``delta`` (one-sided: ≤ for "greater", ≥ for "less").

    Two zero-variance samples: the difference is exact, so p is 0 when it lies strictly on the alternative's side
    and 1 otherwise (never NaN).
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least two values in each sample")
    if _constant(a) and _constant(b):
        d = float(a[0] - b[0] - delta)
        side = {"greater": d > 0, "less": d < 0, "two-sided": d != 0}[alternative]
        return 0.0 if side else 1.0
    return float(_st().ttest_ind(a - delta, b, equal_var=False, alternative=alternative).pvalue)


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mann–Whitney U of ``a`` against ``b`` and its two-sided p-value (1 when every value is tied)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.all(np.concatenate([a, b]) == a[0]):
        return len(a) * len(b) / 2.0, 1.0
    r = _st().mannwhitneyu(a, b, alternative="two-sided")
    return float(r.statistic), float(r.pvalue)


@dataclass(frozen=True)
class Difference:
    """``a`` against ``b`` on the analysis scale: effect = mean(a) − mean(b) (a log ratio on the log scale)."""

    n_a: int
    n_b: int
    log: bool
    effect: float
    low: float
    high: float
    t: float
    df: float
    p: float               # Welch, two-sided
    mwu_u: float
    mwu_p: float           # Mann–Whitney U, two-sided
    confidence: float = CONFIDENCE

    @property
    def ratio(self) -> tuple[float, float, float] | None:
        """(ratio, low, high) of the centres when on the log scale (geometric mean of a / of b)."""
        return (math.exp(self.effect), math.exp(self.low), math.exp(self.high)) if self.log else None

    def to_dict(self) -> dict:
        d = {"n_a": self.n_a, "n_b": self.n_b, "scale": "log" if self.log else "linear", "effect": self.effect,
             "ci_low": self.low, "ci_high": self.high, "confidence": self.confidence, "welch_t": self.t,
             "welch_df": self.df, "welch_p": self.p, "mann_whitney_u": self.mwu_u, "mann_whitney_p": self.mwu_p}
        if self.log:
            d["ratio"], d["ratio_low"], d["ratio_high"] = self.ratio
        return d


def transform(values: Iterable, log: bool) -> list[float]:
    xs = _finite(values)
    if log:
        if any(x <= 0 for x in xs):
            raise ValueError("a log-scale comparison needs positive values")
        return [math.log(x) for x in xs]
    return xs


def difference(a: Iterable, b: Iterable, *, log: bool = False, confidence: float = CONFIDENCE) -> Difference:
    """Welch's t-test and interval of mean(a) − mean(b) (on log values when ``log``), Mann–Whitney U beside it."""
    xa, xb = np.asarray(transform(a, log)), np.asarray(transform(b, log))
    if len(xa) < 2 or len(xb) < 2:
        raise ValueError("a comparison needs at least two finished runs in each cell")
    eff = float(xa.mean() - xb.mean())
    if _constant(xa) and _constant(xb):
        eff = float(xa[0] - xb[0])
        t = 0.0 if eff == 0 else math.copysign(math.inf, eff)
        df, lo, hi = float(len(xa) + len(xb) - 2), eff, eff
        p = 1.0 if eff == 0 else 0.0
    else:
        r = _st().ttest_ind(xa, xb, equal_var=False)
        ci = r.confidence_interval(confidence)
        t, df, p, lo, hi = float(r.statistic), float(r.df), float(r.pvalue), float(ci.low), float(ci.high)
    u, up = mann_whitney(xa, xb)
    return Difference(len(xa), len(xb), log, eff, lo, hi, t, df, p, u, up, confidence)


def one_sample_p(y: Sequence[float], *, popmean: float = 0.0, alternative: str = "two-sided") -> float:
    """One-sample t-test p-value of H0: mean(y) = ``popmean`` (one-sided as in :func:`welch_p`); zero variance gives
    0 or 1 as there."""
    y = np.asarray(y, float)
    if len(y) < 2:
        raise ValueError("a one-sample t-test needs at least two values")
    if _constant(y):
        d = float(y[0] - popmean)
        side = {"greater": d > 0, "less": d < 0, "two-sided": d != 0}[alternative]
        return 0.0 if side else 1.0
    # scipy's ttest_1samp, without its per-call argument handling (~0.5 ms: the claims run it thousands of times on
    # a leaderboard of many machines): t = (mean − popmean)/(s/√n) and Student's t distribution of n − 1 degrees of
    # freedom (scipy.special.stdtr, which stats.t uses); tests/test_stats.py checks it against ttest_1samp.
    n = len(y)
    t = (float(y.mean()) - popmean) / (float(y.std(ddof=1)) / math.sqrt(n))
    if alternative == "greater":
        return float(_sp().stdtr(n - 1, -t))
    if alternative == "less":
        return float(_sp().stdtr(n - 1, t))
    if alternative != "two-sided":
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    return float(2.0 * _sp().stdtr(n - 1, -abs(t)))


def wilcoxon_p(y: Sequence[float], popmean: float = 0.0) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the values' differences from ``popmean`` (1 when all are equal)."""
    d = np.asarray(y, float) - popmean
    if np.all(d == 0):
        return 1.0
    return float(_st().wilcoxon(d, zero_method="zsplit").pvalue)


def fisher_worse(fail_a: int, n_a: int, fail_b: int, n_b: int) -> float:
    """One-sided Fisher exact p-value that ``a`` fails (diverges) more often than ``b``."""
    return float(_st().fisher_exact([[fail_a, n_a - fail_a], [fail_b, n_b - fail_b]], alternative="greater").pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1), in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adj = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        adj[i] = running
    return adj


# --- records ------------------------------------------------------------------------------------------------------

def record_status(rec: dict) -> str:
    """``tuning`` (learning-rate search), ``diverged``, ``flagged`` (any other flag) or ``ok``."""
    flags = rec.get("flags") if isinstance(rec.get("flags"), list) else []
    met = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
    if "tuning" in flags:
        return "tuning"
    if "diverged" in flags or met.get("diverged") is True:
        return "diverged"
    if flags or met.get("suspect") is True:
        return "flagged"
    return "ok"


def cell_key(rec: dict) -> str:
    """Everything that must match for two runs to be seeds of one cell: hardware, norm and the config but the seed."""
    cfg = {k: v for k, v in rec["config"].items() if k != "seed"}
    try:
        return json.dumps([rec["provenance"].get("hardware_id"), rec["norm"]["name"], cfg], sort_keys=True,
                          default=str)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted: the record is its own cell
        return json.dumps([rec.get("id")])


@dataclass
class CellStats:
    """The seeds of one cell: counts by status and the summary of the finished, unflagged runs."""

    metric: str
    higher_is_better: bool
    values: list[float]                 # finals of the runs that count (status ok)
    n_diverged: int = 0
    n_flagged: int = 0
    n_tuning: int = 0
    summary: Summary = field(init=False)

    def __post_init__(self):
        self.summary = summarize(self.values, log=is_log_metric(self.metric))

    @property
    def n(self) -> int:
        """Runs that count: finished plus diverged (flagged and tuning runs do not)."""
        return len(self.values) + self.n_diverged

    @property
    def divergence_rate(self) -> float | None:
        return self.n_diverged / self.n if self.n else None


def cell_stats(records: Iterable[dict], value=lambda r: r["metrics"].get("final")) -> CellStats:
    """Counts and summary of one cell's records (all assumed to share ``cell_key``)."""
    recs = list(records)
    met = recs[0]["metrics"] if recs else {}
    cs = CellStats(str(met.get("metric", "metric")), met.get("higher_is_better") is not False, [])
    vals = []
    for r in recs:
        s = record_status(r)
        if s == "tuning":
            cs.n_tuning += 1
        elif s == "flagged":
            cs.n_flagged += 1
        elif s == "diverged":
            cs.n_diverged += 1
        else:
            v = value(r)
            if v is None or not math.isfinite(float(v)):
                cs.n_diverged += 1  # a finished run without a finite metric failed like a diverged one
            else:
                vals.append(float(v))
    cs.values = vals
    cs.__post_init__()
    return cs


def rank_key(divergence_rate: float | None, centre: float | None, higher_is_better: bool) -> tuple:
    """Sort key of a cell: divergence rate first (lower first), then the metric in its own direction;
    cells with no run that counts, or no finished run, go last."""
    if divergence_rate is None:
        return (2, 1.0, 0.0)
    if centre is None:
        return (1, divergence_rate, 0.0)
    return (0, divergence_rate, -centre if higher_is_better else centre)


#: Each cell's reference (what its norms are tested against): LayerNorm in token cells (Pre-LN in placement cells),
#: BatchNorm in image cells. Models with one fixed norm (Fixup, SkipInit, NF-ResNet) have none.
REFERENCES = {"gpt": ("layernorm", "pre_ln"), "vit": ("layernorm", None), "resnet": ("batchnorm", None)}


def reference_of(model: str | None) -> tuple[str, str | None] | None:
    """(norm, placement) of the reference cell in ``model``'s tables, or None."""
    return REFERENCES.get(model or "")


def versus(values: Sequence[float], reference: Sequence[float], *, log: bool) -> Difference | None:
    """A cell's finished values against its reference cell's (Welch, with Mann–Whitney beside), or None when either
    has fewer than two. Descriptive: only the claims' pre-registered comparisons are corrected for multiplicity."""
    a, b = _finite(values), _finite(reference)
    if len(a) < 2 or len(b) < 2:
        return None
    return difference(a, b, log=log)


def versus_text(d: Difference | None, metric: str | None) -> str:
    """``ratio 1.021 [0.998, 1.045], p 0.07 (MWU 0.10)`` (log scale) or ``+0.031 [...]`` (linear); '' for None."""
    if d is None:
        return ""
    if d.log:
        r, lo, hi = d.ratio
        eff = f"×{r:.3f} [{lo:.3f}, {hi:.3f}]"
    else:
        eff = f"{d.effect:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
    return f"{eff}, p {_pfmt(d.p)} (MWU {_pfmt(d.mwu_p)})"


def _pfmt(p: float) -> str:
    return "0" if p == 0 else (f"{p:.1e}" if p < 0.001 else f"{p:.3f}")


def table_key(rec: dict) -> tuple:
    """The table a record's cell belongs to: task, model, variant, budget, and the model options besides the norm."""
    cfg = rec["config"]
    return (cfg.get("task"), cfg.get("model"), cfg.get("variant") or "default", cfg.get("quick") is True,
            bool(cfg.get("qk_norm")), cfg.get("base_norm") or None, cfg.get("backend") or "eager")


def aggregate(records: Iterable[dict], confidence: float = CONFIDENCE) -> list[dict]:
    """Group accuracy records into cells (hardware, norm, config but seed) and summarise each, ranked.

    One dict per cell: norm, task, model, placement, recipe name, seeds, counts by status, the summary of
    ``final`` (log scale for perplexity) and of ``steps_to_target`` (log scale, over the runs that reached it), and
    ``vs_reference``: the cell against its table's reference cell (:data:`REFERENCES`; Welch and Mann–Whitney,
    uncorrected), or None. A cell of tuning runs only has ``n`` 0 and ``tuning_final``.
    """
    cells: dict[str, list[dict]] = {}
    for rec in records:
        cells.setdefault(cell_key(rec), []).append(rec)
    out = []
    for recs in cells.values():
        cfg, met = recs[0]["config"], recs[0]["metrics"]
        cs = cell_stats(recs)
        hw = recs[0]["provenance"].get("hardware_id")
        counted = [r for r in recs if record_status(r) in ("ok", "diverged")]
        stt = [r["metrics"].get("steps_to_target") for r in counted if record_status(r) == "ok"]
        out.append({
            "norm": recs[0]["norm"]["name"],
            "task": cfg.get("task"),
            "model": cfg.get("model"),
            "placement": cfg.get("placement"),
            "variant": cfg.get("variant", "default"),
            "recipe": (cfg.get("recipe") or {}).get("name"),
            "batch_size": cfg.get("batch_size"),
            "metric": met.get("metric"),
            "higher_is_better": met.get("higher_is_better") is not False,
            "seeds": sorted(r["config"]["seed"] for r in counted),
            "n": cs.n,
            "final": summarize(cs.values, log=is_log_metric(cs.metric), confidence=confidence).to_dict(),
            "steps_to_target": summarize([v for v in stt if v], log=True, confidence=confidence).to_dict(),
            "reached": sum(v is not None for v in stt),
            "diverged": cs.n_diverged,
            "divergence_rate": cs.divergence_rate,
            "flagged": cs.n_flagged,
            "tuning": cs.n_tuning,
            "lr": (cfg.get("recipe") or {}).get("lr"),
            "tuned": isinstance(cfg.get("lr_search"), dict),
            # The learning-rate search's own result (validation split): shown, never ranked or compared.
            "tuning_final": summarize([r["metrics"].get("final") for r in recs if record_status(r) == "tuning"],
                                      log=is_log_metric(cs.metric), confidence=confidence).to_dict(),
            "values": cs.values,
            "_ref_key": table_key(recs[0]) + (hw,),
        })
    # Each cell against its reference cell in the same table on the same hardware (recipes may differ per norm:
    # the learning rate is tuned per norm, and some norms' papers prescribe their own settings).
    by_key: dict[tuple, dict] = {}
    for c in sorted(out, key=lambda c: (c["tuned"], c["n"])):
        by_key[(c["_ref_key"], c["norm"], c["placement"])] = c  # a tuned cell, then the one with most runs, wins
    for c in out:
        ref = reference_of(c["model"])
        rc = by_key.get((c["_ref_key"], *ref)) if ref else None
        if rc is None or rc is c:
            c["vs_reference"] = None
            continue
        d = versus(c["values"], rc["values"], log=is_log_metric(c["metric"]))
        c["vs_reference"] = dict(d.to_dict(), reference=f"{ref[0]}" + (f" ({ref[1]})" if ref[1] else ""),
                                 text=versus_text(d, c["metric"])) if d else None
    for c in out:
        del c["_ref_key"]
    out.sort(key=lambda c: (c["task"] or "", c["recipe"] or "",
                            rank_key(c["divergence_rate"], c["final"]["mean"], c["higher_is_better"]), c["norm"]))
    return out


# --- paired timings (head-to-head, interleaved) -------------------------------------------------------------------

#: A head-to-head comparison is a tie when its ratio's interval lies inside [1/TIE_FACTOR, TIE_FACTOR]: the factor
#: of ``normbench compare`` (and ``asv compare``), a 10 % change.
TIE_FACTOR = 1.1
VERDICTS = ("faster", "slower", "tie", "undecided")


def median_ci_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based ranks ``(lo, hi)`` of the distribution-free interval for a median from ``n`` sorted values: the
    widest symmetric pair of order statistics whose binomial(n, 1/2) coverage is at least ``confidence`` (the
    sign-test interval; ``(0, n - 1)`` when even that covers less, as for n < 6)."""
    if n < 1:
        raise ValueError("no values")
    alpha = 1.0 - confidence
    best = 0
    cdf = 0.0
    for k in range(n // 2):
        cdf += math.comb(n, k) / 2.0 ** n  # P(X <= k)
        if cdf <= alpha / 2:
            best = k  # [X(k), X(n-1-k)] (0-based) covers 1 - 2 P(X <= k)
        else:
            break
    return best, n - 1 - best


@dataclass(frozen=True)
class Paired:
    """``a`` against ``b`` from paired repetitions: the median per-round ratio a/b, its interval, n, the verdict."""

    ratio: float
    lo: float
    hi: float
    n: int
    verdict: str

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "ci": [self.lo, self.hi], "n": self.n, "verdict": self.verdict,
                "confidence": CONFIDENCE, "tie_factor": TIE_FACTOR}


def verdict_of(lo: float, hi: float, factor: float = TIE_FACTOR) -> str:
    """``tie`` when [lo, hi] lies inside [1/factor, factor]; else ``faster`` (a/b below 1 for sure), ``slower``
    (above 1 for sure) or ``undecided`` (the interval holds 1 and reaches beyond the tie band)."""
    if lo >= 1.0 / factor and hi <= factor:
        return "tie"
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return "undecided"


def paired_ratio(a: Sequence[float], b: Sequence[float], factor: float = TIE_FACTOR,
                 confidence: float = CONFIDENCE) -> Paired:
    """Compare two sets of per-round times taken in the same rounds (``a[i]`` and ``b[i]`` in round ``i``, in a
    random order within the round): drift between rounds cancels in each round's ratio. The estimate is the median
    of the per-round ratios a/b and the interval is the sign-test interval of that median (distribution-free: one
    outlier round moves neither)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired samples need equal, non-zero lengths (got {len(a)} and {len(b)})")
    ratios = sorted(x / y for x, y in zip(a, b) if y > 0 and x > 0)
    n = len(ratios)
    if not n:
        raise ValueError("no positive paired times")
    mid = n // 2
    med = ratios[mid] if n % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])
    lo_r, hi_r = median_ci_ranks(n, confidence)
    lo, hi = ratios[lo_r], ratios[hi_r]
    return Paired(med, lo, hi, n, verdict_of(lo, hi, factor))
