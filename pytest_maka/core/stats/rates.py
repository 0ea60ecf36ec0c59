"""Single proportions with honest intervals: corrected Wilson for independent rows, cluster-robust with repetitions.

With repetitions, the rows of one task are not independent samples: a task that is easy for
a subject tends to pass every time. Treating ``tasks x repetitions`` rows as independent
understates the uncertainty, so, following Miller (2024), "Adding Error Bars to Evals"
(arXiv:2411.00640), the standard error of the mean treats the repetitions of a task as one
cluster (the CR1 sandwich estimator, the ``cov_type="cluster"`` default of statsmodels).

A normal interval around that standard error is too narrow with few clusters (its variance
is estimated from ``G`` tasks) and can leave [0, 1] near 0 or 1. The interval used here is
the Wilson score interval (with continuity correction) at the *effective sample size* ``n_eff = p(1 - p) / se^2`` (the
rows' information after the design effect, capped at the number of rows) and the ``t(G-1)``
critical value in place of 1.96 (Korn & Graubard 1998; Dean & Pagano 2015): bounded by
construction, asymmetric near 0 and 1, and as wide as ``G`` tasks warrant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .tdist import Z95, t95

WILSON = "wilson"
CLUSTER = "cluster"


def score_interval(p: float, n: float, crit: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a proportion ``p`` observed over ``n`` (possibly effective) trials."""
    z2 = crit * crit
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (crit / denom) * math.sqrt(max(0.0, p * (1 - p)) / n + z2 / (4 * n * n))
    low = 0.0 if p <= 0.0 else max(0.0, centre - half)
    high = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return (low, high)


def corrected_score_interval(p: float, n: float, crit: float = Z95) -> tuple[float, float]:
    """The Wilson score interval with continuity correction (Newcombe 1998, method 4) for ``p``
    over ``n`` (possibly effective) trials.

    Plain Wilson covers 95% on average over the rate but dips to 92-93% at some rates for every
    ``n`` (its coverage oscillates; Brown, Cai & DasGupta 2001). The correction keeps the
    pointwise coverage at or above 95% for n from 10 to 500 at every rate (exact binomial sums,
    ``tests/report/test_stats_issue26.py``), for 5-10% more width.
    """
    z2 = crit * crit
    low = 0.0
    if p > 0.0:
        root = z2 - 2 - 1 / n + 4 * p * (n * (1 - p) + 1)
        low = max(0.0, (2 * n * p + z2 - 1 - crit * math.sqrt(max(0.0, root))) / (2 * (n + z2)))
    high = 1.0
    if p < 1.0:
        root = z2 + 2 - 1 / n + 4 * p * (n * (1 - p) - 1)
        high = min(1.0, (2 * n * p + z2 + 1 + crit * math.sqrt(max(0.0, root))) / (2 * (n + z2)))
    return (low, high)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``.

    With ``n == 0`` nothing is known and the interval is the whole range ``(0.0, 1.0)``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    return score_interval(successes / n, n, z)


#: At most this many successes (or failures): the side of the interval near the bound is exact.
NEAR_BOUND = 3


def _log_lower_tail(x: int, n: int, p: float) -> float:
    """``log P(X < x)`` for X ~ Binomial(n, p), 0 < p < 1, summed over the (few) terms below ``x``."""
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) + (n - i) * math.log1p(-p)
        for i in range(x)
    ]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def exact_lower(x: int, n: int, tail: float = 0.025) -> float:
    """The Clopper-Pearson lower bound: the ``p`` with ``P(X >= x) = tail`` (0 for ``x = 0``)."""
    if x <= 0:
        return 0.0
    lo, hi = 0.0, 1.0  # P(X >= x) rises with p; at the answer P(X < x) = 1 - tail
    target = math.log1p(-tail)
    for _ in range(100):
        mid = (lo + hi) / 2
        if mid <= 0.0 or mid >= 1.0:
            break
        lo, hi = (mid, hi) if _log_lower_tail(x, n, mid) > target else (lo, mid)
    return lo


def rate_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The interval of a rate of independent rows: Wilson with continuity correction
    (:func:`corrected_score_interval`), exact (Clopper-Pearson) next to a bound.

    With at most :data:`NEAR_BOUND` successes the lower bound is the smaller of the corrected
    one and the exact one, and with at most that many failures the upper bound likewise: the
    side next to the bound keeps the exact interval's guarantee.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    low, high = corrected_score_interval(successes / n, n, z)
    if 0 < successes <= NEAR_BOUND:
        low = min(low, exact_lower(successes, n))
    if 0 < n - successes <= NEAR_BOUND:
        high = max(high, 1.0 - exact_lower(n - successes, n))
    return (low, high)


def bounded_mean_interval(mean: float, se: float | None, clusters: int, cap: float) -> tuple[float, float]:
    """95% interval for the mean of ``clusters`` task-level values in [0, 1] with standard error ``se``.

    Wilson score interval with continuity correction (:func:`corrected_score_interval`) at the
    effective sample size ``mean(1 - mean) / se^2`` (at most ``cap``, the rows' worth of
    information) and the ``t(clusters - 1)`` critical value. With no spread to estimate (``se``
    None: fewer than two tasks, or every task at the same value, which the caller decides from
    exact fractions) it is that interval over the tasks themselves: never zero width, never
    certainty.
    """
    if clusters < 1:
        return (0.0, 1.0)
    if se is None or se <= 0.0 or clusters < 2 or not 0.0 < mean < 1.0:
        return corrected_score_interval(mean, clusters)
    n_eff = min(cap, mean * (1 - mean) / (se * se))
    return corrected_score_interval(mean, n_eff, t95(clusters - 1))


