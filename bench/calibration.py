"""Calibration of the report's statistics by simulation: false-positive rates and interval coverage.

Simulated cohorts (seeded) of ``T`` tasks x ``R`` repetitions. Each task has a success
probability drawn from a difficulty regime (cohorts cycle through mixed, hard and easy
Beta distributions), and each repetition passes independently with it. Per cohort:

- subjects A and A' are identical (the same per-task probabilities): a paired test that says
  p < 0.05 is a false positive, and the paired interval should contain 0;
- subject B is better by a known amount (logit + 1 per task): the test's power, and whether
  the paired interval contains the true population difference;
- A's official pass rate interval, and (with repetitions) its pass@R and pass^R intervals,
  should contain the population values (Beta moments, exact).

Everything is computed by the report's own functions (``pytest_maka.core.stats``). For
contrast, the methods the report used before issue 12 (a normal cluster-robust interval
and a paired bootstrap p-value) are re-implemented here and measured on the same cohorts.

    python bench/calibration.py [--cohorts 4000] [--workers 2] [--sizes 5,10,30,100] [--reps 1,3,5]

Prints one row per size; targets: false-positive rate <= 5.5% and coverage >= 94% wherever
the report does not flag comparisons as weak (fewer than 10 tasks). Figures only.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_maka.core.stats import WEAK_TASKS, Rate, clustered_se, compare_paired, pass_k_table

#: Difficulty regimes: Beta(a, b) of the per-task success probability.
REGIMES: dict[str, tuple[float, float]] = {"mixed": (0.5, 0.5), "hard": (0.7, 2.5), "easy": (2.5, 0.7)}
SHIFT = 1.0  # B's advantage on the logit scale
FPR_TARGET = 0.055
COVERAGE_TARGET = 0.94
BOOT = 1000

#: Columns: name -> what it measures (a rate of hits over cohorts).
COLUMNS = {
    "fpr": "test p < 0.05, identical subjects",
    "power": "test p < 0.05, B better by logit+1",
    "cover0": "paired interval contains 0, identical subjects",
    "coverD": "paired interval contains the true difference",
    "rate": "official rate interval contains the population rate",
    "pass@R": "pass@R interval contains the population value",
    "pass^R": "pass^R interval contains the population value",
    "boot_fpr": "before: paired bootstrap p < 0.05, identical subjects",
    "normal": "before: normal cluster interval contains the population rate",
}
TARGETS = {"fpr": ("<=", FPR_TARGET), "cover0": (">=", COVERAGE_TARGET), "coverD": (">=", COVERAGE_TARGET)}
TARGETS |= {"rate": (">=", COVERAGE_TARGET), "pass@R": (">=", COVERAGE_TARGET), "pass^R": (">=", COVERAGE_TARGET)}


def beta_moment(a: float, b: float, k: int) -> float:
    """``E[p^k]`` for ``p ~ Beta(a, b)``."""
    return math.prod((a + i) / (a + b + i) for i in range(k))


def true_difference(a: float, b: float) -> float:
    """``E[expit(logit(p) + SHIFT) - p]`` for ``p ~ Beta(a, b)``, by seeded Monte Carlo (error ~ 1e-4)."""
    p = np.random.default_rng(7).beta(a, b, 2_000_000).clip(1e-12, 1 - 1e-12)
    odds = p / (1 - p) * math.exp(SHIFT)
    return float(np.mean(odds / (1 + odds) - p))


@dataclass
class Tally:
    """Hits and trials per column, overall and per regime."""

    hits: dict[str, int] = field(default_factory=dict)
    trials: dict[str, int] = field(default_factory=dict)
    by_regime: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def add(self, column: str, hit: bool, regime: str) -> None:
        self.hits[column] = self.hits.get(column, 0) + int(hit)
        self.trials[column] = self.trials.get(column, 0) + 1
        cell = self.by_regime.setdefault(regime, {}).setdefault(column, [0, 0])
        cell[0] += int(hit)
        cell[1] += 1

    def merge(self, other: Tally) -> None:
        for c in other.trials:
            self.hits[c] = self.hits.get(c, 0) + other.hits[c]
            self.trials[c] = self.trials.get(c, 0) + other.trials[c]
        for regime, cols in other.by_regime.items():
            for c, (h, n) in cols.items():
                cell = self.by_regime.setdefault(regime, {}).setdefault(c, [0, 0])
                cell[0] += h
                cell[1] += n

    def rate(self, column: str) -> float | None:
        return self.hits[column] / self.trials[column] if self.trials.get(column) else None

    def worst(self, column: str, higher_is_better: bool) -> tuple[str, float] | None:
        rates = [(r, cols[column][0] / cols[column][1]) for r, cols in self.by_regime.items() if column in cols]
        if not rates:
            return None
        return min(rates, key=lambda x: x[1]) if higher_is_better else max(rates, key=lambda x: x[1])


def _rows(outcomes: np.ndarray) -> dict[str, list[bool]]:
    return {f"t{i}": [bool(x) for x in row] for i, row in enumerate(outcomes)}


def _bootstrap_p(diffs: np.ndarray, rng: np.random.Generator) -> float:
    """The p-value of the paired bootstrap the report used before (shifted to no difference)."""
    mean = diffs.mean()
    means = diffs[rng.integers(0, len(diffs), size=(BOOT, len(diffs)))].mean(axis=1)
    return (1 + int(np.sum(np.abs(means - mean) >= abs(mean) - 1e-12))) / (BOOT + 1)


def simulate(job: tuple[int, int, int, int, int]) -> Tally:
    """``cohorts`` cohorts of ``tasks`` x ``reps`` (regimes cycled from ``start``), seeded by ``seed``."""
    tasks, reps, cohorts, start, seed = job
    rng = np.random.default_rng(seed)
    tally = Tally()
    names = list(REGIMES)
    for i in range(cohorts):
        regime = names[(start + i) % len(names)]
        a, b = REGIMES[regime]
        p = rng.beta(a, b, tasks)
        odds = p / np.clip(1 - p, 1e-12, None) * math.exp(SHIFT)
        p_better = np.where(p >= 1, 1.0, odds / (1 + odds))
        xa = rng.random((tasks, reps)) < p[:, None]
        xa2 = rng.random((tasks, reps)) < p[:, None]
        xb = rng.random((tasks, reps)) < p_better[:, None]
        ra, ra2, rb = _rows(xa), _rows(xa2), _rows(xb)

        null = compare_paired(ra, ra2)
        tally.add("fpr", (null.p_value or 1.0) < 0.05, regime)
        tally.add("cover0", (null.low or 0.0) <= 0.0 <= (null.high or 0.0), regime)
        alt = compare_paired(rb, ra)
        delta = DELTAS[regime]
        tally.add("power", (alt.p_value or 1.0) < 0.05, regime)
        tally.add("coverD", (alt.low or 0.0) <= delta <= (alt.high or 0.0), regime)

        mu = a / (a + b)
        rate = Rate.clustered(ra.values())
        tally.add("rate", rate.low <= mu <= rate.high, regime)
        if reps > 1:
            top = pass_k_table(ra)[-1]
            at = 1 - beta_moment(b, a, reps)
            hat = beta_moment(a, b, reps)
            tally.add("pass@R", top.pass_at_low <= at <= top.pass_at_high, regime)
            tally.add("pass^R", top.pass_hat_low <= hat <= top.pass_hat_high, regime)
            se = clustered_se([[float(x) for x in row] for row in xa]) or 0.0
            m = float(xa.mean())
            tally.add("normal", max(0.0, m - 1.96 * se) <= mu <= min(1.0, m + 1.96 * se), regime)
            tally.add("boot_fpr", _bootstrap_p(xa.mean(axis=1) - xa2.mean(axis=1), rng) < 0.05, regime)
    return tally


DELTAS = {name: true_difference(a, b) for name, (a, b) in REGIMES.items()}


def run(sizes: list[int], reps: list[int], cohorts: int, workers: int, seed: int) -> dict[tuple[int, int], Tally]:
    chunk = max(30, cohorts // (4 * max(1, workers)) // 3 * 3)
    jobs = []
    for t in sizes:
        for r in reps:
            done = 0
            while done < cohorts:
                n = min(chunk, cohorts - done)
                jobs.append((t, r, n, done, seed * 1_000_003 + t * 101 + r * 7 + done))
                done += n
    results: dict[tuple[int, int], Tally] = {}
    with multiprocessing.Pool(workers) as pool:
        for job, tally in zip(jobs, pool.imap(simulate, jobs), strict=True):
            results.setdefault((job[0], job[1]), Tally()).merge(tally)
    return results


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def report(results: dict[tuple[int, int], Tally], cohorts: int) -> list[str]:
    cols = list(COLUMNS)
    header = ["tasks", "reps", "weak", *cols]
    rows = []
    misses = []
    for (t, r), tally in sorted(results.items()):
        weak = t < WEAK_TASKS
        rows.append([str(t), str(r), "yes" if weak else "no", *(_fmt(tally.rate(c)) for c in cols)])
        for c, (op, target) in TARGETS.items():
            value = tally.rate(c)
            if value is None:
                continue
            missed = value > target if op == "<=" else value < target
            if missed:
                flag = " - flagged weak" if weak else " - NOT flagged weak"
                what = f"{c} = {100 * value:.1f}% (target {op} {100 * target:.1f}%)"
                misses.append(f"  {t} tasks x {r} reps: {what}{flag}")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("")
    lines.append(f"{cohorts} cohorts per row; rates in %. Columns:")
    lines += [f"  {c:8} {what}" for c, what in COLUMNS.items()]
    lines.append("Methods: 1 rep: McNemar exact + Tango score interval, Wilson rate; >1 rep: exact sign-flip")
    lines.append("         + t(T-1) interval, cluster-robust score interval with t(G-1), pass@k/pass^k score")
    lines.append("         intervals (the report's own functions, pytest_maka.core.stats).")
    lines.append("True differences: " + ", ".join(f"{k} {100 * v:+.2f} pp" for k, v in DELTAS.items()))
    lines.append("")
    lines.append("Worst difficulty regime per row (the targets are checked on the pooled figures above):")
    target_cols = list(TARGETS)
    wrows = []
    for (t, r), tally in sorted(results.items()):
        cells = []
        for c in target_cols:
            w = tally.worst(c, higher_is_better=TARGETS[c][0] == ">=")
            cells.append("-" if w is None else f"{100 * w[1]:.1f} {w[0]}")
        wrows.append([str(t), str(r), *cells])
    wheader = ["tasks", "reps", *target_cols]
    wwidths = [max(len(row[i]) for row in (wheader, *wrows)) for i in range(len(wheader))]
    lines.append(" | ".join(h.rjust(w) for h, w in zip(wheader, wwidths, strict=True)))
    lines += [" | ".join(v.rjust(w) for v, w in zip(row, wwidths, strict=True)) for row in wrows]
    lines.append("")
    lines.append("Targets missed:" if misses else "Targets met at every size (FPR <= 5.5%, coverage >= 94%).")
    lines += misses
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=4000, help="cohorts per (tasks, reps) (default 4000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="5,10,30,100", help="task counts (default 5,10,30,100)")
    parser.add_argument("--reps", default="1,3,5", help="repetitions (default 1,3,5)")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    reps = [int(x) for x in args.reps.split(",")]
    started = time.perf_counter()
    results = run(sizes, reps, args.cohorts, args.workers, args.seed)
    for line in report(results, args.cohorts):
        print(line)
    cpu = sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    print(f"wall {time.perf_counter() - started:.1f}s on {args.workers} worker(s), cpu {cpu:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
