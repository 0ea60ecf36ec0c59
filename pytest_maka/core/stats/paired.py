"""Paired comparisons of two subjects (or two runs) on the tasks both have graded rows for.

The unit of pairing is the task. For each shared task ``t`` the difference is
``d_t = rate_A(t) - rate_B(t)`` (per-task success rates over graded rows); the reported
difference is the mean of ``d_t``. Pairing removes the task-difficulty variance that two
independent intervals would double count (Miller 2024, section 4).

- Without repetitions (one graded row per task on each side) outcomes are binary pairs:
  the interval is ``mean(d) +/- 1.96 * sd(d) / sqrt(T)`` and the p-value is McNemar's exact
  test on the discordant pairs (a two-sided binomial test with p = 1/2).
- With repetitions the per-task means are not binary: the interval and the p-value come
  from a paired bootstrap that resamples tasks (percentile interval; p-value from the
  bootstrap distribution shifted to the null of no difference). It is seeded, so the same
  records always give the same numbers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb

from .rates import Z95, mean_se, wilson_interval

MCNEMAR = "mcnemar-exact"
BOOTSTRAP = "paired-bootstrap"
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 20241101


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


def paired_bootstrap(
    diffs: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """``(low, high, p)``: 95% percentile interval of the mean of ``diffs`` and a two-sided p-value.

    Resamples ``diffs`` (one per task) with replacement ``samples`` times. The p-value is
    ``(1 + #{|m* - mean| >= |mean|}) / (samples + 1)``: the bootstrap distribution shifted
    to a true difference of zero.
    """
    n = len(diffs)
    if n == 0:
        return (-1.0, 1.0, 1.0)
    mean = sum(diffs) / n
    rng = random.Random(seed)
    values = list(diffs)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(samples))
    low = means[int(0.025 * (samples - 1))]
    high = means[round(0.975 * (samples - 1))]
    threshold = abs(mean) - 1e-12
    extreme = sum(1 for m in means if abs(m - mean) >= threshold)
    return (low, high, min(1.0, (1 + extreme) / (samples + 1)))


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
    #: Holm-adjusted p-value across all comparisons of one report (filled by the caller).
    p_adjusted: float | None = None


def degenerate_interval(wins_a: int, wins_b: int, n: int) -> tuple[float, float]:
    """An interval for a difference whose per-task values all agree (zero spread, so zero standard error).

    Bounds the two one-sided win rates with Wilson intervals and subtracts them
    (``[low_a - high_b, high_a - low_b]``), so ``n`` identical tasks never claim certainty.
    """
    la, ha = wilson_interval(wins_a, n)
    lb, hb = wilson_interval(wins_b, n)
    return (max(-1.0, la - hb), min(1.0, ha - lb))


def _rate(rows: Sequence[bool]) -> float:
    return sum(1 for x in rows if x) / len(rows)


def compare_paired(
    a: Mapping[str, Sequence[bool]],
    b: Mapping[str, Sequence[bool]],
    *,
    names: tuple[str, str] = ("A", "B"),
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> PairedComparison:
    """Compare two task -> graded-outcomes maps on the tasks where both have at least one row."""
    shared = sorted(t for t in a.keys() & b.keys() if len(a[t]) and len(b[t]))
    if not shared:
        return PairedComparison(names[0], names[1], 0, None, None, None, None, None, None, "none", 0, 0, 0)
    ra = [_rate(a[t]) for t in shared]
    rb = [_rate(b[t]) for t in shared]
    diffs = [x - y for x, y in zip(ra, rb, strict=True)]
    n = len(shared)
    mean = sum(diffs) / n
    wins_a = sum(1 for d in diffs if d > 0)
    wins_b = sum(1 for d in diffs if d < 0)
    common = {
        "a": names[0],
        "b": names[1],
        "tasks": n,
        "rate_a": sum(ra) / n,
        "rate_b": sum(rb) / n,
        "diff": mean,
        "wins_a": wins_a,
        "wins_b": wins_b,
        "ties": n - wins_a - wins_b,
    }
    if all(len(a[t]) == 1 and len(b[t]) == 1 for t in shared):
        se = mean_se(diffs)
        if se is None:
            low, high = -1.0, 1.0
        elif se == 0.0:
            low, high = degenerate_interval(wins_a, wins_b, n)
        else:
            low, high = max(-1.0, mean - Z95 * se), min(1.0, mean + Z95 * se)
        return PairedComparison(
            **common,
            low=low,
            high=high,
            p_value=mcnemar_exact(wins_a, wins_b),
            method=MCNEMAR,
            only_a=wins_a,
            only_b=wins_b,
        )
    low, high, p = paired_bootstrap(diffs, samples, seed)
    if low == high:
        low, high = degenerate_interval(wins_a, wins_b, n)
    return PairedComparison(**common, low=low, high=high, p_value=p, method=BOOTSTRAP)
