"""Partial credit: the scores of official rows, their mean per subject, and whether a cohort has any.

A cell passes only at reward 1, so a subject scoring 0.9 everywhere shows a 0% pass rate.
When some official row scored strictly between 0 and 1 (multi-reward or multi-step tasks),
the report also shows each subject's mean score with a cluster-robust interval and the
paired score differences (:func:`.paired.compare_scores`), beside the pass rates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..record_model import AttemptRecord
from ..taxonomy import OFFICIAL, Status
from .paired import exact_score
from .rates import bounded_mean_interval, clustered_se
from .tdist import t95


def status_of(record: AttemptRecord | Mapping[str, Any]) -> Status:
    """The taxonomy class of a record; an unknown string is an error, never a guess."""
    if isinstance(record, AttemptRecord):
        return record.status
    try:
        return Status(record["status"])
    except (KeyError, ValueError):
        raise ValueError(
            f"record {record.get('cell_id', '?')!r} has no valid taxonomy status: {record.get('status')!r}"
        ) from None


@dataclass(frozen=True)
class ScoreMean:
    """The mean score of a subject's official rows (partial credit), with a cluster-robust 95% interval.

    Pooled over rows like the headline pass rate; the interval treats a task's repetitions as
    one cluster (score interval with the effective sample size and t(tasks - 1) when every
    score is in [0, 1], else ``mean +/- t(tasks - 1) * se``).
    """

    mean: float
    low: float
    high: float
    rows: int
    tasks: int

    @property
    def text(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def score_mean(per_task: Sequence[Sequence[float]]) -> ScoreMean | None:
    """The pooled mean score and its interval, or None without a scored row."""
    groups = [list(g) for g in per_task if len(g)]
    rows = sum(len(g) for g in groups)
    if not rows:
        return None
    mean = sum(sum(g) for g in groups) / rows
    se = clustered_se(groups)
    # no spread (decided on exact fractions): every task has the same mean score
    spread = len({sum((exact_score(x) for x in g), Fraction(0)) / len(g) for g in groups}) > 1
    if all(0.0 <= x <= 1.0 for g in groups for x in g):
        low, high = bounded_mean_interval(mean, se if spread else None, len(groups), cap=rows)
    elif se is None or not spread:
        low, high = (min(min(g) for g in groups), max(max(g) for g in groups))
    else:
        half = t95(len(groups) - 1) * se
        low, high = mean - half, mean + half
    return ScoreMean(mean, low, high, rows, len(groups))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def scores_by_task(records: Iterable[AttemptRecord]) -> dict[str, list[float]]:
    """task -> the score of each official row (a row without a score counts its pass as 1, else 0)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r.status in OFFICIAL:
            score = _number(r.score)
            if score is None:
                score = 1.0 if r.status is Status.AGENT_SUCCESS else 0.0
            out.setdefault(r.task, []).append((r.repetition, score))
    return {t: [x for _, x in sorted(v, key=lambda x: x[0])] for t, v in sorted(out.items())}


def partial_credit(records: Iterable[AttemptRecord]) -> bool:
    """Whether some official row scored strictly between 0 and 1 (multi-reward, multi-step tasks)."""
    for r in records:
        score = _number(r.score)
        if score is not None and 0.0 < score < 1.0 and r.status in OFFICIAL:
            return True
    return False
