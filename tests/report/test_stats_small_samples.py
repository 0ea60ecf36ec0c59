"""Statistics that stay honest with few tasks (issue 12): t quantiles, the sign-flip test, Tango's
interval, Holm over non-reference pairs only, power lines, and the same numbers in every view.

SciPy and statsmodels are test-only references; core.stats never imports them.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from pytest_maka.core.stats import (
    HOLM,
    MIN_TASKS,
    REFERENCE,
    SIGN_FLIP,
    Rate,
    compare_paired,
    holm,
    mcnemar_exact,
    power_note,
    sign_flip_test,
    smallest_p,
    summarize,
    t_cdf,
    t_quantile,
    tango_interval,
    tango_score,
    tasks_needed,
)
from pytest_maka.core.stats import signflip as signflip_module
from pytest_maka.core.taxonomy import Status
from pytest_maka.report import write_views
from pytest_maka.report.compare import compare_lines, compare_runs, render_compare_html, render_compare_markdown
from pytest_maka.report.terminal import summary_lines

from .test_stats import rec

np = pytest.importorskip("numpy")
scipy_stats = pytest.importorskip("scipy.stats")
optimize = pytest.importorskip("scipy.optimize")

S = Status


# --- Student's t ---------------------------------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 29, 30, 99, 100, 499, 2000])
def test_t_quantile_and_cdf_match_scipy(df: int) -> None:
    for p in (0.975, 0.995, 0.9, 0.8, 0.6, 0.025, 0.4):
        assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-8)
    for x in (-40.0, -3.2, -0.5, 0.0, 0.1, 1.7, 2.228, 12.7):
        assert t_cdf(x, df) == pytest.approx(scipy_stats.t.cdf(x, df), abs=1e-12)


def test_t_quantile_known_values_and_bad_input() -> None:
    # printed tables: t(1) 12.706, t(4) 2.776, t(9) 2.262, t(29) 2.045 at 0.975
    assert [round(t_quantile(0.975, df), 3) for df in (1, 4, 9, 29)] == [12.706, 2.776, 2.262, 2.045]
    assert t_quantile(0.5, 7) == 0.0
    for bad in [(0.975, 0), (0.975, 2.5), (1.0, 3), (0.0, 3)]:
        with pytest.raises(ValueError):
            t_quantile(*bad)


# --- sign-flip permutation test -------------------------------------------------------------


def _brute_sign_flip(diffs: list[Fraction]) -> float:
    observed = abs(sum(diffs))
    patterns = list(itertools.product((1, -1), repeat=len(diffs)))
    hits = sum(1 for s in patterns if abs(sum(x * d for x, d in zip(s, diffs, strict=True))) >= observed)
    return hits / len(patterns)


@pytest.mark.parametrize("seed", range(6))
def test_sign_flip_is_the_exact_enumeration(seed: int) -> None:
    rng = random.Random(seed)
    reps = rng.choice([2, 3, 5])
    diffs = [Fraction(rng.randint(0, reps), reps) - Fraction(rng.randint(0, 4), 4) for _ in range(rng.randint(3, 12))]
    got = sign_flip_test(diffs)
    assert got.exact and got.p_value == pytest.approx(_brute_sign_flip(diffs), abs=1e-15)


def test_sign_flip_matches_scipy_permutation_test() -> None:
    rng = random.Random(4)
    diffs = [Fraction(rng.randint(0, 5), 5) - Fraction(rng.randint(0, 5), 5) for _ in range(16)]
    ref = scipy_stats.permutation_test(
        ([float(d) for d in diffs],),
        lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
    )
    # SciPy doubles the smaller tail; for a symmetric null that is the |sum| >= observed count
    assert sign_flip_test(diffs).p_value == pytest.approx(min(1.0, ref.pvalue), rel=1e-9)


def test_five_tasks_can_never_reach_significance_and_binary_sign_flip_is_mcnemar() -> None:
    best = sign_flip_test([1, 1, 1, 1, 1])
    assert best.p_value == pytest.approx(2 / 32) and smallest_p(5) == pytest.approx(0.0625) and MIN_TASKS == 6
    for b, c in [(3, 9), (7, 0), (12, 4), (1, 1)]:
        assert sign_flip_test([1] * b + [-1] * c + [0] * 5).p_value == pytest.approx(mcnemar_exact(b, c))
    assert sign_flip_test([0, 0, 0]).p_value == 1.0


def test_sign_flip_beyond_the_exact_budget_is_seeded_monte_carlo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signflip_module, "EXACT_BUDGET_BITS", 0)
    rng = random.Random(9)
    diffs = [Fraction(rng.randint(0, 3), 3) - Fraction(rng.randint(0, 2), 2) + Fraction(1, 12) for _ in range(40)]
    exact = signflip_module._exact_packed(*_ints(diffs))
    first, second = sign_flip_test(diffs), sign_flip_test(diffs)
    assert first == second and not first.exact and first.draws == signflip_module.DRAWS
    assert first.p_value == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / first.draws) + 1e-3)
    small = diffs[:12]  # up to EXACT_TASKS the enumeration stays exact, budget or not
    assert sign_flip_test(small).exact and sign_flip_test(small).p_value == pytest.approx(_brute_sign_flip(small))


def _ints(diffs: list[Fraction]) -> tuple[list[int], int]:
    ints = signflip_module.scaled(diffs)
    return [abs(v) for v in ints if v], abs(sum(ints))


# --- Tango's score interval -----------------------------------------------------------------


def _restricted_mle_score(b: int, c: int, n: int, delta: float) -> float:
    """The score statistic with p_c maximising the multinomial likelihood under p_b - p_c = delta (numerically)."""
    rest = n - b - c

    def nll(pc: float) -> float:
        pb = pc + delta
        other = 1 - pb - pc
        return -(b * math.log(pb) + c * math.log(pc) + rest * math.log(other))

    lo, hi = max(0.0, -delta) + 1e-12, (1 - delta) / 2 - 1e-12
    pc = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
    pb = pc + delta
    return (b / n - c / n - delta) / math.sqrt((pb + pc - delta * delta) / n)


@pytest.mark.parametrize("b,c,n,delta", [(8, 2, 20, 0.1), (40, 20, 160, 0.05), (3, 5, 30, -0.2), (6, 1, 12, 0.3)])
def test_tango_score_uses_the_restricted_maximum_likelihood(b: int, c: int, n: int, delta: float) -> None:
    assert tango_score(b, c, n, delta) == pytest.approx(_restricted_mle_score(b, c, n, delta), rel=1e-6)
    assert tango_score(b, c, n, 0.0) == pytest.approx((b - c) / math.sqrt(b + c))  # McNemar's score at 0


@pytest.mark.parametrize("b,c,n", [(40, 20, 160), (8, 2, 20), (0, 0, 10), (5, 0, 5), (0, 7, 9), (1, 3, 4)])
def test_tango_interval_is_where_the_score_test_does_not_reject(b: int, c: int, n: int) -> None:
    low, high = tango_interval(b, c, n)
    z = scipy_stats.norm.ppf(0.975)
    assert -1.0 <= low < (b - c) / n < high <= 1.0 or (b == n and high == 1.0) or (c == n and low == -1.0)
    if low > -1.0:
        assert _restricted_mle_score(b, c, n, low) == pytest.approx(z, abs=1e-4)
    if high < 1.0:
        assert _restricted_mle_score(b, c, n, high) == pytest.approx(-z, abs=1e-4)
    assert high - low > 0.05  # never zero width, even with no discordant pairs


def test_mcnemar_and_its_interval_agree_on_every_table() -> None:
    disagree = []
    for b in range(0, 41):
        for c in range(0, 41):
            n = b + c + 7
            low, high = tango_interval(b, c, n)
            if mcnemar_exact(b, c) < 0.05:
                assert low > 0 or high < 0, (b, c)  # exact significance implies the score interval excludes 0
            elif low > 0 or high < 0:
                disagree.append((b, c))
            a = {f"t{i}": [i < b] for i in range(n)}
            z = {f"t{i}": [b <= i < b + c] for i in range(n)}
            cmp = compare_paired(a, z)
            assert (cmp.p_value < 0.05) == (cmp.low > 0 or cmp.high < 0), (b, c)
            assert cmp.low <= low and cmp.high >= high  # only ever widened, towards 0
    # the raw score interval is the less conservative one at the margin (4 or 5 vs 0, 7 vs 1, ...)
    assert {(4, 0), (5, 0), (0, 5)} <= set(disagree)


# --- Holm over non-reference pairs, decisions, power ----------------------------------------------


def _cohort(tasks: int, reps: int = 1) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(tasks):
        for r in range(1, reps + 1):
            rows.append(rec(f"t{i}", "alpha", S.AGENT_SUCCESS if i % 4 else S.AGENT_FAILURE, rep=r))
            rows.append(rec(f"t{i}", "beta", S.AGENT_SUCCESS if i % 2 else S.AGENT_FAILURE, rep=r))
            rows.append(rec(f"t{i}", "gamma", S.AGENT_SUCCESS if i % 5 == 0 else S.AGENT_FAILURE, rep=r))
            rows.append(rec(f"t{i}", "oracle", S.AGENT_SUCCESS, kind="oracle", rep=r))
            rows.append(rec(f"t{i}", "nop", S.AGENT_FAILURE, kind="nop", rep=r))
    return rows


def test_holm_adjusts_only_over_the_pairs_of_non_reference_subjects() -> None:
    s = summarize(_cohort(20))
    family = [c for c in s.comparisons if c.family == HOLM]
    refs = [c for c in s.comparisons if c.family == REFERENCE]
    assert {(c.a, c.b) for c in family} == {("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma")}
    assert len(refs) == 7  # every pair with oracle or nop
    assert [c.p_adjusted for c in family] == pytest.approx(holm([c.p_value for c in family]))
    assert all(c.p_adjusted == c.p_value for c in refs)
    # with all 10 pairs in the family the comparisons that matter would be adjusted harder
    all_ten = holm([c.p_value for c in s.comparisons])
    ag = next(i for i, c in enumerate(s.comparisons) if (c.a, c.b) == ("alpha", "gamma"))
    assert s.comparisons[ag].p_adjusted < all_ten[ag]


def test_the_decision_follows_the_adjusted_p_value_not_the_interval() -> None:
    # 5 vs 0 discordant tasks: Tango's score interval excludes 0, McNemar exact p = 0.0625
    a = {f"t{i}": [i < 5] for i in range(12)}
    b = {f"t{i}": [False] for i in range(12)}
    c = compare_paired(a, b)
    assert tango_interval(5, 0, 12)[0] > 0 and c.p_value == pytest.approx(0.0625)
    assert c.low == 0.0 and c.high == tango_interval(5, 0, 12)[1]  # extended to 0: agrees with the test
    assert c.verdict == "even"
    strong = compare_paired({f"t{i}": [i < 9] for i in range(12)}, b)
    assert strong.p_value < 0.05 and strong.verdict == "better"


def test_power_line_hand_computed() -> None:
    # d = 1, 1, 1, 0, 0: mean 0.6, null spread mean(d^2) = 0.6, alternative spread 0.24
    diffs = [1.0, 1.0, 1.0, 0.0, 0.0]
    expected = ((1.959963984540054 * math.sqrt(0.6) + 0.8416212335729143 * math.sqrt(0.24)) / 0.6) ** 2
    assert tasks_needed(diffs) == math.ceil(expected) == 11
    note = power_note(diffs)
    assert note.weak and note.detectable is None  # 5 tasks: nothing is detectable
    assert note.text == (
        "5 shared tasks; no paired test can reach p < 0.05 (smallest possible p = 0.0625); "
        "a +60.0 pp difference needs about 11 tasks for 80% power"
    )
    assert tasks_needed([1.0] * 8) == MIN_TASKS  # all wins: the exact test's floor, not 0
    assert tasks_needed([0.0, 0.5, -0.5]) is None


def test_power_line_matches_simulated_power_for_mcnemar() -> None:
    # planning for p10 = 0.3, p01 = 0.1; the exact test at that many tasks has about 80% power
    needed = tasks_needed([1.0] * 3 + [-1.0] + [0.0] * 6)
    assert needed is not None
    rng = random.Random(2)
    hits = 0
    for _ in range(2000):
        u = [rng.random() for _ in range(needed)]
        hits += mcnemar_exact(sum(x < 0.3 for x in u), sum(0.3 <= x < 0.4 for x in u)) < 0.05
    assert 0.65 < hits / 2000 < 0.9


# --- the same numbers in every view ------------------------------------------------------------


def test_every_view_shows_the_same_small_sample_statistics(tmp_path: Path) -> None:
    records = _cohort(8, reps=2)
    summary = summarize(records)
    ab = summary.comparison("alpha", "beta")
    assert ab is not None and ab.method == SIGN_FLIP and ab.weak and ab.power is not None
    paths = write_views(tmp_path, records, cohort="small")
    html = paths["html"].read_text(encoding="utf-8")
    md = paths["markdown"].read_text(encoding="utf-8")
    terminal = "\n".join(summary_lines(summary))
    interval = f"[{100 * ab.low:+.1f} pp, {100 * ab.high:+.1f} pp]"
    for text in (html, md):
        assert interval in text and ab.power.text in text and "reference, unadjusted" in text
        assert "comparisons are weak: 10 pair(s) share fewer than 10 tasks (fewest 8)" in text
    assert f"{100 * ab.diff:+.1f} pp [{100 * ab.low:+.1f}, {100 * ab.high:+.1f}]" in terminal
    assert ab.power.text in terminal and "comparisons are weak" in terminal
    for text in (html, md, terminal):  # fewer than 10 tasks: the headline intervals are flagged too
        assert "only 8 task(s): every interval here is approximate" in text
    big = summarize(_cohort(10))
    # 10 shared tasks: no pair is weak for its size (some are for their few differing tasks, issue 26)
    assert not any(c.tasks < 10 for c in big.weak) and not any("only 10 task" in line for line in summary_lines(big))
    # the cluster-robust headline interval and the oracle's pass^2 interval are never zero width
    oracle = next(s for s in summary.subjects if s.subject == "oracle")
    assert oracle.official.interval_text in html and oracle.official.interval_text == "[59.8%, 100.0%]"
    assert oracle.pass_k[-1].pass_hat_low == pytest.approx(Rate.of(8, 8).low)
    assert "100.0% [59.8%, 100.0%]" in md


def test_compare_runs_adjusts_across_subjects_and_flags_weak_ones(tmp_path: Path) -> None:
    before = _cohort(6)
    after = [dict(r, status=S.AGENT_SUCCESS.value) if r["subject"] == "gamma" else r for r in before]
    result = compare_runs(before, after, labels=("before", "after"))
    gamma = next(s for s in result.subjects if s.subject == "gamma").paired
    oracle = next(s for s in result.subjects if s.subject == "oracle").paired
    assert gamma.family == HOLM and oracle.family == REFERENCE
    assert (gamma.a, gamma.b, gamma.diff) == ("after", "before", pytest.approx(4 / 6))
    assert gamma.weak and gamma.power is not None
    lines = "\n".join(compare_lines(result))
    assert "p (Holm)" in lines and "reference, unadjusted" in lines and f"gamma: {gamma.power.text}" in lines
    assert gamma.power.text in render_compare_markdown(result)
    assert gamma.power.text in render_compare_html(result)


def test_flipped_comparison_never_shows_minus_zero() -> None:
    # beta passes both repetitions of four tasks and one of the fifth; nop fails everything:
    # differences 1, 1, 1, 1, 1/2, a t(4) interval [+62, +100] pp but p = 2/32 = 0.0625
    rows = []
    for i in range(5):
        for r in (1, 2):
            rows.append(rec(f"t{i}", "beta", S.AGENT_SUCCESS if i < 4 or r == 1 else S.AGENT_FAILURE, rep=r))
            rows.append(rec(f"t{i}", "nop", S.AGENT_FAILURE, kind="nop", rep=r))
    s = summarize(rows)
    ab = s.comparison("beta", "nop")
    ba = s.comparison("nop", "beta")
    assert ab is not None and ba is not None and ab.p_value == pytest.approx(0.0625)
    assert ab.low == 0.0  # extended to 0
    assert ba.high == 0.0 and math.copysign(1.0, ba.high) == 1.0  # +0.0, so no "-0.0 pp" anywhere


def test_calibration_bench_runs_and_prints_every_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "bench" / "calibration.py"
    spec = importlib.util.spec_from_file_location("maka_calibration", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "maka_calibration", bench)  # dataclasses and the worker pool look it up
    spec.loader.exec_module(bench)
    assert bench.main(["--cohorts", "9", "--sizes", "5,10", "--reps", "1,2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|") for line in out.splitlines() if line.lstrip()[:2] in {"5 ", "10"} and "|" in line]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows[:4]] == [
        ("5", "1", "yes"),
        ("5", "2", "yes"),
        ("10", "1", "no"),
        ("10", "2", "no"),
    ]
    assert "9 cohorts per row" in out and "cpu" in out
