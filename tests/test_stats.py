"""normbench.stats against independent computations: textbook formulas, scipy called directly, hand-made cells."""

from __future__ import annotations

import math

import numpy as np
import pytest
import test_site_support as sup
from scipy import stats as st

from normbench import stats as S

# --- one sample ---------------------------------------------------------------------------------------------------


def test_summary_is_the_student_t_interval_of_the_mean():
    s = S.summarize([0.90, 0.92, 0.94, None, float("nan")])  # None/NaN are failures, counted elsewhere
    assert (s.n, s.log) == (3, False)
    assert s.mean == pytest.approx(0.92) and s.std == pytest.approx(0.02)
    half = 4.302653 * 0.02 / math.sqrt(3)  # t_{0.975, 2} from a printed table
    assert (s.low, s.high) == (pytest.approx(0.92 - half), pytest.approx(0.92 + half))
    assert s.half_width == pytest.approx(half)


def test_perplexity_summary_is_geometric_with_an_interval_on_log_values():
    xs = [4.8, 5.1, 7.9, 5.0, 4.9]
    s = S.summarize(xs, log=True)
    assert s.mean == pytest.approx(st.gmean(xs))
    logs = np.log(xs)
    lo, hi = st.t.interval(0.95, len(xs) - 1, loc=logs.mean(), scale=st.sem(logs))
    assert (s.low, s.high) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))
    assert s.std == pytest.approx(np.std(logs, ddof=1))
    assert s.mean < np.mean(xs)  # a skewed sample: the arithmetic mean is pulled up by the outlier
    with pytest.raises(ValueError, match="positive"):
        S.summarize([1.0, 0.0], log=True)


def test_zero_variance_and_empty_summaries_are_defined():
    for log in (False, True):
        s = S.summarize([2.0, 2.0, 2.0], log=log)
        assert (s.n, s.std) == (3, 0.0)
        assert s.mean == pytest.approx(2.0) and s.low == pytest.approx(2.0) and s.high == pytest.approx(2.0)
    one = S.summarize([5.0])
    assert (one.n, one.mean, one.std, one.low, one.high) == (1, 5.0, None, None, None)
    none = S.summarize([None, "x", True])
    assert (none.n, none.mean, none.low) == (0, None, None)


# --- two samples --------------------------------------------------------------------------------------------------

A = [0.61, 0.58, 0.66, 0.63, 0.60]
B = [0.52, 0.55, 0.49, 0.57, 0.50, 0.54]


def _welch_by_formula(a, b):
    a, b = np.asarray(a), np.asarray(b)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t, df


def test_difference_is_welchs_test_with_its_interval_and_mann_whitney_beside():
    d = S.difference(A, B)
    t, df = _welch_by_formula(A, B)
    assert d.t == pytest.approx(t) and d.df == pytest.approx(df)
    assert d.p == pytest.approx(2 * st.t.sf(abs(t), df))
    half = st.t.ppf(0.975, df) * (d.effect / t)
    assert d.effect == pytest.approx(np.mean(A) - np.mean(B))
    assert (d.low, d.high) == (pytest.approx(d.effect - half), pytest.approx(d.effect + half))
    # Every A value beats every B value: U = n_a * n_b, exact two-sided p = 2 / C(11, 5).
    assert d.mwu_u == 30 and d.mwu_p == pytest.approx(2 / math.comb(11, 5))


def test_log_difference_is_a_ratio_of_geometric_means():
    a, b = [5.0, 5.2, 4.9], [6.1, 6.0, 6.4]
    d = S.difference(a, b, log=True)
    assert d.ratio[0] == pytest.approx(st.gmean(a) / st.gmean(b))
    assert d.p == pytest.approx(st.ttest_ind(np.log(a), np.log(b), equal_var=False).pvalue)