def clustered_se(clusters: Sequence[Sequence[float]]) -> float | None:
    """Cluster-robust (CR1) standard error of the mean of every value in ``clusters``.

    ``Var = G/(G-1) * sum_c (sum_{i in c} (x_i - mean))^2 / n^2`` for ``G`` clusters and ``n``
    values; with one value per cluster this is the familiar ``s / sqrt(n)``. None when
    fewer than two clusters hold values (no variance can be estimated).
    """
    groups = [list(c) for c in clusters if len(c)]
    n = sum(len(c) for c in groups)
    g = len(groups)
    if g < 2:
        return None
    mean = sum(sum(c) for c in groups) / n
    meat = sum(sum(x - mean for x in c) ** 2 for c in groups)
    return math.sqrt(g / (g - 1) * meat) / n


def mean_se(values: Sequence[float]) -> float | None:
    """Standard error of the mean, ``s / sqrt(n)`` with the sample standard deviation; None for n < 2."""
    return clustered_se([[v] for v in values])


@dataclass(frozen=True)
class Rate:
    """A proportion with its denominator written out and a 95% interval.

    ``method`` says how the interval was made: ``wilson`` (rows independent) or ``cluster``
    (repetitions of a task treated as one cluster; ``se`` is the cluster-robust standard error).
    """

    passes: int
    total: int
    low: float
    high: float
    method: str = WILSON
    #: Number of clusters (tasks) behind the rows, when repetitions were clustered.
    clusters: int | None = None
    se: float | None = None
    #: Clustered: tasks with some pass and tasks with some failure (how far the rate is from 0 and 1).
    tasks_passing: int | None = None
    tasks_failing: int | None = None

    @classmethod
    def of(cls, passes: int, total: int) -> Rate:
        """Every row an independent sample: Wilson, exact next to a bound (:func:`rate_interval`)."""
        low, high = rate_interval(passes, total)
        return cls(passes, total, low, high)

    @classmethod
    def clustered(cls, clusters: Iterable[Sequence[bool]]) -> Rate:
        """The pass rate of boolean rows grouped by task; clustered interval when any task has >1 row.

        Without repetitions this is exactly :meth:`of`. With repetitions the interval is
        :func:`bounded_mean_interval` over the tasks: when every task has the same rate (all
        pass, say) the clustered standard error is 0, which would claim certainty, and the
        interval is Wilson's over the number of tasks, the conservative choice.
        """
        groups = [[1.0 if x else 0.0 for x in c] for c in clusters if len(c)]
        total = sum(len(c) for c in groups)
        passes = int(sum(sum(c) for c in groups))
        if all(len(c) == 1 for c in groups):
            return cls.of(passes, total)
        g = len(groups)
        se = clustered_se(groups)
        spread = len({Fraction(int(sum(c)), len(c)) for c in groups}) > 1
        low, high = bounded_mean_interval(passes / total, se if spread else None, g, cap=total)
        passing = sum(1 for c in groups if any(c))
        failing = sum(1 for c in groups if not all(c))
        return cls(passes, total, low, high, CLUSTER, g, se, passing, failing)

    @property
    def value(self) -> float | None:
        """The point estimate, or None for an empty denominator."""
        return self.passes / self.total if self.total else None

    @property
    def text(self) -> str:
        """``3/4 = 75.0%`` (``0/0 = n/a`` when there is nothing to divide by)."""
        if not self.total:
            return "0/0 = n/a"
        return f"{self.passes}/{self.total} = {100 * self.passes / self.total:.1f}%"

    @property
    def interval_text(self) -> str:
        """``[30.1%, 95.4%]``, or ``n/a`` when the denominator is empty."""
        if not self.total:
            return "n/a"
        return f"[{100 * self.low:.1f}%, {100 * self.high:.1f}%]"

    @property
    def method_text(self) -> str:
        """How the interval was made, in words."""
        if self.method == CLUSTER:
            return f"cluster-robust over {self.clusters} tasks"
        if self.total and (0 < self.passes <= NEAR_BOUND or 0 < self.total - self.passes <= NEAR_BOUND):
            return "Wilson with continuity correction, exact (Clopper-Pearson) next to the bound"
        return "Wilson with continuity correction"

    @property
    def weak(self) -> str | None:
        """Why the clustered interval may cover less than 95%, or None.

        The tasks are the sample: with at most :data:`NEAR_BOUND` tasks that ever passed (or
        ever failed) the interval next to that bound is approximate. Rows without repetitions
        get the exact bound there (:func:`rate_interval`) and are not flagged.
        """
        if self.method != CLUSTER or self.tasks_passing is None or self.tasks_failing is None:
            return None
        if self.tasks_passing <= NEAR_BOUND:
            return f"{self.tasks_passing} of {self.clusters} tasks ever passed: the interval near 0 is approximate"
        if self.tasks_failing <= NEAR_BOUND:
            return f"{self.tasks_failing} of {self.clusters} tasks ever failed: the interval near 100% is approximate"
        return None
