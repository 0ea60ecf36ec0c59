"""Calibration of the report's statistics by simulation: false positives, coverage and power, worst case per size.

Simulated cohorts (seeded) of ``T`` tasks x ``R`` repetitions, in scenarios that each stress
one part of the report. Every figure is computed by the report's own functions
(``pytest_maka.core.stats``); the truth is known from the simulation.

- ``base``: per-task success probabilities from three difficulty regimes (mixed Beta(0.5, 0.5),
  hard Beta(0.7, 2.5), easy Beta(2.5, 0.7), cycled); A and A' identical, B better by +1 logit.
- ``rare``: rare successes, Beta(0.25, 5) (mean 4.8%): rates, pass@R and pass^R near 0.
- ``skewed``: B better by +4 logits on 15% of the tasks only: skewed per-task differences.
- ``lost``: every row lost with probability 0.25 on each side: unequal repetitions (what
  ``maka compare`` of two runs produces).
- ``budget``: A' is A's twin, but half of A's failures end in ``budget_exhausted`` (outside the
  official rows): the official comparison rewards running out of budget, the strict one not.
- ``partial``: partial credit: scores in [0, 1] around a per-task mean from Beta(2, 2); B's
  mean higher by 0.1 (clipped): the mean-score interval and the paired score test.

Columns (rates in %, over cohorts): ``fpr`` test p < 0.05 with identical subjects; ``cover0``
the paired interval contains 0 then; ``power`` p < 0.05 with B better; ``coverD`` the interval
contains the true difference; ``rate`` the official rate interval (and in ``budget`` the
strict one) contains the true rate; ``pass@R`` / ``pass^R`` likewise; ``agree`` p < 0.05
exactly when the interval excludes 0. Every target (fpr <= 5.5%, coverage >= 94%) is checked
in the first table on the scenarios the report flags weak in at most half the cohorts (over
all their cohorts: conditioning on a data-dependent flag would bias the figure); ``weak%`` is
the share it flags.

    python bench/calibration.py [--cohorts 1000] [--workers 2] [--sizes 5,10,20,30,50,100] [--reps 1,3,5]

Figures only: the first table is the worst case per size over every scenario and regime.
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

from pytest_maka.core.stats import (
    WEAK_TASKS,
    PairedComparison,
    Rate,
    compare_paired,
    compare_scores,
    pass_k_table,
    score_mean,
)

REGIMES: dict[str, tuple[float, float]] = {"mixed": (0.5, 0.5), "hard": (0.7, 2.5), "easy": (2.5, 0.7)}
RARE = (0.25, 5.0)
SHIFT = 1.0  # B's advantage on the logit scale (base, rare)
SKEW_SHARE, SKEW_SHIFT = 0.15, 4.0
LOST = 0.25
SCORE_SHIFT = 0.1
FPR_TARGET = 0.055
COVERAGE_TARGET = 0.94
SCENARIOS = ("base", "rare", "skewed", "lost", "budget", "partial")
#: The official view when the subject causes budget exhaustion: reported apart from the worst cases.
OFFICIAL_UNDER_BUDGET = "budget/official"

#: Column -> (comparison, target) for the checks; ``None``: a figure without a target.
COLUMNS: dict[str, tuple[str, float] | None] = {
    "fpr": ("<=", FPR_TARGET),
    "cover0": (">=", COVERAGE_TARGET),
    "power": None,
    "coverD": (">=", COVERAGE_TARGET),
    "rate": (">=", COVERAGE_TARGET),
    "pass@R": (">=", COVERAGE_TARGET),
    "pass^R": (">=", COVERAGE_TARGET),
    "agree": (">=", 1.0),
}


def _expit_shift(p: np.ndarray, shift: float) -> np.ndarray:
    odds = p / np.clip(1 - p, 1e-12, None) * math.exp(shift)
    return np.where(p >= 1, 1.0, odds / (1 + odds))


def _delta(a: float, b: float, shift: float, share: float = 1.0) -> float:
    p = np.random.default_rng(7).beta(a, b, 2_000_000)
    return share * float(np.mean(_expit_shift(p, shift) - p))


def _score_delta() -> float:
    mu = np.random.default_rng(7).beta(2, 2, 2_000_000)
    return float(np.mean(np.clip(mu + SCORE_SHIFT, 0, 1) - mu))


DELTAS = {name: _delta(a, b, SHIFT) for name, (a, b) in REGIMES.items()}
DELTAS["rare"] = _delta(*RARE, SHIFT)
DELTAS["skewed"] = _delta(*REGIMES["mixed"], SKEW_SHIFT, SKEW_SHARE)
DELTAS["partial"] = _score_delta()


def beta_moment(a: float, b: float, k: int) -> float:
    """``E[p^k]`` for ``p ~ Beta(a, b)``."""
    return math.prod((a + i) / (a + b + i) for i in range(k))


@dataclass
class Tally:
    """Hits and trials per (group, column); group is ``scenario/regime`` and ``weak`` or ``ok``."""

    cells: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)

    def add(self, group: str, weak: bool, column: str, hit: bool) -> None:
        cell = self.cells.setdefault((group, "weak" if weak else "ok", column), [0, 0])
        cell[0] += int(hit)
        cell[1] += 1

    def merge(self, other: Tally) -> None:
        for key, (h, n) in other.cells.items():
            cell = self.cells.setdefault(key, [0, 0])
            cell[0] += h
            cell[1] += n

    def rate(self, column: str, group: str | None = None, only_ok: bool = True) -> tuple[float, int] | None:
        hits = trials = 0
        for (g, w, c), (h, n) in self.cells.items():
            if c == column and (group is None or g == group) and (w == "ok" or not only_ok):
                hits, trials = hits + h, trials + n
        return (hits / trials, trials) if trials else None

    def groups(self) -> list[str]:
        return sorted({g for g, _, _ in self.cells})

    def weak_share(self, group: str) -> float | None:
        ok = sum(n for (g, w, c), (_, n) in self.cells.items() if g == group and c == "fpr" and w == "ok")
        weak = sum(n for (g, w, c), (_, n) in self.cells.items() if g == group and c == "fpr" and w == "weak")
        return weak / (ok + weak) if ok + weak else None


def _rows(outcomes: np.ndarray, keep: np.ndarray | None = None) -> dict[str, list[bool]]:
    if keep is None:
        return {f"t{i}": [bool(x) for x in row] for i, row in enumerate(outcomes)}
    return {
        f"t{i}": [bool(x) for x, k in zip(row, ks, strict=True) if k]
        for i, (row, ks) in enumerate(zip(outcomes, keep, strict=True))
    }


def _paired_checks(
    tally: Tally, group: str, null: PairedComparison, alt: PairedComparison | None, delta: float
) -> None:
    if null.p_value is None or null.low is None or null.high is None:
        return
    weak = null.weak
    tally.add(group, weak, "fpr", null.p_value < 0.05)
    tally.add(group, weak, "cover0", null.low <= 0.0 <= null.high)
    tally.add(group, weak, "agree", (null.p_value < 0.05) == (null.low > 0 or null.high < 0))
    if alt is None or alt.p_value is None or alt.low is None or alt.high is None:
        return
    tally.add(group, alt.weak, "power", alt.p_value < 0.05)
    tally.add(group, alt.weak, "coverD", alt.low <= delta <= alt.high)
    tally.add(group, alt.weak, "agree", (alt.p_value < 0.05) == (alt.low > 0 or alt.high < 0))


def _rate_checks(tally: Tally, group: str, rows: dict[str, list[bool]], a: float, b: float, reps: int) -> None:
    mu = a / (a + b)
    rate = Rate.clustered(rows.values())
    tally.add(group, rate.weak is not None or len(rows) < WEAK_TASKS, "rate", rate.low <= mu <= rate.high)
    if reps > 1:
        top = pass_k_table(rows)[-1]
        if top.k == reps:
            few = len(rows) < WEAK_TASKS
            at, hat = 1 - beta_moment(b, a, reps), beta_moment(a, b, reps)
            tally.add(group, few or top.pass_at_weak, "pass@R", top.pass_at_low <= at <= top.pass_at_high)
            tally.add(group, few or top.pass_hat_weak, "pass^R", top.pass_hat_low <= hat <= top.pass_hat_high)


def simulate(job: tuple[str, int, int, int, int, int]) -> Tally:
    """``cohorts`` cohorts of one scenario at ``tasks`` x ``reps`` (regimes cycled from ``start``), seeded."""
    scenario, tasks, reps, cohorts, start, seed = job
    rng = np.random.default_rng(seed)
    tally = Tally()
    names = list(REGIMES)
    for i in range(cohorts):
        regime = names[(start + i) % len(names)]
        a, b = RARE if scenario == "rare" else REGIMES["mixed" if scenario in ("skewed", "budget") else regime]
        group = scenario if scenario in ("rare", "skewed", "budget", "partial") else f"{scenario}/{regime}"
        p = rng.beta(a, b, tasks)
        xa = rng.random((tasks, reps)) < p[:, None]
        xa2 = rng.random((tasks, reps)) < p[:, None]
        if scenario == "partial":
            _partial(tally, rng, tasks, reps)
            continue
        if scenario == "skewed":
            lucky = rng.random(tasks) < SKEW_SHARE
            pb = np.where(lucky, _expit_shift(p, SKEW_SHIFT), p)
        else:
            pb = _expit_shift(p, SHIFT)
        xb = rng.random((tasks, reps)) < pb[:, None]
        if scenario == "lost":
            ka, ka2, kb = (rng.random((tasks, reps)) >= LOST for _ in range(3))
            ra, ra2, rb = _rows(xa, ka), _rows(xa2, ka2), _rows(xb, kb)
        else:
            ra, ra2, rb = _rows(xa), _rows(xa2), _rows(xb)
        delta = DELTAS["rare" if scenario == "rare" else "skewed" if scenario == "skewed" else regime]
        if scenario == "budget":
            _budget(tally, rng, xa, xa2, a, b)
            continue
        _paired_checks(tally, group, compare_paired(ra, ra2), compare_paired(rb, ra), delta)
        if scenario in ("base", "rare"):
            _rate_checks(tally, group, ra, a, b, reps)
    return tally


def _budget(tally: Tally, rng: np.random.Generator, xa: np.ndarray, xa2: np.ndarray, a: float, b: float) -> None:
    """A's failures end in budget exhaustion half the time (not official); A' is an identical twin."""
    budget = (~xa) & (rng.random(xa.shape) < 0.5)
    official = _rows(xa, ~budget)
    strict = _rows(xa)
    twin = _rows(xa2)
    null = compare_paired(official, twin)
    _paired_checks(tally, "budget/official", null, None, 0.0)
    _paired_checks(tally, "budget/strict", compare_paired(strict, twin), None, 0.0)
    mu = a / (a + b)
    off = Rate.clustered([v for v in official.values() if v])
    every = Rate.clustered(strict.values())
    tally.add("budget/official", off.weak is not None or len(official) < WEAK_TASKS, "rate", off.low <= mu <= off.high)
    tally.add(
        "budget/strict", every.weak is not None or len(strict) < WEAK_TASKS, "rate", every.low <= mu <= every.high
    )


def _partial(tally: Tally, rng: np.random.Generator, tasks: int, reps: int) -> None:
    """Scores around a per-task mean; the mean-score interval, and the paired score test."""
    mu = rng.beta(2, 2, tasks)
    mu_b = np.clip(mu + SCORE_SHIFT, 0, 1)

    def draw(m: np.ndarray) -> dict[str, list[float]]:
        k = 6.0
        alpha, beta = np.clip(m * k, 1e-3, None), np.clip((1 - m) * k, 1e-3, None)
        scores = rng.beta(alpha[:, None], beta[:, None], (tasks, reps))
        return {f"t{i}": [float(x) for x in row] for i, row in enumerate(scores)}

    sa, sa2, sb = draw(mu), draw(mu), draw(mu_b)
    _paired_checks(tally, "partial", compare_scores(sa, sa2), compare_scores(sb, sa), DELTAS["partial"])
    mean = score_mean(list(sa.values()))
    if mean is not None:
        tally.add("partial", tasks < WEAK_TASKS, "rate", mean.low <= 0.5 <= mean.high)


def run(
    scenarios: list[str], sizes: list[int], reps: list[int], cohorts: int, workers: int, seed: int
) -> dict[tuple[int, int], Tally]:
    chunk = max(30, cohorts // (4 * max(1, workers)) // 3 * 3)
    jobs = []
    for s_index, scenario in enumerate(scenarios):
        for t in sizes:
            for r in reps:
                done = 0
                while done < cohorts:
                    n = min(chunk, cohorts - done)
                    jobs.append((scenario, t, r, n, done, seed * 1_000_003 + s_index * 7919 + t * 101 + r * 7 + done))
                    done += n
    results: dict[tuple[int, int], Tally] = {}
    with multiprocessing.Pool(workers) as pool:
        for job, tally in zip(jobs, pool.imap(simulate, jobs), strict=True):
            results.setdefault((job[1], job[2]), Tally()).merge(tally)
    return results


def _pct(x: tuple[float, int] | None) -> str:
    return "-" if x is None else f"{100 * x[0]:.1f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    return lines


def flagged_share(tally: Tally, column: str, group: str) -> float | None:
    """The share of a group's cohorts whose ``column`` the report flags as weak."""
    ok = tally.cells.get((group, "ok", column), [0, 0])[1]
    weak = tally.cells.get((group, "weak", column), [0, 0])[1]
    return weak / (ok + weak) if ok + weak else None


