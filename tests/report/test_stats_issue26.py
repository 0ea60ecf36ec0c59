"""Issue 26: one test per wrong output (each failed before the fix), and the views of what the subject caused."""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.core.stats import (
    Rate,
    adjust_family,
    compare_paired,
    compare_scores,
    corrected_score_interval,
    inverted_bound,
    mcnemar_exact,
    mcnemar_log_p,
    pass_k_table,
    rate_interval,
    score_interval,
    sign_flip_test,
    summarize,
    variance_split,
)
from pytest_maka.core.stats.paired import t_interval
from pytest_maka.core.taxonomy import Status
from pytest_maka.report import write_views
from pytest_maka.report.terminal import few_tasks_line, summary_lines

from .test_stats import rec

scipy_stats = pytest.importorskip("scipy.stats")
from scipy.special import logsumexp  # noqa: E402
from statsmodels.stats.proportion import proportion_confint  # noqa: E402

S = Status


def _binary(n: int, passing: range) -> dict[str, list[bool]]:
    return {f"t{i:04d}": [i in passing] for i in range(n)}


# --- 1. Holm's input: an exact p of 0.0 is not "no p" -------------------------------------------------


def test_an_underflowing_mcnemar_p_is_still_significant_after_holm() -> None:
    # 2,000 tasks, A passes 1,900, B passes 100 (disjoint): +90 pp, 1,800 vs 0 discordant tasks
    a, b = _binary(2000, range(1900)), _binary(2000, range(1900, 2000))
    c = compare_paired(a, b, names=("A", "B"))
    assert c.diff == pytest.approx(0.9) and 0.85 < c.low < c.diff < c.high < 0.95
    # the tail is computed in log space: finite, and equal to SciPy's
    logpmf = scipy_stats.binom.logpmf(range(101), 2000, 0.5)  # SciPy's own logcdf underflows to -inf here
    assert mcnemar_log_p(1900, 100) == pytest.approx(math.log(2) + logsumexp(logpmf), rel=1e-9)
    assert mcnemar_log_p(1800, 0) == pytest.approx(math.log(2) - 1800 * math.log(2))
    assert c.p_value == 0.0  # 2^-1799 underflows a float; the log above does not
    family = adjust_family([c, compare_paired(a, a, names=("A", "A2"))], lambda name: False)
    assert family[0].p_adjusted == 0.0 and family[0].verdict == "better"  # was 1.0, "even"


# --- 2. a difference without spread keeps its size -----------------------------------------------------


def test_twelve_tasks_all_at_one_third_keep_their_estimate_inside_the_interval() -> None:
    a = {f"t{i}": [True, False, False] for i in range(12)}
    b = {f"t{i}": [False, False, False] for i in range(12)}
    c = compare_paired(a, b)
    assert c.diff == pytest.approx(1 / 3)
    assert 0.0 < c.low < c.diff < c.high < 1.0  # was [51.5, 100]: it excluded its own estimate
    assert c.p_value == pytest.approx(2 / 2**12)  # all one way: the test rejects, the interval excludes 0
    # all at +1 keeps the old (Wilson-difference) lower bound
    ones = compare_paired({f"t{i}": [True] * 2 for i in range(12)}, {f"t{i}": [False] * 2 for i in range(12)})
    assert ones.low == pytest.approx((12 - 1.959963984540054**2) / (12 + 1.959963984540054**2)) and ones.high == 1.0


# --- 3. zero spread is decided on exact fractions, not on a float ---------------------------------------


def test_every_task_at_one_fifth_never_gives_a_zero_width_interval() -> None:
    a = {f"t{i}": [True, False, False, False, False] for i in range(12)}
    b = {f"t{i}": [False] * 5 for i in range(12)}
    diffs = [0.2] * 12
    assert t_interval(diffs) is not None and t_interval(diffs)[1] - t_interval(diffs)[0] < 1e-9  # the float trap
    c = compare_paired(a, b)
    assert c.high - c.low > 0.1 and c.low < c.diff < c.high  # was [20.0, 20.0]
    # the rate of the same rows: no spread between tasks, so (corrected) Wilson over the 12 tasks, not 60 rows
    r = Rate.clustered(a.values())
    assert (r.low, r.high) == pytest.approx(corrected_score_interval(0.2, 12))
    assert r.high - r.low > score_interval(0.2, 12)[1] - score_interval(0.2, 12)[0]
    k1 = pass_k_table(a)[0]
    assert (k1.pass_at_low, k1.pass_at_high) == pytest.approx(corrected_score_interval(0.2, 12))


