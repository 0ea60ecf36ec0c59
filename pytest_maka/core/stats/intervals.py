"""Intervals for a paired difference, and the rule that makes them agree with the test.

- :func:`tango_interval`: Tango's (1998) score interval for a difference of paired
  proportions (binary pairs): the inversion of McNemar's score test, inside [-1, 1], never
  zero width.
- :func:`t_interval`: ``mean +/- t(K-1) * sd / sqrt(T)`` on the ``T`` per-task differences,
  ``K`` of them non-zero (the degrees of freedom of the spread: tied tasks add none).
- :func:`degenerate_interval`: every per-task difference equal (no spread to estimate).
- :func:`agree`: p < 0.05 exactly when the interval excludes 0. A test that does not reject
  extends the interval to 0; a test that rejects while the interval still holds 0 moves the
  interval's end next to 0 to the end of the inverted sign-flip test's acceptance set
  (:func:`inverted_bound`), which lies strictly between 0 and the estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from math import lcm

from .rates import mean_se, score_interval
from .signflip import sign_flip_test
from .tdist import Z95, t95


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


def t_interval(diffs: Sequence[float], df: int | None = None) -> tuple[float, float] | None:
    """``mean +/- t(df) * sd / sqrt(T)`` clipped to [-1, 1]; None with fewer than two values.

    ``df`` defaults to ``T - 1``; the paired comparison passes ``K - 1`` with ``K`` the tasks
    whose difference is not 0 (at least 1). Tied tasks (0 of 5 on both sides, common with rare
    or near-certain success) are exact zeros: they shrink the standard deviation without
    telling anything about the spread of the differing tasks, and the interval with ``T - 1``
    degrees of freedom then covers 93-94% at 20-100 tasks (bench/RESULTS.md, 2026-12-04).
    Whether the values have any spread is the caller's (exact) question: a float standard
    error of identical fractions can come out as 1e-17 rather than 0.
    """
    se = mean_se(diffs)
    if se is None:
        return None
    mean = sum(diffs) / len(diffs)
    half = t95(len(diffs) - 1 if df is None else max(1, df)) * se
    return (max(-1.0, mean - half), min(1.0, mean + half))


def shifted_p(diffs: Sequence[Fraction], delta: Fraction) -> float:
    """The sign-flip p-value of ``mean(diffs) = delta`` (the test of ``diffs - delta`` against 0)."""
    return sign_flip_test([d - delta for d in diffs]).p_value


#: Bits of packed generating function one step of :func:`inverted_bound` may use.
_INVERT_BUDGET = 50_000_000


def inverted_bound(diffs: Sequence[Fraction], alpha: float = 0.05) -> float:
    """The end of the sign-flip test's acceptance set between 0 and ``mean(diffs)`` (the test rejects at 0).

    The acceptance set ``{delta : p(diffs - delta) >= alpha}`` is the interval that inverts the
    test; this finds, by bisection on a fine lattice of ``delta``, its end on the side of 0: the
    point nearest 0 that the test does not reject. The lattice is the differences' own lattice
    (the lcm of their denominators) refined as far as the exact enumeration's budget allows.
    """
    mean = sum(diffs, Fraction(0)) / len(diffs)
    base = lcm(*(d.denominator for d in diffs))
    t = len(diffs)
    refine = 1
    while refine < 4096 and t * (4 * t * base * refine * 2 + 1) * (t + 2) <= _INVERT_BUDGET:
        refine *= 2
    q = base * refine
    target = mean * q  # the estimate on the lattice of 1/q (a whole number)
    rejected, accepted = 0, math.ceil(target) if mean > 0 else math.floor(target)
    while abs(accepted - rejected) > 1:
        mid = (rejected + accepted) // 2 if mean > 0 else -((-rejected - accepted) // 2)
        if shifted_p(diffs, Fraction(mid, q)) >= alpha:
            accepted = mid
        else:
            rejected = mid
    return accepted / q


def agree(
    interval: tuple[float, float],
    p: float,
    diff: float,
    bound: Callable[[], float] | None = None,
    alpha: float = 0.05,
) -> tuple[float, float]:
    """Make ``interval`` exclude 0 exactly when the test's ``p`` is below ``alpha``.

    Not rejecting: the interval is extended to 0. Rejecting while the interval still holds 0:
    its end on the side of 0 moves to ``bound()``, the end of the inverted test's acceptance
    set (:func:`inverted_bound`), which lies strictly between 0 and the estimate.
    """
    low, high = interval
    if p >= alpha:
        return (min(low, 0.0), max(high, 0.0))
    if low <= 0.0 <= high and diff != 0 and bound is not None:
        edge = bound()  # within one lattice step of the estimate at worst: never past it
        return (min(edge, diff), high) if diff > 0 else (low, max(edge, diff))
    return (low, high)


def degenerate_interval(diff: Fraction, n: int, z: float = Z95) -> tuple[float, float]:
    """An interval for a difference whose ``n`` per-task values all equal ``diff`` (no spread to estimate).

    Towards 0 the bound is ``diff`` times the gap between the Wilson bounds of the win rate
    (``n`` of ``n``) and the loss rate (0 of ``n``), ``(n - z^2) / (n + z^2)``: the observed
    size with the uncertainty of its sign. Away from 0 it is the Wilson bound of the mean of
    ``(d + 1) / 2`` over ``n`` tasks, the worst-case spread of a value in [-1, 1]. So the
    estimate is always inside, ``n`` identical tasks never claim certainty, and with all
    tasks tied (``diff = 0``) the interval is ``+/- z^2 / (n + z^2)``.
    """
    gap = (n - z * z) / (n + z * z)
    d = float(diff)
    if d == 0:
        return (-(1 - gap) / 2, (1 - gap) / 2)
    far = 2 * score_interval((abs(d) + 1) / 2, n, z)[1] - 1
    near = abs(d) * gap
    return (near, far) if d > 0 else (-far, -near)
