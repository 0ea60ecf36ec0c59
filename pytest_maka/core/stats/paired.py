"""Paired comparisons of two subjects (or two runs) on the tasks both have graded rows for.

The unit of pairing is the task. For each shared task ``t`` the difference is
``d_t = rate_A(t) - rate_B(t)`` (per-task success rates over graded rows); the reported
difference is the mean of ``d_t``. Pairing removes the task-difficulty variance that two
independent intervals would double count (Miller 2024, section 4).

- Without repetitions (one graded row per task on each side) outcomes are binary pairs.
  The p-value is McNemar's exact test on the ``b`` and ``c`` discordant tasks (a two-sided
  binomial test with p = 1/2) and the interval is Tango's (1998) score interval for a
  difference of paired proportions: the inversion of McNemar's score test; it stays inside
  [-1, 1] and has no zero width. The exact test is the more conservative of the two (5 vs 0
  discordant tasks: the score test rejects, p = 0.0625 does not), so the interval is extended
  to 0 whenever the exact test does not reject (:func:`agree`): then the interval excludes 0
  exactly when p < 0.05, and widening can only raise coverage.
- With repetitions the per-task means are not binary: the p-value is the exact sign-flip
  permutation test on the ``d_t`` (:mod:`.signflip`), and the interval is
  ``mean(d) +/- t(T-1) * sd(d) / sqrt(T)``, extended to 0 in the same way when the test does
  not reject (a t interval can, rarely, exclude 0 with the permutation p just above 0.05 or
  contain it just below).

An all-agreeing difference has zero spread; its interval then comes from Wilson intervals
of the two one-sided win rates (:func:`degenerate_interval`), so a few tasks never claim
certainty. The decision (a coloured cell in the report) uses the Holm-adjusted p-value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from math import comb

from .power import WEAK_TASKS, PowerNote, power_note
from .rates import mean_se, wilson_interval
from .signflip import DRAWS, sign_flip_test
from .tdist import Z95, t95

MCNEMAR = "mcnemar-exact"
SIGN_FLIP = "sign-flip"
#: Family of a comparison between two non-reference subjects: Holm-adjusted together.
HOLM = "holm"
#: Family of a comparison with a reference subject (oracle, nop): a calibration check, unadjusted.
REFERENCE = "reference"


def binom_cdf_half(m: int, n: int) -> float:
    """P(X <= m) for X ~ Binomial(n, 1/2), exactly (integer arithmetic, no underflow)."""
    if m < 0:
        return 0.0
    if m >= n:
        return 1.0
    return sum(comb(n, i) for i in range(m + 1)) / (1 << n)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binom_cdf_half(min(b, c), n))


def tango_score(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic for ``p_b - p_c = delta`` from ``b`` and ``c`` discordant pairs out of ``n``.

    ``p_c`` is replaced by its maximum-likelihood estimate under the constraint, the root of
    ``2n p^2 + B p + C = 0`` with ``B = -b - c + (2n - b + c) delta`` and ``C = -c delta (1 - delta)``.
    Decreasing in ``delta``; ``(b - c) / sqrt(b + c)`` (McNemar's score) at ``delta = 0``.
    """
    big_b = -b - c + (2 * n - b + c) * delta
    small_c = -c * delta * (1 - delta)
    p_c = (-big_b + math.sqrt(max(0.0, big_b * big_b - 8 * n * small_c))) / (4 * n)
    num = b - c - n * delta
    var = n * (2 * p_c + delta * (1 - delta))
    if var <= 0.0:
        return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_interval(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Tango's score interval for the paired difference ``(b - c) / n`` (``n`` pairs in all)."""
    if n <= 0:
        return (-1.0, 1.0)

    def root(target: float) -> float:
        lo, hi = -1.0, 1.0  # tango_score(lo) >= target >= tango_score(hi)
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if tango_score(b, c, n, mid) > target else (lo, mid)
        return (lo + hi) / 2

    low = -1.0 if c == n else root(z)
    high = 1.0 if b == n else root(-z)
    return (max(-1.0, low), min(1.0, high))


def t_interval(diffs: Sequence[float]) -> tuple[float, float] | None:
    """``mean +/- t(T-1) * sd / sqrt(T)`` clipped to [-1, 1]; None when there is no spread to use."""
    se = mean_se(diffs)
    if not se:
        return None
    mean = sum(diffs) / len(diffs)
    half = t95(len(diffs) - 1) * se
    return (max(-1.0, mean - half), min(1.0, mean + half))


def agree(interval: tuple[float, float], p: float, alpha: float = 0.05) -> tuple[float, float]:
    """Extend ``interval`` to contain 0 when the test's ``p`` does not reject at ``alpha``."""
    low, high = interval
    if p >= alpha:
        return (min(low, 0.0), max(high, 0.0))
    return (low, high)


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


@dataclass(frozen=True)
class PairedComparison:
    """A versus B on their shared tasks. ``diff`` > 0 means A did better."""

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

    @property
    def weak(self) -> bool:
        """Fewer shared tasks than :data:`WEAK_TASKS`: the comparison can show little."""
        return 0 < self.tasks < WEAK_TASKS

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
        return f"sign-flip permutation ({how}), t({self.tasks - 1}) interval"


def degenerate_interval(wins_a: int, wins_b: int, n: int) -> tuple[float, float]:
    """An interval for a difference whose per-task values all agree (zero spread, so zero standard error).

    Bounds the two one-sided win rates with Wilson intervals and subtracts them
    (``[low_a - high_b, high_a - low_b]``), so ``n`` identical tasks never claim certainty.
    """
    la, ha = wilson_interval(wins_a, n)
    lb, hb = wilson_interval(wins_b, n)
    return (max(-1.0, la - hb), min(1.0, ha - lb))


def _rate(rows: Sequence[bool]) -> Fraction:
    return Fraction(sum(1 for x in rows if x), len(rows))


def compare_paired(
    a: Mapping[str, Sequence[bool]],
    b: Mapping[str, Sequence[bool]],
    *,
    names: tuple[str, str] = ("A", "B"),
) -> PairedComparison:
    """Compare two task -> graded-outcomes maps on the tasks where both have at least one row."""
    shared = sorted(t for t in a.keys() & b.keys() if len(a[t]) and len(b[t]))
    if not shared:
        return PairedComparison(names[0], names[1], 0, None, None, None, None, None, None, "none", 0, 0, 0)
    exact_diffs = [_rate(a[t]) - _rate(b[t]) for t in shared]
    diffs = [float(d) for d in exact_diffs]
    n = len(shared)
    wins_a = sum(1 for d in exact_diffs if d > 0)
    wins_b = sum(1 for d in exact_diffs if d < 0)
    common = {
        "a": names[0],
        "b": names[1],
        "tasks": n,
        "rate_a": sum(float(_rate(a[t])) for t in shared) / n,
        "rate_b": sum(float(_rate(b[t])) for t in shared) / n,
        "diff": sum(diffs) / n,
        "wins_a": wins_a,
        "wins_b": wins_b,
        "ties": n - wins_a - wins_b,
        "power": power_note(diffs),
    }
    if all(len(a[t]) == 1 and len(b[t]) == 1 for t in shared):
        p = mcnemar_exact(wins_a, wins_b)
        low, high = agree(tango_interval(wins_a, wins_b, n), p)
        return PairedComparison(**common, low=low, high=high, p_value=p, method=MCNEMAR, only_a=wins_a, only_b=wins_b)
    test = sign_flip_test(exact_diffs)
    low, high = agree(t_interval(diffs) or degenerate_interval(wins_a, wins_b, n), test.p_value)
    return PairedComparison(**common, low=low, high=high, p_value=test.p_value, method=SIGN_FLIP, exact=test.exact)


def adjust_family(
    comparisons: Sequence[PairedComparison], is_reference: Callable[[str], bool]
) -> list[PairedComparison]:
    """Fill ``family`` and ``p_adjusted``: Holm over the pairs of non-reference subjects only.

    A pair with a reference subject (oracle, nop) checks the tasks, not the subjects: it is
    reported with its raw p-value and kept out of the family, so it cannot inflate the
    adjusted p-values of the comparisons that matter.
    """
    out = list(comparisons)
    family = [i for i, c in enumerate(out) if c.p_value is not None and not (is_reference(c.a) or is_reference(c.b))]
    for i, p in zip(family, holm([out[i].p_value or 1.0 for i in family]), strict=True):
        out[i] = replace(out[i], p_adjusted=p, family=HOLM)
    for i, c in enumerate(out):
        if c.p_value is not None and c.family is None:
            out[i] = replace(c, p_adjusted=c.p_value, family=REFERENCE)
    return out