# --- 4. p < 0.05 exactly when the interval excludes 0 ----------------------------------------------------


def test_a_rejecting_test_never_stands_beside_an_interval_holding_zero() -> None:
    # six tasks all in A's favour (p = 2/64), skewed: one at +1, five at +1/5; the t interval holds 0
    a = {"t0": [True] * 5, **{f"t{i}": [True, False, False, False, False] for i in range(1, 6)}}
    b = {f"t{i}": [False] * 5 for i in range(6)}
    low_t, _ = t_interval([1.0, 0.2, 0.2, 0.2, 0.2, 0.2]) or (0.0, 0.0)
    assert low_t < 0
    c = compare_paired(a, b)
    assert c.p_value == pytest.approx(0.03125)
    assert c.low == pytest.approx(0.2) and c.low < c.diff < c.high  # the inverted test's end, not -0.9 pp


def test_inverted_bound_is_the_end_of_the_acceptance_set() -> None:
    diffs = [Fraction(x, 3) for x in (3, 1, 1, 2, 1, 0, 1, 2, -1, 1, 2, 1)]
    assert sign_flip_test(diffs).p_value < 0.05
    edge = inverted_bound(diffs)
    mean = sum(diffs) / len(diffs)
    assert 0 < edge < mean
    q = Fraction(edge).limit_denominator(10**6)
    step = Fraction(1, q.denominator)
    assert sign_flip_test([d - q for d in diffs]).p_value >= 0.05  # accepted at the end ...
    assert sign_flip_test([d - (q - step) for d in diffs]).p_value < 0.05  # ... and rejected just before it