def test_one_sided_and_shifted_welch_match_scipy_on_shifted_samples():
    for delta in (0.0, 0.02, -0.05):
        for alt in ("greater", "less", "two-sided"):
            ref = st.ttest_ind(np.asarray(A) - delta, B, equal_var=False, alternative=alt).pvalue
            assert S.welch_p(A, B, delta=delta, alternative=alt) == pytest.approx(ref)


def test_zero_variance_comparisons_are_exact_never_nan():
    d = S.difference([1.0, 1.0, 1.0], [2.0, 2.0, 2.0])
    assert (d.effect, d.low, d.high, d.p, d.t) == (-1.0, -1.0, -1.0, 0.0, -math.inf)
    same = S.difference([3.0, 3.0], [3.0, 3.0, 3.0])
    assert (same.effect, same.p, same.t, same.mwu_p) == (0.0, 1.0, 0.0, 1.0)
    assert S.welch_p([1.0, 1.0], [2.0, 2.0], alternative="less") == 0.0
    assert S.welch_p([1.0, 1.0], [2.0, 2.0], alternative="greater") == 1.0
    assert S.welch_p([1.0, 1.0], [2.0, 2.0], delta=-1.0, alternative="two-sided") == 1.0  # exactly the shift
    # One sample constant, the other not: ordinary Welch (finite), as the formula gives.
    d = S.difference([1.0, 1.0, 1.0], [1.1, 1.2, 1.3])
    t, df = _welch_by_formula([1.0, 1.0, 1.0], [1.1, 1.2, 1.3])
    assert d.t == pytest.approx(t) and d.df == pytest.approx(df) and math.isfinite(d.p)
    with pytest.raises(ValueError, match="at least two"):
        S.difference([1.0], [1.0, 2.0])


def test_one_sample_and_wilcoxon_match_scipy():
    y = [0.05, 0.11, 0.02, 0.09, 0.07]
    assert S.one_sample_p(y, popmean=0.03, alternative="greater") == pytest.approx(
        st.ttest_1samp(y, 0.03, alternative="greater").pvalue)
    assert S.wilcoxon_p(y) == pytest.approx(st.wilcoxon(y).pvalue)
    assert S.one_sample_p([0.1, 0.1, 0.1], popmean=0.0, alternative="greater") == 0.0
    assert S.wilcoxon_p([0.0, 0.0]) == 1.0
    rng = np.random.default_rng(3)
    for n in (2, 3, 7, 40):
        for _ in range(5):
            y = rng.normal(rng.normal(), rng.uniform(0.01, 2.0), n)
            for alt in ("greater", "less", "two-sided"):
                pm = float(rng.normal()) * 0.3
                assert S.one_sample_p(y, popmean=pm, alternative=alt) == pytest.approx(
                    st.ttest_1samp(y, pm, alternative=alt).pvalue, rel=1e-10, abs=1e-300), (n, alt)
    with pytest.raises(ValueError, match="alternative"):
        S.one_sample_p([0.1, 0.2], alternative="bigger")


def test_holm_matches_the_textbook_step_down():
    # Holm (1979): sort, multiply the k-th smallest by (m - k + 1), carry the running maximum, cap at 1.
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert S.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert S.holm([]) == []


def test_fisher_failure_test_is_the_hypergeometric_tail():
    # 5 of 5 failed against 0 of 5: the one table as extreme, probability 1 / C(10, 5).
    assert S.fisher_worse(5, 5, 0, 5) == pytest.approx(1 / math.comb(10, 5))
    assert S.fisher_worse(3, 5, 1, 5) == pytest.approx(st.hypergeom.sf(2, 10, 4, 5))
    assert S.fisher_worse(0, 5, 5, 5) == pytest.approx(1.0)


# --- cells of records ---------------------------------------------------------------------------------------------

def _acc(norm, seed, final, **kw):
    flags = kw.pop("flags", None)
    rec = sup.accuracy(norm, seed, final, **kw)
    if flags:
        rec["flags"] = list(flags)
    return rec


