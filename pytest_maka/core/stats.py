"""Pure statistics over cell records: rates with Wilson intervals, per-subject summaries, task health.

Everything here takes plain records (dicts shaped by :func:`core.records.cell_record`) and
returns frozen dataclasses. No I/O, no pytest, no rendering beyond the one canonical way to
state a rate with its denominator (``3/4 = 75.0%``), so every view words it identically.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .taxonomy import OFFICIAL, Status

#: Two-sided 95% normal quantile (``scipy.stats.norm.ppf(0.975)``).
Z95 = 1.959963984540054

#: Subject kinds that are references (no model behind them): used by the task-health checks.
NOP_KIND = "nop"
ORACLE_KIND = "oracle"
REFERENCE_KINDS: frozenset[str] = frozenset({NOP_KIND, ORACLE_KIND})


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``.

    With ``n == 0`` nothing is known and the interval is the whole range ``(0.0, 1.0)``.
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


@dataclass(frozen=True)
class Rate:
    """A proportion with its denominator written out and its 95% Wilson interval."""

    passes: int
    total: int
    low: float
    high: float

    @classmethod
    def of(cls, passes: int, total: int) -> Rate:
        low, high = wilson_interval(passes, total)
        return cls(passes, total, low, high)

    @property
    def value(self) -> float | None:
        """The point estimate, or None for an empty denominator."""
        return self.passes / self.total if self.total else None

    @property
    def text(self) -> str:
        """``3/4 = 75.0%`` (``0/0 = n/a`` when there is nothing to divide by)."""
        if not self.total:
            return "0/0 = n/a"
        return f"{self.passes}/{self.total} = {100 * self.passes / self.total:.1f}%"

    @property
    def interval_text(self) -> str:
        """``[30.1%, 95.4%]``, or ``n/a`` when the denominator is empty."""
        if not self.total:
            return "n/a"
        return f"[{100 * self.low:.1f}%, {100 * self.high:.1f}%]"


def status_of(record: Mapping[str, Any]) -> Status:
    """The taxonomy class of a record; an unknown string is an error, never a guess."""
    try:
        return Status(record["status"])
    except (KeyError, ValueError):
        raise ValueError(
            f"record {record.get('cell_id', '?')!r} has no valid taxonomy status: {record.get('status')!r}"
        ) from None


def _sum_known(values: Iterable[Any]) -> tuple[float | None, int]:
    """Sum of the numeric values, and how many there were; None when none is known."""
    total, known = 0.0, 0
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            total += v
            known += 1
    return (total if known else None), known


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
    cost_usd: float | None
    #: How many cells reported a cost (``cost_usd`` is a sum over these only).
    cost_known: int
    input_tokens: int | None
    output_tokens: int | None
    mean_duration_s: float | None

    @property
    def non_official(self) -> int:
        """Cells outside the official denominator (harness-side, budget, aborted)."""
        return self.cells - self.official.total

    @property
    def tokens(self) -> int | None:
        """Input + output tokens where known, None when neither is known."""
        known = [t for t in (self.input_tokens, self.output_tokens) if t is not None]
        return sum(known) if known else None


def summarize_subject(subject: str, records: Sequence[Mapping[str, Any]]) -> SubjectSummary:
    """Summarise the cell records of one subject."""
    statuses = [status_of(r) for r in records]
    counts = {s: 0 for s in Status}
    for s in statuses:
        counts[s] += 1
    passes = counts[Status.AGENT_SUCCESS]
    official_total = sum(counts[s] for s in OFFICIAL)
    usages = [r.get("usage") or {} for r in records]
    cost, cost_known = _sum_known(u.get("cost_usd") for u in usages)
    tin, _ = _sum_known(u.get("input_tokens") for u in usages)
    tout, _ = _sum_known(u.get("output_tokens") for u in usages)
    dur_sum, dur_known = _sum_known(r.get("duration_s") for r in records)
    kinds = {r.get("subject_kind") for r in records if r.get("subject_kind")}
    return SubjectSummary(
        subject=subject,
        kind=next(iter(kinds)) if len(kinds) == 1 else None,
        cells=len(records),
        official=Rate.of(passes, official_total),
        strict=Rate.of(passes, len(records)),
        counts=counts,
        cost_usd=cost,
        cost_known=cost_known,
        input_tokens=None if tin is None else int(tin),
        output_tokens=None if tout is None else int(tout),
        mean_duration_s=None if dur_sum is None else dur_sum / dur_known,
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


def _ids(records: Sequence[Mapping[str, Any]], limit: int = 5) -> str:
    ids = sorted(str(r.get("cell_id")) for r in records)
    return ", ".join(ids[:limit]) + (f", ... (+{len(ids) - limit})" if len(ids) > limit else "")


def task_health(records: Iterable[Mapping[str, Any]]) -> dict[str, TaskHealth]:
    """Flag tasks that look broken or that cannot tell subjects apart; only flagged tasks are returned.

    - ``broken: passes with nop``: a cell of a ``nop`` subject passed.
    - ``broken: oracle fails``: an official cell of an ``oracle`` subject did not pass.
    - ``uninformative``: over official rows of at least two non-reference subjects
      (reference kinds are excluded, since oracle passing and nop failing is their job),
      every row passed, or every row failed.
    """
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_task.setdefault(str(r["task"]), []).append(r)
    out: dict[str, TaskHealth] = {}
    for task, rows in sorted(by_task.items()):
        reasons: dict[HealthFlag, str] = {}
        nop_passes = [
            r for r in rows if r.get("subject_kind") == NOP_KIND and status_of(r) is Status.AGENT_SUCCESS
        ]
        if nop_passes:
            reasons[HealthFlag.NOP_PASSES] = f"{len(nop_passes)} nop cell(s) passed: {_ids(nop_passes)}"
        oracle_fails = [
            r for r in rows
            if r.get("subject_kind") == ORACLE_KIND
            and status_of(r) in OFFICIAL and status_of(r) is not Status.AGENT_SUCCESS
        ]
        if oracle_fails:
            reasons[HealthFlag.ORACLE_FAILS] = (
                f"{len(oracle_fails)} oracle cell(s) did not pass: {_ids(oracle_fails)}"
            )
        graded = [
            r for r in rows
            if r.get("subject_kind") not in REFERENCE_KINDS and status_of(r) in OFFICIAL
        ]
        subjects = {r["subject"] for r in graded}
        if len(subjects) >= 2:
            passed = {status_of(r) is Status.AGENT_SUCCESS for r in graded}
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
    grid: dict[str, dict[str, list[Mapping[str, Any]]]]

    def subject_names(self) -> list[str]:
        return [s.subject for s in self.subjects]


def summarize(records: Sequence[Mapping[str, Any]]) -> CohortSummary:
    """Summarise a cohort's cell records: per subject, per class, per task (sorted by name)."""
    by_subject: dict[str, list[Mapping[str, Any]]] = {}
    grid: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    counts = {s: 0 for s in Status}
    for r in records:
        counts[status_of(r)] += 1
        by_subject.setdefault(str(r["subject"]), []).append(r)
        grid.setdefault(str(r["task"]), {}).setdefault(str(r["subject"]), []).append(r)
    for row in grid.values():
        for cells in row.values():
            cells.sort(key=lambda r: (r.get("repetition") or 0, str(r.get("cell_id"))))
    return CohortSummary(
        cells=len(records),
        tasks=tuple(sorted(grid)),
        subjects=tuple(summarize_subject(name, by_subject[name]) for name in sorted(by_subject)),
        counts=counts,
        health=task_health(records),
        grid={task: grid[task] for task in sorted(grid)},
    )
