"""McNemar's exact test against its mid-p variant: exact size and power per number of discordant tasks.

Without repetitions the report tests a paired difference with McNemar's exact test on the
``m`` tasks where the two subjects differ (``b`` won by A, ``c = m - b`` by B). Under "no
difference" ``b ~ Binomial(m, 1/2)``, so the size of any test at a given ``m`` is an exact
binomial sum, no simulation needed:

    size(m) = sum over b of C(m, b) / 2^m * [p(b, m - b) < 0.05]

The mid-p test counts half the probability of the observed table: ``p_mid = 2 * (P(X < k) +
P(X = k) / 2)`` with ``k = min(b, c)``. It is more powerful, but not exact: its size can exceed
5%. The report adopts it only if its size stays at or under 5.5% at every ``m`` the report does
not flag as weak (at least ``WEAK_DISCORDANT`` differing tasks). This script prints where it
does not, and the power each test has at a few alternatives (``P(A wins | the two differ)``).

    python bench/mcnemar_midp.py [--max-m 500] [--target 0.055]
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from math import comb
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_maka.core.stats import mcnemar_exact
from pytest_maka.core.stats.paired import WEAK_DISCORDANT

ALPHA = Fraction(1, 20)


def _tails(m: int) -> list[int]:
    """``sum_{i <= k} C(m, i)`` for k = 0..m (integer counts of the lower tail)."""
    out, running = [], 0
    for i in range(m + 1):
        running += comb(m, i)
        out.append(running)
    return out


def mid_p(b: int, c: int, tails: list[int] | None = None) -> Fraction:
    """The two-sided mid-p McNemar p-value, exactly (1 when b == c)."""
    m, k = b + c, min(b, c)
    tails = tails or _tails(m)
    below = tails[k - 1] if k else 0
    return min(Fraction(1), Fraction(below + tails[k], 2**m))


def exact_p(b: int, c: int, tails: list[int] | None = None) -> Fraction:
    """The report's exact McNemar p-value as a fraction (its float is ``mcnemar_exact``)."""
    m, k = b + c, min(b, c)
    tails = tails or _tails(m)
    return min(Fraction(1), Fraction(2 * tails[k], 2**m))


def rejects(m: int, test: str) -> list[bool]:
    """For each ``b`` in 0..m: whether ``test`` (``exact`` or ``mid-p``) rejects at 0.05."""
    p = exact_p if test == "exact" else mid_p
    tails = _tails(m)
    return [p(b, m - b, tails) < ALPHA for b in range(m + 1)]


def size(m: int, test: str) -> Fraction:
    """The exact probability that ``test`` rejects at 0.05 with ``m`` discordant tasks and no difference."""
    return Fraction(sum(comb(m, b) for b, r in enumerate(rejects(m, test)) if r), 2**m)


def power(m: int, test: str, share: Fraction) -> float:
    """The probability that ``test`` rejects when A wins each of the ``m`` differing tasks with ``share``."""
    hits = rejects(m, test)
    return float(sum(comb(m, b) * share**b * (1 - share) ** (m - b) for b in range(m + 1) if hits[b]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-m", type=int, default=500, help="largest number of discordant tasks (default 500)")
    parser.add_argument("--target", type=float, default=0.055, help="the size allowed (default 0.055)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    target = Fraction(args.target).limit_denominator(10_000)
    over, worst_exact = [], Fraction(0)
    for m in range(1, args.max_m + 1):
        e = size(m, "exact")
        worst_exact = max(worst_exact, e)
        # the report's float p-value decides the same way as the fraction
        assert [mcnemar_exact(b, m - b) < 0.05 for b in range(m + 1)] == rejects(m, "exact"), m
        s = size(m, "mid-p")
        if s > target:
            over.append((m, s))
    unflagged = [(m, s) for m, s in over if m >= WEAK_DISCORDANT]
    print(f"Exact size of McNemar's tests at 0.05, m = 1..{args.max_m} discordant tasks:")
    verdict = "never above 5%" if worst_exact <= ALPHA else "ABOVE 5%"
    print(f"  exact test: largest size {100 * float(worst_exact):.2f}% ({verdict})")
    print(f"  mid-p test: size above {100 * float(target):.1f}% at {len(over)} values of m")
    if unflagged:
        m_worst, s_worst = max(unflagged, key=lambda x: x[1])
        print(
            f"  of which {len(unflagged)} at m >= {WEAK_DISCORDANT} (not flagged weak), "
            f"m = {unflagged[0][0]}..{unflagged[-1][0]}; worst {100 * float(s_worst):.2f}% at m = {m_worst}"
        )
        print("  first ones: " + ", ".join(f"m={m} {100 * float(s):.2f}%" for m, s in unflagged[:8]))
    print()
    print("Power at 0.05 (exact / mid-p), A winning each differing task with the given share:")
    shares = [Fraction(65, 100), Fraction(7, 10), Fraction(75, 100), Fraction(8, 10)]
    print("    m | " + " | ".join(f"share {float(s):.2f}" for s in shares))
    for m in (10, 16, 20, 30, 50, 100):
        cells = [f"{100 * power(m, 'exact', s):4.1f} / {100 * power(m, 'mid-p', s):4.1f}" for s in shares]
        print(f"  {m:3d} | " + " | ".join(cells))
    print(f"wall {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