def worst(tally: Tally, column: str) -> tuple[str, float, int] | None:
    """The worst group for ``column`` among those the report usually does not flag (at most half its cohorts).

    The figure is over every cohort of the group, flagged or not: conditioning on a flag that
    depends on the data (at most 3 successes, fewer than 10 differing tasks) would select
    unusual cohorts and bias the figure. At least 100 cohorts per group.
    """
    target = COLUMNS[column]
    found = []
    for group in tally.groups():
        if group == OFFICIAL_UNDER_BUDGET:
            continue  # shown apart: the bias the strict view exists for, not a miss of the official estimand
        share = flagged_share(tally, column, group)
        r = tally.rate(column, group, only_ok=False)
        if r is not None and r[1] >= 100 and share is not None and share <= 0.5:
            found.append((group, r[0], r[1]))
    if not found:
        return None
    higher_is_better = target is None or target[0] == ">="
    return min(found, key=lambda x: x[1]) if higher_is_better else max(found, key=lambda x: x[1])


def report(results: dict[tuple[int, int], Tally], cohorts: int) -> list[str]:
    cols = list(COLUMNS)
    rows, misses = [], []
    for (t, r), tally in sorted(results.items()):
        cells = []
        for c in cols:
            w = worst(tally, c)
            cells.append("-" if w is None else f"{100 * w[1]:.1f} {w[0]}")
            target = COLUMNS[c]
            if w is not None and target is not None and c != "power":
                op, value = target
                if (w[1] > value) if op == "<=" else (w[1] < value - 1e-12):
                    misses.append(f"  {t} tasks x {r} reps: {c} = {100 * w[1]:.1f}% in {w[0]} ({w[2]} cohorts)")
        rows.append([str(t), str(r), "yes" if t < WEAK_TASKS else "no", *cells])
    lines = ["Worst case per size over the scenarios and regimes the report flags weak in at most half the cohorts:"]
    lines += _table(["tasks", "reps", "weak", *cols], rows)
    lines.append("")
    lines.append(f"{cohorts} cohorts per row and scenario; rates in %.")
    lines.append("True differences: " + ", ".join(f"{k} {100 * v:+.2f} pp" for k, v in DELTAS.items()))
    lines.append("")
    lines.append("Per scenario (all cohorts, then the share flagged weak):")
    header = ["scenario", "tasks", "reps", "weak%", *cols]
    srows = []
    for (t, r), tally in sorted(results.items()):
        for group in tally.groups():
            share = tally.weak_share(group)
            srows.append(
                [group, str(t), str(r), "-" if share is None else f"{100 * share:.0f}"]
                + [_pct(tally.rate(c, group, only_ok=False)) for c in cols]
            )
    srows.sort(key=lambda row: (row[0], int(row[1]), int(row[2])))
    lines += _table(header, srows)
    budget = [
        f"  {t} x {r}: fpr {_pct(tally.rate('fpr', OFFICIAL_UNDER_BUDGET, only_ok=False))}, "
        f"rate coverage {_pct(tally.rate('rate', OFFICIAL_UNDER_BUDGET, only_ok=False))}"
        for (t, r), tally in sorted(results.items())
        if tally.rate("fpr", OFFICIAL_UNDER_BUDGET, only_ok=False) is not None
    ]
    if budget:
        lines += [
            "",
            "Official view with subject-caused budget exhaustion (identical subjects; the strict view fixes it):",
        ]
        lines += budget
    lines.append("")
    lines.append(
        "Targets missed where mostly not flagged weak:" if misses else "Targets met wherever mostly not flagged."
    )
    lines += misses
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cohorts", type=int, default=1000, help="cohorts per (scenario, tasks, reps) (default 1000)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="5,10,20,30,50,100", help="task counts (default 5,10,20,30,50,100)")
    parser.add_argument("--reps", default="1,3,5", help="repetitions (default 1,3,5)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"default {','.join(SCENARIOS)}")
    parser.add_argument("--seed", type=int, default=26)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    reps = [int(x) for x in args.reps.split(",")]
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown:
        parser.error(f"--scenarios: unknown {', '.join(unknown)} (expected some of {', '.join(SCENARIOS)})")
    started = time.perf_counter()
    results = run(scenarios, sizes, reps, args.cohorts, args.workers, args.seed)
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
