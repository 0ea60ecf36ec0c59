"""What ``maka compare`` computes: the paired change of each subject between two runs (views in :mod:`.compare`).

Subjects are matched by name and tasks by id (a changed subject definition has new cell
keys, but it is the same subject to the reader). For each subject present in both runs the
change ``B - A`` is paired by task (:func:`core.stats.compare_paired`), and every task
whose success rate moved is listed. Testing several subjects at once is a family: Holm
adjusts the p-values of the non-reference subjects (:func:`core.stats.adjust_family`);
oracle and nop keep theirs as a check of the tasks. The same change is made on every row
(strict) and, when some task gives partial credit in either run, on the mean scores
(:func:`core.stats.compare_scores`), each view adjusted on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.record_model import AttemptRecord, as_records
from ..core.stats import (
    REFERENCE_KINDS,
    PairedComparison,
    ScoreMean,
    SubjectSummary,
    adjust_family,
    compare_paired,
    compare_scores,
    graded_by_task,
    partial_credit,
    score_mean,
    scores_by_task,
    strict_by_task,
    summarize,
)
from .taint import tainted_by_subject


@dataclass(frozen=True)
class TaskChange:
    """One task of one subject in both runs."""

    task: str
    rate_a: float | None
    rate_b: float | None
    statuses_a: tuple[str, ...]
    statuses_b: tuple[str, ...]

    @property
    def change(self) -> float | None:
        return None if self.rate_a is None or self.rate_b is None else self.rate_b - self.rate_a


@dataclass(frozen=True)
class ScoreChange:
    """A subject's mean score in each run and the paired change of its per-task mean scores (partial credit)."""

    a: ScoreMean | None
    b: ScoreMean | None
    paired: PairedComparison


@dataclass(frozen=True)
class SubjectChange:
    """A subject in run A and run B, and the paired change B - A over shared tasks."""

    subject: str
    a: SubjectSummary
    b: SubjectSummary
    paired: PairedComparison
    tasks: tuple[TaskChange, ...]
    #: The same change on every row, any non-pass = 0 (budget exhausted included).
    strict: PairedComparison | None = None
    #: Passes in each run that depended on code the subject changed outside the workdir.
    tainted_a: int = 0
    tainted_b: int = 0
    #: The change of mean scores, when some task gives partial credit in either run (else None).
    score: ScoreChange | None = None

    @property
    def moved(self) -> list[TaskChange]:
        """Tasks whose success rate changed, largest change first."""
        rows = [t for t in self.tasks if t.change]
        return sorted(rows, key=lambda t: (-abs(t.change or 0.0), t.task))


@dataclass(frozen=True)
class RunComparison:
    label_a: str
    label_b: str
    subjects: tuple[SubjectChange, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    cells_a: int
    cells_b: int

    @property
    def partial_credit(self) -> bool:
        """Whether some official row of either run scored strictly between 0 and 1 (score changes shown)."""
        return any(s.score is not None for s in self.subjects)


def _by_subject(records: Sequence[AttemptRecord]) -> dict[str, list[AttemptRecord]]:
    out: dict[str, list[AttemptRecord]] = {}
    for r in records:
        out.setdefault(r.subject, []).append(r)
    return out


def _statuses(records: Sequence[AttemptRecord]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for r in records:
        out.setdefault(r.task, []).append((r.repetition, r.status.value))
    return {t: tuple(s for _, s in sorted(v)) for t, v in out.items()}


def _changes(
    names: Sequence[str],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    test: Callable[..., PairedComparison],
    references: set[str],
    labels: tuple[str, str],
) -> list[PairedComparison]:
    """``test(after, before)`` per subject, Holm-adjusted over the non-reference subjects, labelled B over A."""
    family = adjust_family([test(after[n], before[n], names=(n, n)) for n in names], references.__contains__)
    return [replace(c, a=labels[1], b=labels[0]) for c in family]


def compare_runs(
    a: Sequence[AttemptRecord | Mapping[str, Any]],
    b: Sequence[AttemptRecord | Mapping[str, Any]],
    *,
    labels: tuple[str, str] = ("A", "B"),
) -> RunComparison:
    """Compare two runs' cell records subject by subject (paired by task)."""
    a, b = as_records(a), as_records(b)
    sa, sb = summarize(a, compare=False), summarize(b, compare=False)
    by_a, by_b = _by_subject(a), _by_subject(b)
    summaries_a = {s.subject: s for s in sa.subjects}
    summaries_b = {s.subject: s for s in sb.subjects}
    names = sorted(by_a.keys() & by_b.keys())
    references = {n for n in names if REFERENCE_KINDS & {summaries_a[n].kind, summaries_b[n].kind}}
    graded_a = {n: graded_by_task(by_a[n]) for n in names}
    graded_b = {n: graded_by_task(by_b[n]) for n in names}
    family = _changes(names, graded_a, graded_b, compare_paired, references, labels)
    stricts = _changes(
        names,
        {n: strict_by_task(by_a[n]) for n in names},
        {n: strict_by_task(by_b[n]) for n in names},
        compare_paired,
        references,
        labels,
    )
    scores: list[ScoreChange | None] = [None] * len(names)
    if partial_credit(a) or partial_credit(b):
        scored_a = {n: scores_by_task(by_a[n]) for n in names}
        scored_b = {n: scores_by_task(by_b[n]) for n in names}
        paired = _changes(names, scored_a, scored_b, compare_scores, references, labels)
        scores = [
            ScoreChange(score_mean(list(scored_a[n].values())), score_mean(list(scored_b[n].values())), c)
            for n, c in zip(names, paired, strict=True)
        ]
    changes = []
    for name, paired, strict, score in zip(names, family, stricts, scores, strict=True):
        ga, gb = graded_a[name], graded_b[name]
        st_a, st_b = _statuses(by_a[name]), _statuses(by_b[name])
        tasks = tuple(
            TaskChange(
                task=t,
                rate_a=sum(ga[t]) / len(ga[t]) if ga.get(t) else None,
                rate_b=sum(gb[t]) / len(gb[t]) if gb.get(t) else None,
                statuses_a=st_a.get(t, ()),
                statuses_b=st_b.get(t, ()),
            )
            for t in sorted(st_a.keys() | st_b.keys())
        )
        taint = (tainted_by_subject(by_a[name]).get(name, 0), tainted_by_subject(by_b[name]).get(name, 0))
        changes.append(
            SubjectChange(name, summaries_a[name], summaries_b[name], paired, tasks, strict, *taint, score=score)
        )
    return RunComparison(
        label_a=labels[0],
        label_b=labels[1],
        subjects=tuple(changes),
        only_a=tuple(sorted(by_a.keys() - by_b.keys())),
        only_b=tuple(sorted(by_b.keys() - by_a.keys())),
        cells_a=len(a),
        cells_b=len(b),
    )
