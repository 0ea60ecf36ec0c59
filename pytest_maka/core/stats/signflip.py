"""The sign-flip permutation test of a paired mean difference, exact where it can be.

Under the null hypothesis that the two subjects are interchangeable on every task, each
per-task difference ``d_t`` is as likely to be ``+d_t`` as ``-d_t``. The two-sided p-value
is the share of the ``2^T`` sign patterns whose ``|sum|`` is at least the observed one
(Fisher 1935; Good 2005). It needs no normality, so it stays valid with 5 tasks, where the
smallest possible p-value is ``2 / 2^5 = 0.0625``.

Per-task differences of success rates are fractions ``c/n``; scaled by the least common
multiple of the row counts they are integers, and then the distribution of the signed sum is
the generating function ``prod_t (1 + x^(2|a_t|))``, built exactly with Python integers (each
coefficient a count of sign patterns, packed in a fixed-width field of one big integer). That
enumerates all ``2^T`` patterns in ``O(T * range)`` machine work. When the range is too wide
for that budget, a dictionary of reachable sums is used up to ``EXACT_TASKS`` tasks; beyond,
a seeded Monte Carlo of ``DRAWS`` patterns (``p = (1 + hits) / (1 + draws)``, never 0).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import lcm

#: Up to this many non-zero differences the test always enumerates every sign pattern.
EXACT_TASKS = 20
#: Bits the generating function may move (tasks x packed size) before falling back.
EXACT_BUDGET_BITS = 1_000_000_000
DRAWS = 10_000
SEED = 20241101


@dataclass(frozen=True)
class SignFlip:
    """The test's p-value and how it was obtained (``draws`` is None when exact)."""

    p_value: float
    exact: bool
    draws: int | None = None


def scaled(diffs: Sequence[Fraction]) -> list[int]:
    """The differences as integers on their common lattice (multiplied by the lcm of their denominators)."""
    scale = lcm(*(d.denominator for d in diffs)) if diffs else 1
    return [int(d * scale) for d in diffs]


def _exact_packed(values: Sequence[int], observed: int) -> float:
    """Exact p from the generating function packed into one integer (``values`` > 0)."""
    width = len(values) + 2  # every count is <= 2^T < 2^width - 1
    total = sum(values)  # exponent e = signed sum + total, in [0, 2 * total]
    poly = 1
    for v in values:
        poly += poly << (width * 2 * v)
    fold = (1 << width) - 1  # a packed polynomial mod 2^width - 1 is the sum of its coefficients

    low = poly & ((1 << (width * (total - observed + 1))) - 1)  # signed sum <= -observed
    high = poly >> (width * (total + observed))  # signed sum >= +observed
    return ((low % fold) + (high % fold)) / (1 << len(values))


def _exact_dict(values: Sequence[int], observed: int) -> float:
    """Exact p from the reachable signed sums and their counts (``values`` > 0)."""
    counts: Counter[int] = Counter({0: 1})
    for v in values:
        nxt: Counter[int] = Counter()
        for s, c in counts.items():
            nxt[s + v] += c
            nxt[s - v] += c
        counts = nxt
    return sum(c for s, c in counts.items() if abs(s) >= observed) / (1 << len(values))


def _monte_carlo(values: Sequence[int], observed: int, draws: int, seed: int) -> float:
    """Seeded Monte Carlo p: tasks with the same ``|a|`` are flipped together as one binomial draw.

    For each group of ``m`` tasks with value ``v`` the ``draws`` binomial(m, 1/2) counts are the
    popcounts of random ``m``-bit integers; the signed sums accumulate group by group.
    """
    rng = random.Random(seed)
    bits = rng.getrandbits
    sums = [0] * draws
    for v, m in sorted(Counter(values).items()):
        sums = [s + v * (2 * bits(m).bit_count() - m) for s in sums]
    hits = sum(1 for s in sums if abs(s) >= observed)
    return (1 + hits) / (1 + draws)


def sign_flip_test(diffs: Sequence[int | Fraction], *, draws: int = DRAWS, seed: int = SEED) -> SignFlip:
    """Two-sided sign-flip permutation test of ``mean(diffs) = 0``; zero differences carry no sign."""
    ints = scaled([Fraction(d) for d in diffs])
    values = [abs(v) for v in ints if v]
    observed = abs(sum(ints))
    if observed == 0:
        return SignFlip(1.0, exact=True)
    if len(values) * (2 * sum(values) + 1) * (len(values) + 2) <= EXACT_BUDGET_BITS:
        return SignFlip(min(1.0, _exact_packed(values, observed)), exact=True)
    if len(values) <= EXACT_TASKS:
        return SignFlip(min(1.0, _exact_dict(values, observed)), exact=True)
    return SignFlip(_monte_carlo(values, observed, draws, seed), exact=False, draws=draws)
