"""Paired comparisons of two subjects (or two runs) on the tasks both have graded rows for.

The unit of pairing is the task. For each shared task ``t`` the difference is
``d_t = rate_A(t) - rate_B(t)`` (per-task success rates, or mean scores with partial
credit); the reported difference is the mean of ``d_t``, every task counting once. Pairing
removes the task-difficulty variance that two independent intervals would double count
(Miller 2024, section 4).

- Without repetitions (one graded row per task on each side) outcomes are binary pairs.
  The p-value is McNemar's exact test on the ``b`` and ``c`` discordant tasks (a two-sided
  binomial test with p = 1/2, its tail summed in integers and taken in log space, so an
  exact p of 0.0 only means a p below ~1e-308) and the interval is Tango's score interval.
- With repetitions the per-task means are not binary: the p-value is the exact sign-flip
  permutation test on the ``d_t`` (:mod:`.signflip`) and the interval ``mean(d) +/- t(K-1)
  * sd(d) / sqrt(T)``, ``K`` the tasks with ``d_t != 0`` (ties add no degrees of freedom);
  with every ``d_t`` equal (decided on exact fractions) it is :func:`.intervals.degenerate_interval`.

In both cases :func:`.intervals.agree` makes the interval exclude 0 exactly when p < 0.05.
The decision (a coloured cell in the report) uses the Holm-adjusted p-value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from math import comb, lcm

from .intervals import (
    agree,
    degenerate_interval,
    inverted_bound,
    shifted_p,
    t_interval,
    tango_interval,
    tango_score,
)
from .power import WEAK_TASKS, PowerNote, power_note
from .signflip import DRAWS, sign_flip_test

__all__ = [
    "HOLM",
    "MCNEMAR",
    "REFERENCE",
    "SIGN_FLIP",
    "PairedComparison",
    "adjust_family",
    "agree",
    "binom_cdf_half",
    "compare_paired",
    "compare_scores",
    "degenerate_interval",
    "holm",
    "inverted_bound",
    "mcnemar_exact",
    "mcnemar_log_p",
    "shifted_p",
    "t_interval",
    "tango_interval",
    "tango_score",
]

MCNEMAR = "mcnemar-exact"
SIGN_FLIP = "sign-flip"
#: Family of a comparison between two non-reference subjects: Holm-adjusted together.
HOLM = "holm"
#: Family of a comparison with a reference subject (oracle, nop): a calibration check, unadjusted.
REFERENCE = "reference"


def log_binom_cdf_half(m: int, n: int) -> float:
    """``log P(X <= m)`` for X ~ Binomial(n, 1/2), exactly from integer counts (``-inf`` for m < 0).

    The count ``sum_{i <= m} C(n, i)`` is a Python integer; its logarithm is taken directly, so
    a tail of 10^-400 (thousands of discordant tasks) is a finite log, never a float that
    underflows to an exact 0.
    """
    if m < 0:
        return -math.inf
    if m >= n:
        return 0.0
    return math.log(sum(comb(n, i) for i in range(m + 1))) - n * math.log(2)


def binom_cdf_half(m: int, n: int) -> float:
    """P(X <= m) for X ~ Binomial(n, 1/2), exactly (integer arithmetic; 0.0 only below ~1e-308)."""
    return math.exp(log_binom_cdf_half(m, n))


def mcnemar_log_p(b: int, c: int) -> float:
    """The logarithm of the two-sided exact McNemar p-value (0.0, i.e. p = 1, with no discordant pair)."""
    n = b + c
    if n == 0:
        return 0.0
    return min(0.0, math.log(2) + log_binom_cdf_half(min(b, c), n))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    return math.exp(mcnemar_log_p(b, c))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given), for many pairwise tests at once."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


#: A comparison resting on fewer tasks (shared, or differing between the two) is weak.
WEAK_DISCORDANT = WEAK_TASKS


@dataclass(frozen=True)
class PairedComparison:
    """A versus B on their shared tasks. ``diff`` > 0 means A did better.

    ``rate_a``, ``rate_b`` and ``diff`` are task-weighted: the mean over the shared tasks of
    each task's rate (or mean score), so every task counts once whatever its repetitions.
    """

    a: str
    b: str
    tasks: int
    rate_a: float | None
    rate_b: float | None
    diff: float | None
    low: float | None
    high: float | None
    p_value: float | None
    method: str
    wins_a: int
    wins_b: int
    ties: int
    #: McNemar's discordant pairs (A passed, B failed) and (A failed, B passed); None with repetitions.
    only_a: int | None = None
    only_b: int | None = None
    #: The p-value to decide on: Holm-adjusted over the ``holm`` family, the raw one for ``reference``
    #: pairs (filled by :func:`adjust_family`).
    p_adjusted: float | None = None
    family: str | None = None
    #: False when the sign-flip p-value came from Monte Carlo draws rather than every sign pattern.
    exact: bool = True
    #: Tasks needed and the smallest detectable difference (:mod:`.power`).
    power: PowerNote | None = None
    #: The shared tasks A won (higher rate than B) and lost, by name.
    won: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    #: Some shared task has a different number of graded rows on the two sides.
    unequal: bool = False
    #: What is compared: ``pass`` (success rates) or ``score`` (mean scores, partial credit).
    measure: str = "pass"

    @property
    def weak_reasons(self) -> tuple[str, ...]:
        """Why the test or the interval may be off its nominal level here (empty: not weak)."""
        if not self.tasks:
            return ()
        out = []
        if self.tasks < WEAK_TASKS:
            out.append(f"{self.tasks} shared tasks (fewer than {WEAK_TASKS})")
        differ = self.wins_a + self.wins_b
        if differ < WEAK_DISCORDANT:
            out.append(f"{differ} task(s) differ (fewer than {WEAK_DISCORDANT})")
        if self.unequal:
            out.append("unequal repetitions on the two sides")
        return tuple(out)

    @property
    def weak(self) -> bool:
        """Few shared or differing tasks, or unequal repetitions: the comparison can show little."""
        return bool(self.weak_reasons)

    @property
    def verdict(self) -> str:
        """``better`` / ``worse`` (A than B) when the deciding p-value is below 0.05, else ``even``; ``na``."""
        p = self.p_adjusted if self.p_adjusted is not None else self.p_value
        if self.diff is None or p is None:
            return "na"
        if p < 0.05 and self.diff != 0:
            return "better" if self.diff > 0 else "worse"
        return "even"

    @property
    def test_text(self) -> str:
        """The test in words, the same in every view."""
        if not self.tasks:
            return "-"
        if self.method == MCNEMAR:
            return f"McNemar exact ({self.only_a} vs {self.only_b} discordant), Tango score interval"
        how = "exact" if self.exact else f"Monte Carlo, {DRAWS:,} seeded draws"
        return f"sign-flip permutation ({how}), t({max(1, self.wins_a + self.wins_b - 1)}) interval"


def _mean(values: Sequence[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


#: Scores are compared on a lattice of 1/1000 (exact fractions for the sign-flip test).
SCORE_LATTICE = 1000


def exact_score(score: float) -> Fraction:
    """A score as an exact fraction on the 1/1000 lattice (0.9 -> 9/10, 1/3 -> 333/1000)."""
    return Fraction(round(score * SCORE_LATTICE), SCORE_LATTICE)


#: Bits of packed generating function a sign-flip test (and its inversion) on per-task differences may use.
LATTICE_BUDGET_BITS = 100_000_000
#: The coarsest lattice that differences are rounded to (1/50).
MIN_LATTICE = 50


def on_lattice(diffs: Sequence[Fraction]) -> list[Fraction]:
    """``diffs`` as given when the exact sign-flip enumeration of them is cheap, else rounded to a coarser lattice.

    Mean scores on a 1/1000 lattice over many tasks and repetitions make a lattice too fine
    to enumerate (100 tasks x 5 repetitions: seconds of Monte Carlo per pair). The per-task
    differences are then rounded to the finest lattice ``1/Q`` the budget allows, shifts of
    the inversion included (``Q`` >= :data:`MIN_LATTICE`). Rounding is odd (``round(-x) =
    -round(x)``), so the test on the rounded values is still an exact permutation test.
    Rate differences (``c/n`` with small ``n``) fit and are never rounded. The caller tests the
    exact values when rounding changed the sign of the sum.
    """
    t = len(diffs)
    if not any(diffs):
        return list(diffs)
    scale = lcm(*(d.denominator for d in diffs))
    if t * (4 * t * scale + 1) * (t + 2) <= LATTICE_BUDGET_BITS:
        return list(diffs)
    q = max(MIN_LATTICE, int((LATTICE_BUDGET_BITS / (t * (t + 2)) - 1) / (4 * t)))
    if q >= scale:
        return list(diffs)
    return [Fraction(round(d * q), q) for d in diffs]


def _sign(x: Fraction) -> int:
    return (x > 0) - (x < 0)


def _paired(
    names: tuple[str, str],
    shared: Sequence[str],
    rate_a: Mapping[str, Fraction],
    rate_b: Mapping[str, Fraction],
    *,
    binary: bool,
    unequal: bool,
    measure: str,
) -> PairedComparison:
    exact_diffs = [rate_a[t] - rate_b[t] for t in shared]
    diffs = [float(d) for d in exact_diffs]
    n = len(shared)
    won = tuple(t for t, d in zip(shared, exact_diffs, strict=True) if d > 0)
    lost = tuple(t for t, d in zip(shared, exact_diffs, strict=True) if d < 0)
    mean = _mean(exact_diffs)
    common = {
        "a": names[0],
        "b": names[1],
        "tasks": n,
        "rate_a": float(_mean([rate_a[t] for t in shared])),
        "rate_b": float(_mean([rate_b[t] for t in shared])),
        "diff": float(mean),
        "wins_a": len(won),
        "wins_b": len(lost),
        "ties": n - len(won) - len(lost),
        "power": power_note(diffs),
        "won": won,
        "lost": lost,
        "unequal": unequal,
        "measure": measure,
    }

    tested = on_lattice(exact_diffs)
    if _sign(sum(tested, Fraction(0))) != _sign(mean):
        # the rounding lost the direction (many small differences rounded to 0): the test of the
        # rounded values could reject for the side the estimate is not on; test the exact ones
        tested = list(exact_diffs)

    def bound() -> float:
        return inverted_bound(tested)

    if binary:
        p = mcnemar_exact(len(won), len(lost))
        low, high = agree(tango_interval(len(won), len(lost), n), p, float(mean), bound)
        return PairedComparison(
            **common, low=low, high=high, p_value=p, method=MCNEMAR, only_a=len(won), only_b=len(lost)
        )
    test = sign_flip_test(tested)
    spread = len(set(exact_diffs)) > 1
    base = t_interval(diffs, df=len(won) + len(lost) - 1) if spread else None
    interval = base if base is not None else degenerate_interval(exact_diffs[0], n)
    low, high = agree(interval, test.p_value, float(mean), bound)
    return PairedComparison(**common, low=low, high=high, p_value=test.p_value, method=SIGN_FLIP, exact=test.exact)


def _empty(names: tuple[str, str], measure: str) -> PairedComparison:
    return PairedComparison(names[0], names[1], 0, None, None, None, None, None, None, "none", 0, 0, 0, measure=measure)


def compare_paired(
    a: Mapping[str, Sequence[bool]],
    b: Mapping[str, Sequence[bool]],
    *,
    names: tuple[str, str] = ("A", "B"),
) -> PairedComparison:
    """Compare two task -> graded-outcomes maps on the tasks where both have at least one row."""
    shared = sorted(t for t in a.keys() & b.keys() if len(a[t]) and len(b[t]))
    if not shared:
        return _empty(names, "pass")
    binary = all(len(a[t]) == 1 and len(b[t]) == 1 for t in shared)
    unequal = any(len(a[t]) != len(b[t]) for t in shared)
    rate_a = {t: Fraction(sum(1 for x in a[t] if x), len(a[t])) for t in shared}
    rate_b = {t: Fraction(sum(1 for x in b[t] if x), len(b[t])) for t in shared}
    return _paired(names, shared, rate_a, rate_b, binary=binary, unequal=unequal, measure="pass")


def compare_scores(
    a: Mapping[str, Sequence[float]],
    b: Mapping[str, Sequence[float]],
    *,
    names: tuple[str, str] = ("A", "B"),
) -> PairedComparison:
    """Compare two task -> scores maps (partial credit): the mean score per task, paired by task.

    Always the sign-flip test (the per-task means are not binary pairs) and its t interval,
    agreeing with the test as for pass rates.
    """
    shared = sorted(t for t in a.keys() & b.keys() if len(a[t]) and len(b[t]))
    if not shared:
        return _empty(names, "score")
    unequal = any(len(a[t]) != len(b[t]) for t in shared)
    mean_a = {t: _mean([exact_score(x) for x in a[t]]) for t in shared}
    mean_b = {t: _mean([exact_score(x) for x in b[t]]) for t in shared}
    return _paired(names, shared, mean_a, mean_b, binary=False, unequal=unequal, measure="score")


def adjust_family(
    comparisons: Sequence[PairedComparison], is_reference: Callable[[str], bool]
) -> list[PairedComparison]:
    """Fill ``family`` and ``p_adjusted``: Holm over the pairs of non-reference subjects only.

    A pair with a reference subject (oracle, nop) checks the tasks, not the subjects: it is
    reported with its raw p-value and kept out of the family, so it cannot inflate the
    adjusted p-values of the comparisons that matter. An exact p of 0.0 stays 0.0.
    """
    out = list(comparisons)
    family = [i for i, c in enumerate(out) if c.p_value is not None and not (is_reference(c.a) or is_reference(c.b))]
    raw = [p for i in family if (p := out[i].p_value) is not None]
    for i, p in zip(family, holm(raw), strict=True):
        out[i] = replace(out[i], p_adjusted=p, family=HOLM)
    for i, c in enumerate(out):
        if c.p_value is not None and c.family is None:
            out[i] = replace(c, p_adjusted=c.p_value, family=REFERENCE)
    return out
