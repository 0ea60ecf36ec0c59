"""Single proportions with honest intervals: Wilson for independent rows, cluster-robust with repetitions.

With repetitions, the rows of one task are not independent samples: a task that is easy for
a subject tends to pass every time. Treating ``tasks x repetitions`` rows as independent
understates the uncertainty, so, following Miller (2024), "Adding Error Bars to Evals"
(arXiv:2411.00640), the standard error of the mean treats the repetitions of a task as one
cluster (the CR1 sandwich estimator, the ``cov_type="cluster"`` default of statsmodels).

A normal interval around that standard error is too narrow with few clusters (its variance
is estimated from ``G`` tasks) and can leave [0, 1] near 0 or 1. The interval used here is
the Wilson score interval with the *effective sample size* ``n_eff = p(1 - p) / se^2`` (the
rows' information after the design effect, capped at the number of rows) and the ``t(G-1)``
critical value in place of 1.96 (Korn & Graubard 1998; Dean & Pagano 2015): bounded by
construction, asymmetric near 0 and 1, and as wide as ``G`` tasks warrant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``.

    With ``n == 0`` nothing is known and the interval is the whole range ``(0.0, 1.0)``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    return score_interval(successes / n, n, z)


def bounded_mean_interval(mean: float, se: float | None, clusters: int, cap: float) -> tuple[float, float]:
    """95% interval for the mean of ``clusters`` task-level values in [0, 1] with standard error ``se``.

    Wilson score interval with the effective sample size ``mean(1 - mean) / se^2`` (at most
    ``cap``, the rows' worth of information) and the ``t(clusters - 1)`` critical value. With
    no spread to estimate (fewer than two tasks, or every task at the same value) it is the
    plain Wilson interval over the tasks themselves: never zero width, never certainty.
    """
    if clusters < 1:
        return (0.0, 1.0)
    if se is None or se <= 0.0 or clusters < 2 or not 0.0 < mean < 1.0:
        return score_interval(mean, clusters)
    n_eff = min(cap, mean * (1 - mean) / (se * se))
    return score_interval(mean, n_eff, t95(clusters - 1))


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

    @classmethod
    def of(cls, passes: int, total: int) -> Rate:
        """Wilson interval: every row an independent sample."""
        low, high = wilson_interval(passes, total)
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
        low, high = bounded_mean_interval(passes / total, se, g, cap=total)
        return cls(passes, total, low, high, CLUSTER, g, se)

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
        return "Wilson"
