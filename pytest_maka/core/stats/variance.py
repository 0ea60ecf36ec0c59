"""Where a subject's uncertainty comes from: between tasks or within a task, and what more runs would buy.

For a subject with repetitions, the task-weighted pass rate over ``T`` tasks with ``R``
repetitions each has variance ``between / T + within / (T R)`` (a one-way random-effects
model): ``between`` is the spread of the tasks' true rates, ``within`` the mean Bernoulli
variance ``p_t (1 - p_t)`` of one row. Both are estimated without bias from the observed
per-task rates (the method of moments: ``within`` from each task's rows with the ``n/(n-1)``
correction, ``between`` as the variance of the task rates minus the share of it that the
rows' noise explains). More repetitions only shrink the second term; more tasks shrink both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class VarianceSplit:
    """Between- and within-task variance of one subject's rows, and standard errors at other sizes."""

    tasks: int
    #: Mean graded rows per task.
    repetitions: float
    between: float
    within: float

    def se(self, tasks: float, repetitions: float) -> float:
        """The standard error of the task-weighted rate with ``tasks`` tasks of ``repetitions`` rows each."""
        return math.sqrt(self.between / tasks + self.within / (tasks * repetitions))

    @property
    def now(self) -> float:
        return self.se(self.tasks, self.repetitions)

    @property
    def more_repetitions(self) -> float:
        """The standard error with twice the repetitions on the same tasks."""
        return self.se(self.tasks, 2 * self.repetitions)

    @property
    def more_tasks(self) -> float:
        """The standard error with twice the tasks at the same repetitions."""
        return self.se(2 * self.tasks, self.repetitions)

    @property
    def between_share(self) -> float:
        """The part of the current variance that comes from tasks differing (0 to 1)."""
        total = self.between / self.tasks + self.within / (self.tasks * self.repetitions)
        return self.between / self.tasks / total if total > 0 else 0.0

    @property
    def text(self) -> str:
        """One line, worded identically in every view."""
        return (
            f"{100 * self.between_share:.0f}% of the variance is between tasks; "
            f"95% half-width ±{196 * self.now:.1f} pp now, ±{196 * self.more_repetitions:.1f} pp with twice the "
            f"repetitions, ±{196 * self.more_tasks:.1f} pp with twice the tasks"
        )


def variance_split(per_task: Sequence[Sequence[bool]]) -> VarianceSplit | None:
    """The split for one subject's graded rows grouped by task.

    None without two tasks, without any repetition, or when every row agrees (nothing to split).
    """
    groups = [list(g) for g in per_task if len(g)]
    if len(groups) < 2 or all(len(g) == 1 for g in groups):
        return None
    rates = [sum(g) / len(g) for g in groups]
    repeated = [(r, len(g)) for r, g in zip(rates, groups, strict=True) if len(g) > 1]
    within = sum(r * (1 - r) * n / (n - 1) for r, n in repeated) / len(repeated)
    t = len(groups)
    mean = sum(rates) / t
    observed = sum((r - mean) ** 2 for r in rates) / (t - 1)
    noise = sum(within / len(g) for g in groups) / t
    reps = sum(len(g) for g in groups) / t
    if observed <= 0.0 and within <= 0.0:
        return None
    return VarianceSplit(tasks=t, repetitions=reps, between=max(0.0, observed - noise), within=within)