@pytest.mark.parametrize("seed", range(4))
def test_test_and_interval_agree_on_random_cohorts(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        tasks, reps = rng.randint(6, 25), rng.randint(1, 4)
        shift = rng.choice([0.0, 0.15, 0.3])
        ps = [rng.random() for _ in range(tasks)]
        a = {f"t{i}": [rng.random() < min(1.0, p + shift) for _ in range(reps)] for i, p in enumerate(ps)}
        b = {f"t{i}": [rng.random() < p for _ in range(rng.choice([reps, reps + 1]))] for i, p in enumerate(ps)}
        c = compare_paired(a, b)
        assert c.p_value is not None and c.low is not None and c.high is not None and c.diff is not None
        assert (c.p_value < 0.05) == (c.low > 0 or c.high < 0), (seed, tasks, reps, c)
        assert c.low <= c.diff <= c.high


# --- 5. the warning counts the subject's graded tasks; one estimand per view ---------------------------


def test_few_tasks_warning_counts_each_subjects_graded_tasks() -> None:
    rows: list[dict[str, Any]] = []
    for i in range(12):
        rows.append(rec(f"t{i}", "steady", S.AGENT_SUCCESS if i % 2 else S.AGENT_FAILURE))
        rows.append(rec(f"t{i}", "lossy", S.AGENT_SUCCESS if i < 4 else S.INFRA_FAILURE))
    s = summarize(rows)
    assert len(s.tasks) == 12 and {x.subject: x.graded_tasks for x in s.subjects} == {"steady": 12, "lossy": 4}
    line = few_tasks_line(s)
    assert line is not None and "4 graded task(s) for lossy" in line and "steady" not in line  # was None


def test_rates_say_which_estimand_they_are(tmp_path: Path) -> None:
    # rows {5/5, 0/1, 0/1, 0/1}: pooled over rows 5/8 = 62.5%, per task 25%
    rows = [rec("t0", "a", S.AGENT_SUCCESS, rep=r) for r in range(1, 6)]
    rows += [rec(f"t{i}", "a", S.AGENT_FAILURE) for i in (1, 2, 3)]
    rows += [rec(f"t{i}", "b", S.AGENT_FAILURE) for i in range(4)]
    s = summarize(rows)
    a = s.subjects[0]
    assert a.official.text == "5/8 = 62.5%" and a.pass_k[0].pass_at == pytest.approx(0.25)
    ab = s.comparison("a", "b")
    assert ab is not None and ab.rate_a == pytest.approx(a.pass_k[0].pass_at)  # paired = pass@1: per task
    paths = write_views(tmp_path, rows, cohort="estimands")
    for view in ("markdown", "html"):
        text = paths[view].read_text(encoding="utf-8")
        assert "Both rates pool rows" in text and "weight every task once" in text


# --- calibration where the report was silent ----------------------------------------------------------


@pytest.mark.parametrize(
    "x,n,published",
    [(81, 263, (0.2535, 0.3682)), (15, 148, (0.0598, 0.1644)), (0, 20, (0.0, 0.2005)), (1, 29, (0.0018, 0.1963))],
)
def test_corrected_score_interval_matches_newcombes_published_values(
    x: int, n: int, published: tuple[float, float]
) -> None:
    # Newcombe (1998), Statistics in Medicine 17:857-872, Table II, method 4 (score with continuity correction)
    assert corrected_score_interval(x / n, n) == pytest.approx(published, abs=5e-5)


@pytest.mark.parametrize("x,n", [(1, 10), (2, 30), (3, 50), (0, 20), (20, 20), (27, 30), (48, 50), (1, 1000)])
def test_rate_interval_is_exact_next_to_a_bound(x: int, n: int) -> None:
    low, high = rate_interval(x, n)
    cp_low, cp_high = proportion_confint(x, n, alpha=0.05, method="beta")
    wl, wh = corrected_score_interval(x / n, n)
    assert low == pytest.approx(min(wl, cp_low) if 0 < x <= 3 else wl, abs=1e-9)
    assert high == pytest.approx(max(wh, cp_high) if 0 < n - x <= 3 else wh, abs=1e-9)
    plain = proportion_confint(x, n, alpha=0.05, method="wilson")
    assert low <= plain[0] + 1e-12 and high >= plain[1] - 1e-12  # the correction only widens


def test_rate_interval_keeps_its_pointwise_coverage_at_every_rate() -> None:
    # exact coverage: plain Wilson dips to ~84% next to 0 and to 92-93% mid-range at every n
    # (its oscillation); the corrected, repaired interval covers 95% at every rate
    for n in (10, 20, 50, 100):
        intervals = [rate_interval(x, n) for x in range(n + 1)]
        wilson = [proportion_confint(x, n, alpha=0.05, method="wilson") for x in range(n + 1)]
        worst, worst_wilson = 1.0, 1.0
        for p in [i / 1000 for i in range(1, 1000)]:
            pmf = scipy_stats.binom.pmf(range(n + 1), n, p)
            worst = min(worst, sum(pmf[x] for x, (lo, hi) in enumerate(intervals) if lo <= p <= hi))
            worst_wilson = min(worst_wilson, sum(pmf[x] for x, (lo, hi) in enumerate(wilson) if lo <= p <= hi))
        assert worst >= 0.9495 and worst_wilson < 0.935, (n, worst, worst_wilson)


def test_weak_flags_few_differing_tasks_and_unequal_repetitions() -> None:
    same = compare_paired(_binary(40, range(20)), _binary(40, range(18)))  # 2 tasks differ of 40
    assert same.weak and same.weak_reasons == ("2 task(s) differ (fewer than 10)",)
    a = {f"t{i}": [i % 2 == 0] * 3 for i in range(30)}
    b = {f"t{i}": [i % 3 == 0] for i in range(30)}
    unequal = compare_paired(a, b)
    assert unequal.unequal and "unequal repetitions on the two sides" in unequal.weak_reasons
    rate = Rate.clustered([[True, False]] * 2 + [[False, False]] * 20)
    assert rate.weak == "2 of 22 tasks ever passed: the interval near 0 is approximate"
    assert Rate.clustered([[True, False]] * 5 + [[False, False]] * 20).weak is None
    rare = {f"t{i}": [i < 2, False, False] for i in range(30)}
    top = pass_k_table(rare)
    assert (
        top[0].pass_at_weak
        and top[2].pass_hat_weak
        and not pass_k_table({f"t{i}": [i % 2 == 0, i % 3 == 0] for i in range(30)})[0].pass_at_weak
    )


# --- power on every comparison; won and lost tasks; the variance split -----------------------------------


def test_every_comparison_shows_its_power_and_the_tasks_each_side_won(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    for i in range(20):
        rows.append(rec(f"t{i}", "a", S.AGENT_SUCCESS if i < 11 else S.AGENT_FAILURE))
        rows.append(rec(f"t{i}", "b", S.AGENT_SUCCESS if 2 <= i < 12 else S.AGENT_FAILURE))
    s = summarize(rows)
    c = s.comparison("a", "b")
    assert c is not None and c.tasks == 20
    assert c.won == ("t0", "t1") and c.lost == ("t11",) and c.verdict == "even"
    assert c.power is not None and c.power.detectable is not None and "80% power only for" in c.power.text
    flipped = s.comparison("b", "a")
    assert flipped is not None and flipped.won == ("t11",) and flipped.lost == ("t0", "t1")
    paths = write_views(tmp_path, rows, cohort="power")
    for text in (paths["markdown"].read_text(encoding="utf-8"), paths["html"].read_text(encoding="utf-8")):
        assert c.power.text in text and "t0, t1" in text
    assert c.power.text in "\n".join(summary_lines(s))


def test_variance_split_matches_a_simulation() -> None:
    rng = random.Random(5)
    truth = [rng.betavariate(0.7, 0.7) for _ in range(40)]
    rows = [[rng.random() < p for _ in range(4)] for p in truth]
    v = variance_split(rows)
    assert v is not None and v.tasks == 40 and v.repetitions == 4
    # within: mean p(1-p) of the tasks' true rates; between: their variance
    assert v.within == pytest.approx(sum(p * (1 - p) for p in truth) / 40, abs=0.03)
    assert v.between == pytest.approx(statistics.variance(truth), abs=0.03)
    assert v.more_tasks < v.more_repetitions < v.now
    assert v.se(40, 4) == pytest.approx(math.sqrt(v.between / 40 + v.within / 160))
    assert variance_split([[True], [False]]) is None and variance_split([[True, True], [False, False]]) is not None


def test_mcnemar_exact_is_unchanged_where_it_did_not_underflow() -> None:
    for b, c in [(0, 0), (5, 0), (3, 9), (250, 200), (600, 900)]:
        ref = scipy_stats.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
        assert mcnemar_exact(b, c) == pytest.approx(ref, rel=1e-9)


def test_score_differences_too_fine_to_enumerate_are_rounded_oddly_and_tested_exactly() -> None:
    from pytest_maka.core.stats.paired import MIN_LATTICE, exact_score, on_lattice

    rng = random.Random(9)
    a = {f"t{i}": [rng.random() for _ in range(5)] for i in range(100)}
    b = {f"t{i}": [rng.random() * 0.9 for _ in range(5)] for i in range(100)}
    diffs = [
        sum((exact_score(x) for x in a[t]), Fraction(0)) / 5 - sum((exact_score(x) for x in b[t]), Fraction(0)) / 5
        for t in sorted(a)
    ]
    rounded = on_lattice(diffs)
    assert rounded != diffs and max(d.denominator for d in rounded) >= MIN_LATTICE
    assert on_lattice([-d for d in diffs]) == [-d for d in rounded]  # odd: the sign-flip null is kept
    assert all(abs(r - d) <= Fraction(1, 2 * MIN_LATTICE) for r, d in zip(rounded, diffs, strict=True))
    c = compare_scores(a, b)
    assert c.exact and c.p_value == sign_flip_test(rounded).p_value
    assert c.diff == pytest.approx(float(sum(diffs) / 100))  # the estimate is not rounded
    rates = [Fraction(k, 3) - Fraction(j, 5) for k, j in zip(range(4), range(4), strict=True)] * 10
    assert on_lattice(rates) == rates  # rate differences always fit


def test_views_show_where_the_uncertainty_comes_from(tmp_path: Path) -> None:
    rng = random.Random(4)
    rows: list[dict[str, Any]] = []
    for i in range(15):
        p = rng.random()
        for r in (1, 2, 3):
            rows.append(rec(f"t{i}", "x", S.AGENT_SUCCESS if rng.random() < p else S.AGENT_FAILURE, rep=r))
    s = summarize(rows)
    v = s.subjects[0].variance
    assert v is not None and v.tasks == 15 and v.repetitions == 3
    paths = write_views(tmp_path, rows, cohort="variance")
    cells = (f"{196 * v.now:.1f} pp", f"{196 * v.more_repetitions:.1f} pp", f"{196 * v.more_tasks:.1f} pp")
    for text in (paths["markdown"].read_text(encoding="utf-8"), paths["html"].read_text(encoding="utf-8")):
        assert "Where the uncertainty comes from" in text and all(c in text for c in cells)
