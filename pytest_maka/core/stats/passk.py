"""Unbiased pass@k and pass^k from repetitions, and per-task success rates.

For a task with ``n`` graded samples of which ``c`` passed:

- pass@k = 1 - C(n-c, k) / C(n, k): the chance that at least one of ``k`` samples drawn
  without replacement passes (Chen et al. 2021, "Evaluating Large Language Models Trained
  on Code"); unbiased, unlike ``1 - (1-p)^k``.
- pass^k = C(c, k) / C(n, k): the chance that all ``k`` pass (Yao et al. 2024, tau-bench);
  a measure of reliability.

A subject's figure is the mean over the tasks with at least ``k`` graded samples. Tasks
are the independent units, so its interval is :func:`.rates.bounded_mean_interval` over
those tasks: the Wilson score interval with the effective sample size and the ``t(T-1)``
critical value, capped at the ``sum_t floor(n_t / k)`` disjoint ``k``-draws the rows hold.
When every task has the same value (an oracle passing everything; decided on exact
fractions, not on a float standard error) there is no spread to estimate and the interval is
Wilson's over the ``T`` tasks: never zero width.

The estimand is task-weighted (every task counts once). pass@1 therefore equals the
headline official rate, which pools rows, only when every task has the same number of
graded rows; the views label both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb

from .rates import NEAR_BOUND, bounded_mean_interval, mean_se


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``n`` samples, ``c`` passes."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (every one of ``k`` samples passes) for one task."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")


@dataclass(frozen=True)
class KEstimate:
    """pass@k and pass^k of one subject for one ``k``, over ``tasks`` tasks."""

    k: int
    tasks: int
    pass_at: float
    pass_at_low: float
    pass_at_high: float
    pass_hat: float
    pass_hat_low: float
    pass_hat_high: float
    #: At most ``NEAR_BOUND`` tasks away from 0 (or from 1): the interval next to the bound is approximate.
    pass_at_weak: bool = False
    pass_hat_weak: bool = False


def near_bound(values: Sequence[Fraction]) -> bool:
    """At most :data:`.rates.NEAR_BOUND` of the per-task values differ from 0, or from 1."""
    return min(sum(1 for v in values if v > 0), sum(1 for v in values if v < 1)) <= NEAR_BOUND


def _mean_interval(values: Sequence[Fraction], draws: int) -> tuple[float, float, float]:
    """The mean of exact per-task values and its interval (no spread decided on the fractions, not floats)."""
    floats = [float(v) for v in values]
    mean = float(sum(values, Fraction(0)) / len(values))
    se = mean_se(floats) if len(set(values)) > 1 else None
    low, high = bounded_mean_interval(mean, se, len(values), cap=draws)
    return mean, low, high


def pass_k_table(per_task: Mapping[str, Sequence[bool]], max_k: int | None = None) -> list[KEstimate]:
    """pass@k and pass^k for k = 1 .. the most samples any task has (or ``max_k``).

    ``per_task`` maps each task to its graded outcomes (official rows). A task with fewer
    than ``k`` samples does not contribute to that ``k``; ``KEstimate.tasks`` says how many did.
    """
    counts = [(len(v), sum(1 for x in v if x)) for v in per_task.values() if len(v)]
    if not counts:
        return []
    top = max(n for n, _ in counts)
    if max_k is not None:
        top = min(top, max_k)
    out = []
    for k in range(1, top + 1):
        usable = [(n, c) for n, c in counts if n >= k]
        draws = sum(n // k for n, _ in usable)
        at_values = [1 - Fraction(comb(n - c, k), comb(n, k)) for n, c in usable]
        hat_values = [Fraction(comb(c, k), comb(n, k)) for n, c in usable]
        at, hat = _mean_interval(at_values, draws), _mean_interval(hat_values, draws)
        out.append(KEstimate(k, len(usable), *at, *hat, near_bound(at_values), near_bound(hat_values)))
    return out


@dataclass(frozen=True)
class TaskRate:
    """One subject on one task: graded passes over graded rows, and over every row."""

    task: str
    passes: int
    official: int
    cells: int

    @property
    def rate(self) -> float | None:
        """Official success rate, None without a graded row."""
        return self.passes / self.official if self.official else None
