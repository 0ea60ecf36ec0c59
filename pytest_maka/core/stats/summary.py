"""Per-subject and per-cohort summaries of cell records, and task health flags.

Everything here takes cell records (typed, :class:`core.record_model.AttemptRecord`; the entry
points also take the JSON dicts :func:`core.records.cell_record` builds, and type them) and
returns frozen dataclasses. No I/O, no pytest, no rendering beyond the one canonical way to
state a rate with its denominator (``3/4 = 75.0%``), so every view words it identically.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from ..record_model import AttemptRecord, as_records
from ..taxonomy import OFFICIAL, Status
from .describe import Distribution, Spend, spend_of
from .paired import PairedComparison, adjust_family, compare_paired, compare_scores
from .passk import KEstimate, TaskRate, pass_k_table
from .rates import Rate
from .scores import ScoreMean, partial_credit, score_mean, scores_by_task
from .variance import VarianceSplit, variance_split

#: Subject kinds that are references (no model behind them): used by the task-health checks.
NOP_KIND = "nop"
ORACLE_KIND = "oracle"
REFERENCE_KINDS: frozenset[str] = frozenset({NOP_KIND, ORACLE_KIND})


#: Which rows a comparison is made on: official rows, every row (non-pass = 0), or mean scores.
View = Literal["official", "strict", "score"]
#: The view of the rows that ranks the subjects (the headline says so in every view).
RANKING: View = "official"


@dataclass(frozen=True)
class SubjectSummary:
    """The headline numbers of one subject over its cells."""

    subject: str
    kind: str | None
    cells: int
    #: Official rows only (agent_success / agent_failure / agent_incomplete).
    official: Rate
    #: Every cell, any non-pass counts as 0.
    strict: Rate
    #: Cells per taxonomy class, every class present (zeros included), in taxonomy order.
    counts: dict[Status, int]
    spend: Spend
    durations: Distribution | None
    #: The most repetitions any task has for this subject (1 without repetitions).
    repetitions: int
    #: pass@k and pass^k for k = 1 .. repetitions (official rows).
    pass_k: tuple[KEstimate, ...]
    #: task -> this subject's success rate on it.
    task_rates: dict[str, TaskRate]
    #: Tasks with at least one official (graded) row: the sample behind the official figures.
    graded_tasks: int = 0
    #: Mean score of the official rows, when some task gives partial credit (else None).
    score: ScoreMean | None = None
    #: Between- vs within-task variance, with repetitions (else None).
    variance: VarianceSplit | None = None

    @property
    def non_official(self) -> int:
        """Cells outside the official denominator (harness-side, budget, aborted)."""
        return self.cells - self.official.total

    @property
    def cost_usd(self) -> float | None:
        """Total cost over the cells that reported one (``cost_known`` of them)."""
        return self.spend.cost_usd

    @property
    def cost_known(self) -> int:
        return self.spend.cost_known

    @property
    def input_tokens(self) -> int | None:
        return self.spend.input_tokens

    @property
    def output_tokens(self) -> int | None:
        return self.spend.output_tokens

    @property
    def tokens(self) -> int | None:
        """Input + output tokens where known, None when neither is known."""
        return self.spend.tokens

    @property
    def mean_duration_s(self) -> float | None:
        return None if self.durations is None else self.durations.mean


def graded_by_task(records: Iterable[AttemptRecord]) -> dict[str, list[bool]]:
    """task -> pass/fail of each official row, ordered by repetition (tasks without one are absent)."""
    out: dict[str, list[tuple[int, bool]]] = {}
    for r in records:
        if r.status in OFFICIAL:
            out.setdefault(r.task, []).append((r.repetition, r.status is Status.AGENT_SUCCESS))
    return {t: [ok for _, ok in sorted(v, key=lambda x: x[0])] for t, v in sorted(out.items())}


def strict_by_task(records: Iterable[AttemptRecord]) -> dict[str, list[bool]]:
    """task -> pass/fail of every row (any non-pass is a fail), ordered by repetition: the strict view."""
    out: dict[str, list[tuple[int, bool]]] = {}
    for r in records:
        out.setdefault(r.task, []).append((r.repetition, r.status is Status.AGENT_SUCCESS))
    return {t: [ok for _, ok in sorted(v, key=lambda x: x[0])] for t, v in sorted(out.items())}


def summarize_subject(
    subject: str, records: Sequence[AttemptRecord | Mapping[str, Any]], *, scores: bool | None = None
) -> SubjectSummary:
    """Summarise the cell records of one subject.

    ``scores``: whether to add the mean score (partial credit); None decides from these records.
    """
    records = as_records(records)
    counts = {s: 0 for s in Status}
    by_task: dict[str, list[Status]] = {}
    for r in records:
        counts[r.status] += 1
        by_task.setdefault(r.task, []).append(r.status)
    graded = graded_by_task(records)
    passes = counts[Status.AGENT_SUCCESS]
    kinds = {r.subject_kind for r in records if r.subject_kind}
    task_rates = {
        t: TaskRate(t, sum(1 for s in v if s is Status.AGENT_SUCCESS), sum(1 for s in v if s in OFFICIAL), len(v))
        for t, v in sorted(by_task.items())
    }
    return SubjectSummary(
        subject=subject,
        kind=next(iter(kinds)) if len(kinds) == 1 else None,
        cells=len(records),
        official=Rate.clustered(graded.values()),
        strict=Rate.clustered([[s is Status.AGENT_SUCCESS for s in v] for v in by_task.values()]),
        counts=counts,
        spend=spend_of([r.usage for r in records], passes),
        durations=Distribution.of(r.duration_s for r in records),
        repetitions=max((len(v) for v in by_task.values()), default=0),
        pass_k=tuple(pass_k_table(graded)) if any(len(v) > 1 for v in graded.values()) else (),
        task_rates=task_rates,
        graded_tasks=len(graded),
        score=score_mean(list(scores_by_task(records).values()))
        if (partial_credit(records) if scores is None else scores)
        else None,
        variance=variance_split(list(graded.values())),
    )


class HealthFlag(StrEnum):
    """Signs that a task, not a subject, is the problem."""

    NOP_PASSES = "broken: passes with nop"
    ORACLE_FAILS = "broken: oracle fails"
    UNINFORMATIVE = "uninformative"


@dataclass(frozen=True)
class TaskHealth:
    """The flags raised for one task, each with a one-line reason."""

    task: str
    flags: tuple[HealthFlag, ...]
    reasons: dict[HealthFlag, str] = field(default_factory=dict)


def _ids(records: Sequence[AttemptRecord], limit: int = 5) -> str:
    ids = sorted(r.cell_id for r in records)
    return ", ".join(ids[:limit]) + (f", ... (+{len(ids) - limit})" if len(ids) > limit else "")


def task_health(records: Iterable[AttemptRecord | Mapping[str, Any]]) -> dict[str, TaskHealth]:
    """Flag tasks that look broken or that cannot tell subjects apart; only flagged tasks are returned.

    - ``broken: passes with nop``: a cell of a ``nop`` subject passed.
    - ``broken: oracle fails``: an official cell of an ``oracle`` subject did not pass.
    - ``uninformative``: over official rows of at least two non-reference subjects
      (reference kinds are excluded, since oracle passing and nop failing is their job),
      every row passed, or every row failed.
    """
    by_task: dict[str, list[AttemptRecord]] = {}
    for r in as_records(records):
        by_task.setdefault(r.task, []).append(r)
    out: dict[str, TaskHealth] = {}
    for task, rows in sorted(by_task.items()):
        reasons: dict[HealthFlag, str] = {}
        nop_passes = [r for r in rows if r.subject_kind == NOP_KIND and r.status is Status.AGENT_SUCCESS]
        if nop_passes:
            reasons[HealthFlag.NOP_PASSES] = f"{len(nop_passes)} nop cell(s) passed: {_ids(nop_passes)}"
        oracle_fails = [
            r
            for r in rows
            if r.subject_kind == ORACLE_KIND and r.status in OFFICIAL and r.status is not Status.AGENT_SUCCESS
        ]
        if oracle_fails:
            reasons[HealthFlag.ORACLE_FAILS] = f"{len(oracle_fails)} oracle cell(s) did not pass: {_ids(oracle_fails)}"
        graded = [r for r in rows if r.subject_kind not in REFERENCE_KINDS and r.status in OFFICIAL]
        subjects = {r.subject for r in graded}
        if len(subjects) >= 2:
            passed = {r.status is Status.AGENT_SUCCESS for r in graded}
            if passed == {True}:
                reasons[HealthFlag.UNINFORMATIVE] = f"every official row of {len(subjects)} subjects passed"
            elif passed == {False}:
                reasons[HealthFlag.UNINFORMATIVE] = f"every official row of {len(subjects)} subjects failed"
        if reasons:
            out[task] = TaskHealth(task=task, flags=tuple(reasons), reasons=reasons)
    return out


@dataclass(frozen=True)
class CohortSummary:
    """Everything the views need, computed once."""

    cells: int
    tasks: tuple[str, ...]
    subjects: tuple[SubjectSummary, ...]
    counts: dict[Status, int]
    health: dict[str, TaskHealth]
    #: task -> subject -> the cell records, ordered by repetition.
    grid: dict[str, dict[str, list[AttemptRecord]]]
    #: Every two subjects, A before B in name order, with Holm-adjusted p-values (official rows).
    comparisons: tuple[PairedComparison, ...] = ()
    #: The same pairs on every row, any non-pass = 0 (what the subject caused counts, budget included).
    strict_comparisons: tuple[PairedComparison, ...] = ()
    #: The same pairs on mean scores, when some task gives partial credit (else empty).
    score_comparisons: tuple[PairedComparison, ...] = ()
    #: Which view ranks the subjects: ``official`` (the strict one is shown beside it).
    ranking: View = RANKING

    @property
    def partial_credit(self) -> bool:
        return bool(self.score_comparisons) or any(s.score is not None for s in self.subjects)

    @property
    def weak(self) -> tuple[PairedComparison, ...]:
        """The comparisons on fewer than :data:`.power.WEAK_TASKS` shared tasks."""
        return tuple(c for c in self.comparisons if c.weak)

    def subject_names(self) -> list[str]:
        return [s.subject for s in self.subjects]

    def strict_of(self, c: PairedComparison) -> PairedComparison | None:
        """The strict-view comparison of the same pair (same order), or None."""
        return self.comparison(c.a, c.b, view="strict")

    def comparison(self, a: str, b: str, view: View = "official") -> PairedComparison | None:
        """A versus B (either order: the sign follows the arguments), or None; ``view``: official/strict/score."""
        pool = {"official": self.comparisons, "strict": self.strict_comparisons, "score": self.score_comparisons}[view]
        for c in pool:
            if (c.a, c.b) == (a, b):
                return c
            if (c.a, c.b) == (b, a):
                return flip(c)
        return None


def flip(c: PairedComparison) -> PairedComparison:
    """B versus A from A versus B."""

    def neg(x: float | None) -> float | None:
        return None if x is None else 0.0 - x  # never -0.0

    return replace(
        c,
        a=c.b,
        b=c.a,
        rate_a=c.rate_b,
        rate_b=c.rate_a,
        diff=neg(c.diff),
        low=neg(c.high),
        high=neg(c.low),
        wins_a=c.wins_b,
        wins_b=c.wins_a,
        only_a=c.only_b,
        only_b=c.only_a,
        won=c.lost,
        lost=c.won,
        power=None if c.power is None else replace(c.power, diff=-c.power.diff),
    )


def pairwise(
    by_subject: Mapping[str, Sequence[AttemptRecord]],
    references: frozenset[str] = frozenset(),
    view: View = "official",
) -> tuple[PairedComparison, ...]:
    """Paired comparisons of every two subjects on their shared tasks, in one ``view``.

    ``official``: official rows; ``strict``: every row, any non-pass = 0; ``score``: the mean
    score of official rows. Holm adjusts over the pairs of non-reference subjects within the
    view; a pair with a subject named in ``references`` (oracle, nop) keeps its raw p-value
    (:func:`.paired.adjust_family`).
    """
    names = sorted(by_subject)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    if view == "score":
        scored = {n: scores_by_task(by_subject[n]) for n in names}
        out = [compare_scores(scored[a], scored[b], names=(a, b)) for a, b in pairs]
    else:
        rows = strict_by_task if view == "strict" else graded_by_task
        graded = {n: rows(by_subject[n]) for n in names}
        out = [compare_paired(graded[a], graded[b], names=(a, b)) for a, b in pairs]
    return tuple(adjust_family(out, references.__contains__))


def summarize(records: Sequence[AttemptRecord | Mapping[str, Any]], *, compare: bool = True) -> CohortSummary:
    """Summarise a cohort's cell records: per subject, per class, per task (sorted by name), pairwise."""
    records = as_records(records)
    by_subject: dict[str, list[AttemptRecord]] = {}
    grid: dict[str, dict[str, list[AttemptRecord]]] = {}
    counts = {s: 0 for s in Status}
    for r in records:
        counts[r.status] += 1
        by_subject.setdefault(r.subject, []).append(r)
        grid.setdefault(r.task, {}).setdefault(r.subject, []).append(r)
    for row in grid.values():
        for cells in row.values():
            cells.sort(key=lambda r: (r.repetition, r.cell_id))
    partial = partial_credit(records)
    subjects = tuple(summarize_subject(name, by_subject[name], scores=partial) for name in sorted(by_subject))
    references = frozenset(s.subject for s in subjects if s.kind in REFERENCE_KINDS)
    return CohortSummary(
        cells=len(records),
        tasks=tuple(sorted(grid)),
        subjects=subjects,
        counts=counts,
        health=task_health(records),
        grid={task: grid[task] for task in sorted(grid)},
        comparisons=pairwise(by_subject, references) if compare else (),
        strict_comparisons=pairwise(by_subject, references, "strict") if compare else (),
        score_comparisons=pairwise(by_subject, references, "score") if compare and partial else (),
    )
