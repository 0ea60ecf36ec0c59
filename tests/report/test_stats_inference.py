"""Interval estimates, pass@k, paired tests and distributions against SciPy/statsmodels and brute force.

SciPy and statsmodels are test-only references (the ``test`` extra); core.stats never imports them.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from pytest_maka.core.stats import (
    CLUSTER,
    MCNEMAR,
    SIGN_FLIP,
    WILSON,
    Z95,
    Distribution,
    Rate,
    binom_cdf_half,
    clustered_se,
    compare_paired,
    holm,
    mcnemar_exact,
    mean_se,
    pass_at_k,
    pass_hat_k,
    pass_k_table,
    quantile,
    sign_flip_test,
    spend_of,
    summarize,
    tango_interval,
    wilson_interval,
)
from pytest_maka.core.taxonomy import Status

from .test_stats import rec

np = pytest.importorskip("numpy")
scipy_stats = pytest.importorskip("scipy.stats")
sm = pytest.importorskip("statsmodels.api")
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.proportion import proportion_confint  # noqa: E402

S = Status


# --- single proportions -----------------------------------------------------------------


@pytest.mark.parametrize("x,n", [(0, 1), (1, 1), (3, 4), (7, 10), (1, 29), (81, 263), (499, 500), (250, 500)])
def test_wilson_matches_statsmodels(x: int, n: int) -> None:
    low, high = proportion_confint(x, n, alpha=0.05, method="wilson")
    assert wilson_interval(x, n) == pytest.approx((low, high), abs=1e-9)


def test_z95_is_the_normal_quantile() -> None:
    assert scipy_stats.norm.ppf(0.975) == pytest.approx(Z95, abs=1e-12)


def _cluster_reference(clusters: list[list[float]]) -> float:
    y = np.array([x for c in clusters for x in c])
    groups = np.array([i for i, c in enumerate(clusters) for _ in c])
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    return float(fit.bse[0])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_clustered_se_matches_statsmodels_cluster_robust_ols(seed: int) -> None:
    rng = random.Random(seed)
    clusters = [[float(rng.random() < p) for _ in range(rng.randint(1, 6))] for p in (rng.random() for _ in range(40))]
    assert clustered_se(clusters) == pytest.approx(_cluster_reference(clusters), rel=1e-9)


def test_mean_se_is_the_standard_error_of_the_mean() -> None:
    values = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.75]
    assert mean_se(values) == pytest.approx(scipy_stats.sem(values), rel=1e-12)
    assert mean_se([0.5]) is None


def test_clustering_widens_the_interval_when_tasks_are_consistent() -> None:
    # 10 tasks x 5 reps; each task passes always or never: 50 rows but effectively 10 samples
    clusters = [[i < 6] * 5 for i in range(10)]
    r = Rate.clustered(clusters)
    naive = Rate.of(30, 50)
    assert (r.passes, r.total, r.method, r.clusters) == (30, 50, CLUSTER, 10)
    se = _cluster_reference([[float(x) for x in c] for c in clusters])
    assert r.se == pytest.approx(se)
    # the corrected score interval at the effective sample size p(1-p)/se^2 with t(9): the p0
    # where |0.6 - p0| - 1/(2 n_eff) = t * sqrt(p0 (1 - p0) / n_eff), found here by root-finding
    assert (r.low, r.high) == pytest.approx(_score_roots(0.6, 0.24 / se**2, scipy_stats.t.ppf(0.975, 9)), abs=1e-9)
    assert r.high - r.low > naive.high - naive.low  # repetitions are not independent samples
    # bounded: no wider than the symmetric t interval plus the half-trial correction
    assert r.low > 0.6 - scipy_stats.t.ppf(0.975, 9) * se - se**2 / (2 * 0.24)
    assert r.method_text == "cluster-robust over 10 tasks"


def _score_roots(p: float, n: float, crit: float) -> tuple[float, float]:
    """The two p0 solving |p - p0| - 1/(2n) = crit sqrt(p0 (1 - p0) / n), by Brent's method: an
    independent continuity-corrected Wilson (the score test with a half-trial correction inverted)."""
    from scipy.optimize import brentq

    half = 1 / (2 * n)

    def f(p0: float) -> float:
        return abs(p - p0) - half - crit * (p0 * (1 - p0) / n) ** 0.5

    low = 0.0 if p == 0 or f(1e-15) <= 0 else brentq(f, 1e-15, p - half, xtol=1e-14)
    high = 1.0 if p == 1 or f(1 - 1e-15) <= 0 else brentq(f, p + half, 1 - 1e-15, xtol=1e-14)
    return low, high


def test_cluster_interval_uses_t_with_tasks_minus_one_degrees_of_freedom() -> None:
    # 5 tasks x 3 reps, per-task rates 1, 2/3, 1/3, 0, 1/3 (pooled 7/15)
    clusters = [[True] * 3, [True, True, False], [True, False, False], [False] * 3, [False, True, False]]
    r = Rate.clustered(clusters)
    se = _cluster_reference([[float(x) for x in c] for c in clusters])
    p = 7 / 15
    n_eff = min(15, p * (1 - p) / se**2)
    assert (r.low, r.high) == pytest.approx(_score_roots(p, n_eff, scipy_stats.t.ppf(0.975, 4)), abs=1e-9)
    # the old normal interval was narrower: 86% real coverage at 5 tasks (issue 12)
    assert r.high - r.low > 2 * Z95 * se
    assert 0.0 < r.low < p < r.high < 1.0


def test_cluster_interval_near_zero_is_not_clipped() -> None:
    # 10 tasks x 5 reps, one pass in all: a normal interval would cross 0 and be clipped there
    clusters = [[False] * 5 for _ in range(9)] + [[True, False, False, False, False]]
    r = Rate.clustered(clusters)
    assert r.se is not None and 0.02 - Z95 * r.se < 0
    assert 0.0 < r.low < 0.02 < r.high < 0.25


def test_clustered_rate_without_repetitions_is_wilson() -> None:
    r = Rate.clustered([[True], [False], [True], [True]])
    assert r == Rate.of(3, 4) and r.method == WILSON


def test_clustered_rate_where_every_row_agrees_falls_back_to_wilson_over_tasks() -> None:
    r = Rate.clustered([[True] * 5 for _ in range(8)])
    assert (r.passes, r.total, r.method) == (40, 40, CLUSTER)
    assert (r.low, r.high) == pytest.approx(_score_roots(1.0, 8, Z95))  # not [1, 1]
    assert (r.low, r.high) == pytest.approx((Rate.of(8, 8).low, Rate.of(8, 8).high))


# --- pass@k / pass^k ----------------------------------------------------------------------


def _brute(n: int, c: int, k: int, all_pass: bool) -> float:
    outcomes = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(range(n), k))
    hit = sum((all if all_pass else any)(outcomes[i] for i in d) for d in draws)
    return hit / len(draws)


@pytest.mark.parametrize("n,c,k", [(n, c, k) for n in (1, 3, 5, 6) for c in range(n + 1) for k in range(1, n + 1)])
def test_pass_at_k_and_pass_hat_k_equal_the_exact_draw_probabilities(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(_brute(n, c, k, all_pass=False))
    assert pass_hat_k(n, c, k) == pytest.approx(_brute(n, c, k, all_pass=True))


def test_pass_at_k_matches_the_codex_numpy_estimator() -> None:
    n, c, k = 200, 13, 10  # Chen et al. (2021), Figure 3's numerically stable form
    ref = 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))
    assert pass_at_k(n, c, k) == pytest.approx(ref, rel=1e-12)


def test_pass_at_k_rejects_impossible_inputs() -> None:
    for args in [(3, 4, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError):
            pass_at_k(*args)


def test_pass_k_table_averages_tasks_and_skips_tasks_with_too_few_samples() -> None:
    per_task = {"a": [True, False, False], "b": [True, True, True], "c": [False, False], "d": []}
    table = pass_k_table(per_task)
    assert [e.k for e in table] == [1, 2, 3]
    assert [e.tasks for e in table] == [3, 3, 2]
    assert table[0].pass_at == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert table[0].pass_hat == pytest.approx(table[0].pass_at)  # k = 1: both are the mean success rate
    assert table[1].pass_at == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert table[1].pass_hat == pytest.approx((0 + 1 + 0) / 3)
    assert table[2].pass_at == pytest.approx((1 + 1) / 2)
    assert table[2].pass_hat == pytest.approx((0 + 1) / 2)
    for e in table:
        assert 0.0 <= e.pass_hat_low <= e.pass_hat <= e.pass_hat_high <= 1.0
        assert e.pass_hat <= e.pass_at
    assert pass_k_table({}) == []


def test_pass_k_intervals_never_collapse_to_zero_width() -> None:
    # an oracle passing 5 tasks twice each: every per-task value is 1, the standard error 0
    table = pass_k_table({f"t{i}": [True, True] for i in range(5)})
    headline = Rate.clustered([[True, True] for _ in range(5)])
    for e in table:
        assert (e.pass_at, e.pass_hat) == (1.0, 1.0)
        assert (e.pass_at_low, e.pass_at_high) == pytest.approx(_score_roots(1.0, 5, Z95))  # not [100%, 100%]
        assert (e.pass_hat_low, e.pass_hat_high) == pytest.approx((headline.low, headline.high))


def test_pass_at_1_interval_is_the_headline_interval() -> None:
    rng = random.Random(11)
    per_task = {f"t{i}": [rng.random() < 0.6 for _ in range(4)] for i in range(12)}
    r = Rate.clustered(per_task.values())
    k1 = pass_k_table(per_task)[0]
    assert k1.pass_at == pytest.approx(r.value)
    assert (k1.pass_at_low, k1.pass_at_high) == pytest.approx((r.low, r.high))
    top = pass_k_table(per_task)[-1]  # pass^4: at most one disjoint 4-draw per task
    assert 0.0 <= top.pass_hat_low < top.pass_hat < top.pass_hat_high <= 1.0


# --- paired comparisons ---------------------------------------------------------------------


@pytest.mark.parametrize("b,c", [(0, 0), (5, 0), (0, 5), (3, 9), (12, 4), (30, 41), (250, 200)])
def test_mcnemar_exact_matches_statsmodels_and_binomtest(b: int, c: int) -> None:
    table = [[10, b], [c, 7]]
    ref = sm_mcnemar(table, exact=True).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(ref, rel=1e-9)
    if b + c:
        assert mcnemar_exact(b, c) == pytest.approx(scipy_stats.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)


def test_binom_cdf_half_is_exact_for_large_n() -> None:
    assert binom_cdf_half(600, 1500) == pytest.approx(scipy_stats.binom.cdf(600, 1500, 0.5), rel=1e-9)
    assert binom_cdf_half(-1, 5) == 0.0 and binom_cdf_half(5, 5) == 1.0


def test_paired_binary_comparison_uses_mcnemar_and_a_paired_interval() -> None:
    # A passes 8 tasks B fails, B passes 2 tasks A fails, both pass 5, both fail 5
    a = {f"t{i}": [i < 13] for i in range(20)}
    b = {f"t{i}": [8 <= i < 15] for i in range(20)}
    b["extra"] = [True]  # B-only task: not shared, ignored
    c = compare_paired(a, b, names=("A", "B"))
    assert (c.tasks, c.method, c.only_a, c.only_b, c.wins_a, c.wins_b, c.ties) == (20, MCNEMAR, 8, 2, 8, 2, 10)
    assert c.diff == pytest.approx((13 - 7) / 20)
    assert (c.rate_a, c.rate_b) == pytest.approx((13 / 20, 7 / 20))
    assert (c.low, c.high) == pytest.approx(tango_interval(8, 2, 20))
    assert c.low < c.diff < c.high
    assert c.p_value == pytest.approx(sm_mcnemar([[5, 8], [2, 5]], exact=True).pvalue)
    # test and interval agree: p = 0.109 and the interval contains 0
    assert c.p_value > 0.05 and c.low < 0 < c.high


def test_paired_comparison_with_repetitions_uses_an_exact_sign_flip_and_a_t_interval() -> None:
    rng = random.Random(7)
    a = {f"t{i}": [rng.random() < 0.7 for _ in range(5)] for i in range(60)}
    b = {f"t{i}": [rng.random() < 0.4 for _ in range(5)] for i in range(60)}
    c1 = compare_paired(a, b)
    c2 = compare_paired(a, b)
    assert c1 == c2 and c1.method == SIGN_FLIP and c1.only_a is None and c1.exact
    diffs = [sum(a[t]) / 5 - sum(b[t]) / 5 for t in a]
    differing = sum(d != 0 for d in diffs)  # ties add no degrees of freedom to the spread
    assert 0 < differing < 60
    low, high = scipy_stats.t.interval(0.95, differing - 1, loc=np.mean(diffs), scale=scipy_stats.sem(diffs))
    assert (c1.low, c1.high) == pytest.approx((low, high), rel=1e-9)
    assert c1.p_value < 0.01  # a 30-point gap over 60 tasks is real
    same = compare_paired(a, a)
    assert same.diff == 0 and same.p_value == 1.0 and same.ties == 60


def test_sign_flip_p_value_is_calibrated_under_no_difference() -> None:
    # every one of the 2^10 equally likely sign patterns of the same magnitudes: at most 5% give p <= 0.05
    mags = [0.2, 0.4, 0.4, 0.6, 0.2, 1.0, 0.8, 0.2, 0.4, 0.6]
    ps = [
        sign_flip_test([s * m for s, m in zip(signs, mags, strict=True)]).p_value
        for signs in itertools.product((1, -1), repeat=len(mags))
    ]
    assert sum(p <= 0.05 for p in ps) <= 0.05 * len(ps)
    assert min(ps) == pytest.approx(2 / 2**10)  # all one sign: the two most extreme patterns


def test_comparison_without_shared_tasks_is_empty() -> None:
    c = compare_paired({"x": [True]}, {"y": [False]})
    assert c.tasks == 0 and c.diff is None and c.p_value is None


def test_holm_matches_statsmodels() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.5, 0.2]
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert holm([]) == []


def test_summarize_compares_every_two_subjects_with_holm() -> None:
    rows: list[dict[str, Any]] = []
    for i in range(10):
        rows.append(rec(f"t{i}", "a", S.AGENT_SUCCESS if i < 9 else S.AGENT_FAILURE))
        rows.append(rec(f"t{i}", "b", S.AGENT_SUCCESS if i < 2 else S.AGENT_FAILURE))
        rows.append(rec(f"t{i}", "c", S.AGENT_SUCCESS if i < 8 else S.INFRA_FAILURE))
    s = summarize(rows)
    assert [(c.a, c.b) for c in s.comparisons] == [("a", "b"), ("a", "c"), ("b", "c")]
    ab = s.comparison("a", "b")
    assert ab is not None and ab.diff == pytest.approx(0.7) and ab.p_value == pytest.approx(mcnemar_exact(7, 0))
    ac = s.comparison("a", "c")
    assert ac is not None and ac.tasks == 8  # c's infra failures are not graded: not shared
    ba = s.comparison("b", "a")
    assert ba is not None and ba.diff == pytest.approx(-0.7) and (ba.wins_a, ba.wins_b) == (0, 7)
    assert ba.low == pytest.approx(-ab.high) and ba.high == pytest.approx(-ab.low)
    ps = [c.p_value for c in s.comparisons]
    assert [c.p_adjusted for c in s.comparisons] == pytest.approx(holm(ps))


# --- distributions and spend ------------------------------------------------------------------


def test_quantile_matches_numpy_linear() -> None:
    xs = sorted([3.0, 1.5, 9.0, 2.0, 7.25, 0.5, 4.0])
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.percentile(xs, 100 * q)))
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_distribution_ignores_unknowns() -> None:
    d = Distribution.of([10.0, None, 2, "x", True, 6.0])
    assert d is not None and (d.n, d.minimum, d.median, d.maximum, d.mean) == (3, 2.0, 6.0, 10.0, 6.0)
    assert Distribution.of([None]) is None


def test_spend_per_cell_and_per_success() -> None:
    usages = [
        {"cost_usd": 0.5, "input_tokens": 100, "output_tokens": 20},
        {"cost_usd": 0.25},
        None,
        {"cost_usd": None, "input_tokens": 50},
    ]
    s = spend_of(usages, passes=2)
    assert s.cost_usd == 0.75 and s.cost_known == 2 and s.tokens == 170 and s.tokens_known == 2
    assert s.cost_per_cell == pytest.approx(0.375) and s.cost_per_success == pytest.approx(0.375)
    assert s.tokens_per_cell == pytest.approx(85) and s.tokens_per_success == pytest.approx(85)
    none = spend_of([None], passes=0)
    assert none.cost_per_success is None and none.cost_per_cell is None and none.tokens is None


def test_a_difference_without_spread_still_gets_an_honest_interval() -> None:
    # oracle passes and nop fails all 5 tasks: the paired SE is 0, but 5 tasks are not certainty
    c = compare_paired({f"t{i}": [True] for i in range(5)}, {f"t{i}": [False] for i in range(5)})
    assert c.diff == 1.0 and c.high == 1.0
    # 5 tasks cannot reach p < 0.05 (p = 0.0625), so the interval reaches 0, agreeing with the test
    assert c.p_value == pytest.approx(0.0625) and c.low == 0.0 < tango_interval(5, 0, 5)[0] < 0.6
    six = compare_paired({f"t{i}": [True] for i in range(6)}, {f"t{i}": [False] for i in range(6)})
    assert six.p_value < 0.05 and six.low == pytest.approx(tango_interval(6, 0, 6)[0]) and 0 < six.low < 0.6
    with_reps = compare_paired({f"t{i}": [True] * 2 for i in range(6)}, {f"t{i}": [False] * 2 for i in range(6)})
    assert with_reps.p_value < 0.05 and with_reps.high == 1.0
    assert with_reps.low == pytest.approx(wilson_interval(6, 6)[0] - wilson_interval(0, 6)[1])
    ties = compare_paired({f"t{i}": [True, True] for i in range(5)}, {f"t{i}": [True] for i in range(5)})
    assert ties.diff == 0.0 and ties.low < 0 < ties.high
