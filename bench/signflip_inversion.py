"""The paired difference interval with skewed per-task differences: the report's against a full sign-flip inversion.

With repetitions the report's interval is ``mean +/- t(T-1) * sd / sqrt(T)``, made to agree
with the exact sign-flip test (its end next to 0 moves to the inverted test's end when the
test rejects and the t interval still holds 0; :func:`core.stats.intervals.agree`). A full
inversion of the sign-flip test takes both ends from the acceptance set ``{delta : p(d -
delta) >= 0.05}``: it agrees with the test by construction and needs no normality, but costs
two bisections of exact enumerations per comparison.

This script simulates the calibration's ``skewed`` scenario (B better by +4 logits on 15% of
the tasks, Beta(0.5, 0.5) difficulties) and prints, per size, the coverage of the true
difference by both intervals, how often each agrees with the test, and the time per
comparison; then the time of one comparison at a large size.

    python bench/signflip_inversion.py [--cohorts 3000] [--sizes 20,30,50] [--reps 3,5] [--seed 26]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from math import lcm
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_maka.core.stats import compare_paired, sign_flip_test
from pytest_maka.core.stats.intervals import shifted_p

SKEW_SHARE, SKEW_SHIFT = 0.15, 4.0
DIFFICULTY = (0.5, 0.5)
#: Bits of packed generating function one shifted test may use (the report's inversion budget).
BUDGET = 50_000_000


def _expit_shift(p: np.ndarray, shift: float) -> np.ndarray:
    odds = p / np.clip(1 - p, 1e-12, None) * math.exp(shift)
    return np.where(p >= 1, 1.0, odds / (1 + odds))


def true_difference() -> float:
    """The population mean of ``rate_B(t) - rate_A(t)`` in this scenario."""
    p = np.random.default_rng(7).beta(*DIFFICULTY, 2_000_000)
    return SKEW_SHARE * float(np.mean(_expit_shift(p, SKEW_SHIFT) - p))


def _lattice(diffs: Sequence[Fraction]) -> int:
    """The finest lattice ``1/q`` of shifts the budget affords (as the report's one-sided inversion)."""
    base = lcm(*(d.denominator for d in diffs))
    t, refine = len(diffs), 1
    while refine < 4096 and t * (4 * t * base * refine * 2 + 1) * (t + 2) <= BUDGET:
        refine *= 2
    return base * refine


def _end(diffs: Sequence[Fraction], q: int, inside: int, outside: int) -> int:
    """Bisection between an accepted shift ``inside`` and a rejected ``outside`` (both on 1/q): the last accepted."""
    while abs(outside - inside) > 1:
        mid = (inside + outside) // 2
        if shifted_p(diffs, Fraction(mid, q)) >= 0.05:
            inside = mid
        else:
            outside = mid
    return inside


def inverted_interval(diffs: Sequence[Fraction]) -> tuple[float, float]:
    """Both ends of the sign-flip test's acceptance set, on the lattice of :func:`_lattice`."""
    q = _lattice(diffs)
    mean = sum(diffs, Fraction(0)) / len(diffs)
    centre = math.floor(mean * q)
    lo_out, hi_out = -q, q
    low = -1.0 if shifted_p(diffs, Fraction(lo_out, q)) >= 0.05 else _end(diffs, q, centre, lo_out) / q
    high = 1.0 if shifted_p(diffs, Fraction(hi_out, q)) >= 0.05 else _end(diffs, q, centre, hi_out) / q
    return (low, high)


def _rows(outcomes: np.ndarray) -> dict[str, list[bool]]:
    return {f"t{i}": [bool(x) for x in row] for i, row in enumerate(outcomes)}


def simulate(tasks: int, reps: int, cohorts: int, seed: int, delta: float) -> dict[str, float]:
    """Coverage and agreement of both intervals over ``cohorts`` skewed cohorts, and seconds per comparison."""
    rng = np.random.default_rng(seed)
    cover = {"report": 0, "inverted": 0}
    agree = {"report": 0, "inverted": 0}
    spent = {"report": 0.0, "inverted": 0.0}
    done = 0
    for _ in range(cohorts):
        p = rng.beta(*DIFFICULTY, tasks)
        pb = np.where(rng.random(tasks) < SKEW_SHARE, _expit_shift(p, SKEW_SHIFT), p)
        xa = rng.random((tasks, reps)) < p[:, None]
        xb = rng.random((tasks, reps)) < pb[:, None]
        ra, rb = _rows(xa), _rows(xb)
        started = time.perf_counter()
        c = compare_paired(rb, ra)
        spent["report"] += time.perf_counter() - started
        if c.p_value is None or c.low is None or c.high is None:
            continue
        diffs = [Fraction(sum(rb[t]) - sum(ra[t]), reps) for t in sorted(ra)]
        started = time.perf_counter()
        low, high = inverted_interval(diffs) if any(diffs) else (-1.0, 1.0)
        p_value = sign_flip_test(diffs).p_value
        spent["inverted"] += time.perf_counter() - started
        done += 1
        cover["report"] += c.low <= delta <= c.high
        cover["inverted"] += low <= delta <= high
        agree["report"] += (c.p_value < 0.05) == (c.low > 0 or c.high < 0)
        agree["inverted"] += (p_value < 0.05) == (low > 0 or high < 0)
    out = {f"cover {k}": 100 * v / done for k, v in cover.items()}
    out |= {f"agree {k}": 100 * v / done for k, v in agree.items()}
    out |= {f"ms {k}": 1000 * v / done for k, v in spent.items()}
    return out


def one_large(tasks: int, reps: int, seed: int) -> tuple[float, float]:
    """Seconds for one comparison at ``tasks`` x ``reps``: the report's, and the full inversion."""
    rng = np.random.default_rng(seed)
    p = rng.beta(*DIFFICULTY, tasks)
    pb = np.where(rng.random(tasks) < SKEW_SHARE, _expit_shift(p, SKEW_SHIFT), p)
    ra = _rows(rng.random((tasks, reps)) < p[:, None])
    rb = _rows(rng.random((tasks, reps)) < pb[:, None])
    started = time.perf_counter()
    compare_paired(rb, ra)
    report = time.perf_counter() - started
    started = time.perf_counter()
    inverted_interval([Fraction(sum(rb[t]) - sum(ra[t]), reps) for t in sorted(ra)])
    return report, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=3000)
    parser.add_argument("--sizes", default="20,30,50")
    parser.add_argument("--reps", default="3,5")
    parser.add_argument("--large", default="500x5", help="one comparison timed at TASKSxREPS (default 500x5)")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    delta = true_difference()
    print(
        f"skewed: B better by +{SKEW_SHIFT:g} logits on {100 * SKEW_SHARE:.0f}% of the tasks; true difference "
        f"{100 * delta:+.2f} pp; {args.cohorts} cohorts per size (seed {args.seed})"
    )
    header = "tasks | reps | cover report | cover inverted | agree report | agree inverted | ms report | ms inverted"
    print(header)
    print("-" * len(header))
    for t in (int(x) for x in args.sizes.split(",")):
        for r in (int(x) for x in args.reps.split(",")):
            row = simulate(t, r, args.cohorts, args.seed * 1009 + t * 31 + r, delta)
            print(
                f"{t:5d} | {r:4d} | {row['cover report']:12.1f} | {row['cover inverted']:14.1f} | "
                f"{row['agree report']:12.1f} | {row['agree inverted']:14.1f} | {row['ms report']:9.2f} | "
                f"{row['ms inverted']:11.2f}"
            )
    big_t, big_r = (int(x) for x in args.large.split("x"))
    report, inverted = one_large(big_t, big_r, args.seed)
    print(f"one comparison at {big_t} tasks x {big_r} reps: report {report:.3f}s, full inversion {inverted:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