def test_divergence_ranks_first_and_failed_runs_are_never_dropped():
    recs = [_acc("dyt", s, 0.99 if s < 3 else None, diverged=s >= 3) for s in range(5)]  # best metric, 2/5 diverged
    recs += [_acc("layernorm", s, 0.80 + 0.01 * s) for s in range(5)]                     # 0/5 diverged
    recs += [_acc("rmsnorm", s, None, diverged=True) for s in range(5)]                   # all diverged
    cells = {c["norm"]: c for c in S.aggregate(recs)}
    order = [c["norm"] for c in S.aggregate(recs)]
    assert order == ["layernorm", "dyt", "rmsnorm"]
    assert (cells["dyt"]["n"], cells["dyt"]["diverged"], cells["dyt"]["divergence_rate"]) == (5, 2, 0.4)
    assert cells["dyt"]["final"]["n"] == 3 and cells["dyt"]["final"]["mean"] == pytest.approx(0.99)
    allbad = cells["rmsnorm"]
    assert (allbad["n"], allbad["diverged"], allbad["divergence_rate"], allbad["final"]["mean"]) == (5, 5, 1.0, None)


def test_tuning_and_flagged_runs_are_kept_out_of_the_statistics():
    recs = [_acc("layernorm", s, 0.80) for s in range(3)]
    recs += [_acc("layernorm", s + 10, 0.10, flags=["tuning"]) for s in range(2)]
    recs.append(_acc("layernorm", 20, 0.99, flags=["unchecked"]))
    recs.append(_acc("layernorm", 21, None, diverged=True, flags=["diverged"]))
    (cell,) = S.aggregate(recs)
    assert (cell["n"], cell["tuning"], cell["flagged"], cell["diverged"]) == (4, 2, 1, 1)
    assert cell["final"]["mean"] == pytest.approx(0.80) and cell["final"]["std"] == 0.0
    assert cell["seeds"] == [0, 1, 2, 21]
    assert [S.record_status(r) for r in recs[3:]] == ["tuning", "tuning", "flagged", "diverged"]


def test_perplexity_cells_rank_lower_first_on_the_geometric_mean():
    recs = [_acc("layernorm", s, v, metric="perplexity", higher=False) for s, v in enumerate((5.0, 5.0, 5.0))]
    # Arithmetic mean 5.17 > 5.0 but geometric mean 4.67 < 5.0: the log scale decides.
    recs += [_acc("rmsnorm", s, v, metric="perplexity", higher=False) for s, v in enumerate((3.0, 4.0, 8.5))]
    cells = S.aggregate(recs)
    assert [c["norm"] for c in cells] == ["rmsnorm", "layernorm"]
    assert cells[0]["final"]["mean"] == pytest.approx(st.gmean([3.0, 4.0, 8.5]))
    assert cells[0]["final"]["scale"] == "log"


def test_each_cell_is_tested_against_its_tables_reference_even_when_recipes_differ():
    bn = [0.50, 0.52, 0.55, 0.49, 0.51]
    gn = [0.60, 0.58, 0.63, 0.61, 0.59]
    recs = [_acc("batchnorm", s, v, model="resnet") for s, v in enumerate(bn)]
    recs += [_acc("groupnorm", s, v, model="resnet") for s, v in enumerate(gn)]
    for r in recs[5:]:  # a per-norm learning rate (tuned) must not hide the reference
        r["config"]["recipe"] = dict(r["config"]["recipe"], lr=0.3)
    cells = {c["norm"]: c for c in S.aggregate(recs)}
    assert cells["batchnorm"]["vs_reference"] is None  # the reference itself
    vs = cells["groupnorm"]["vs_reference"]
    ref = st.ttest_ind(gn, bn, equal_var=False)
    assert vs["reference"] == "batchnorm" and vs["welch_p"] == pytest.approx(ref.pvalue)
    assert vs["effect"] == pytest.approx(np.mean(gn) - np.mean(bn))
    assert vs["mann_whitney_p"] == pytest.approx(st.mannwhitneyu(gn, bn).pvalue)
