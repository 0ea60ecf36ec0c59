"""How many tasks a paired comparison needs: power and the minimum detectable effect.

A planning figure, not a test. For per-task differences ``d_t`` (binary pairs give -1, 0, 1)
with mean ``D``, null spread ``m2 = mean(d^2)`` (the variance of the sign-flip statistic, or
McNemar's discordance rate) and alternative spread ``v = m2 - D^2``, the tasks needed for a
two-sided test at alpha = 0.05 to detect ``D`` with 80% power are (Connor 1987, for McNemar)

    T = ((z_0.975 * sqrt(m2) + z_0.8 * sqrt(v)) / D)^2

and never fewer than ``MIN_TASKS``, the fewest with which an exact paired test can reach
p < 0.05 at all (``2 / 2^T < 0.05``). The minimum detectable effect at ``T`` tasks is the
smallest ``D`` that formula accepts, holding ``m2`` at its observed value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .tdist import Z80, Z95

#: Below this many shared tasks a comparison is reported as weak.
WEAK_TASKS = 10
ALPHA = 0.05
#: The fewest tasks with which an exact two-sided paired test can give p < 0.05.
MIN_TASKS = next(t for t in range(1, 64) if 2.0 / 2**t < ALPHA)


def smallest_p(tasks: int) -> float:
    """The smallest two-sided p-value an exact paired test can give with ``tasks`` discordant tasks."""
    return min(1.0, 2.0 / 2**tasks) if tasks > 0 else 1.0


def _moments(diffs: Sequence[float]) -> tuple[float, float]:
    n = len(diffs)
    return sum(diffs) / n, sum(d * d for d in diffs) / n


def tasks_needed(diffs: Sequence[float]) -> int | None:
    """Tasks needed to detect a difference of the observed size with 80% power; None without one."""
    if not diffs:
        return None
    mean, m2 = _moments(diffs)
    if abs(mean) < 1e-12:
        return None
    v = max(0.0, m2 - mean * mean)
    t = ((Z95 * math.sqrt(m2) + Z80 * math.sqrt(v)) / abs(mean)) ** 2
    return max(MIN_TASKS, math.ceil(t - 1e-9))


def detectable(diffs: Sequence[float], tasks: int) -> float | None:
    """The smallest difference ``tasks`` tasks detect with 80% power at the observed spread.

    None when it cannot be said: no spread observed, fewer than ``MIN_TASKS`` tasks, or no
    difference within [-1, 1] is detectable.
    """
    if not diffs or tasks < MIN_TASKS:
        return None
    _, m2 = _moments(diffs)
    if m2 <= 0.0:
        return None

    def enough(d: float) -> bool:
        return (Z95 * math.sqrt(m2) + Z80 * math.sqrt(max(0.0, m2 - d * d))) / d <= math.sqrt(tasks)

    hi = min(1.0, math.sqrt(m2))
    if not enough(hi):
        return None
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class PowerNote:
    """What a comparison on ``tasks`` shared tasks can and cannot show."""

    tasks: int
    diff: float
    #: Tasks needed to detect ``diff`` with 80% power (None: no difference observed).
    needed: int | None
    #: The smallest difference detectable with 80% power at ``tasks`` (None: none or unknown).
    detectable: float | None

    @property
    def weak(self) -> bool:
        return self.tasks < WEAK_TASKS

    @property
    def text(self) -> str:
        """One line, worded identically in every view."""
        parts = [f"{self.tasks} shared tasks"]
        if self.tasks < MIN_TASKS:
            parts.append(f"no paired test can reach p < 0.05 (smallest possible p = {smallest_p(self.tasks):.4g})")
        elif self.detectable is not None:
            parts.append(f"80% power only for differences of about ±{100 * self.detectable:.0f} pp or more")
        if self.needed is None:
            parts.append("no difference observed")
        else:
            parts.append(f"a {100 * self.diff:+.1f} pp difference needs about {self.needed} tasks for 80% power")
        return "; ".join(parts)


def power_note(diffs: Sequence[float]) -> PowerNote:
    """The power line for the per-task differences of one comparison."""
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    return PowerNote(len(diffs), mean, tasks_needed(diffs), detectable(diffs, len(diffs)))
