"""A compact per-subject table for the pytest terminal summary (plain text, fixed width)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.record_model import AttemptRecord, as_records
from ..core.stats import (
    CLUSTER,
    MCNEMAR,
    REFERENCE_KINDS,
    WEAK_TASKS,
    CohortSummary,
    PairedComparison,
    SubjectSummary,
    summarize,
)
from ..core.stats.paired import WEAK_DISCORDANT
from .formatting import p_text

#: At most this many flagged tasks are listed; the rest are counted.
MAX_HEALTH_LINES = 10
#: At most this many paired comparisons are printed.
MAX_COMPARISON_LINES = 6


def format_cost(summary: SubjectSummary) -> str:
    """``$1.23``, ``$1.23 (3/4 cells)`` when only some cells reported a cost, ``-`` when none did."""
    if summary.cost_usd is None:
        return "-"
    text = f"${summary.cost_usd:,.2f}" if summary.cost_usd >= 0.01 else f"${summary.cost_usd:.4f}"
    if summary.cost_known < summary.cells:
        text += f" ({summary.cost_known}/{summary.cells} cells)"
    return text


def format_duration(seconds: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, or ``-``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def summary_lines(summary: CohortSummary) -> list[str]:
    """The table (and a few task-health lines) for an already computed summary."""
    header = ("subject", "cells", "official pass rate", "95% CI", "strict pass rate", "not official", "cost")
    rows = [
        (
            s.subject,
            str(s.cells),
            s.official.text,
            s.official.interval_text,
            s.strict.text,
            str(s.non_official),
            format_cost(s),
        )
        for s in summary.subjects
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    right = {1, 5}  # numeric columns

    def fmt(row: Sequence[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        cols = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs]
        return "  ".join(cols).rstrip()

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    if any(CLUSTER in (s.official.method, s.strict.method) for s in summary.subjects):
        lines.append(
            "95% CI: cluster-robust over tasks (a task's repetitions are one cluster; score interval, t(tasks - 1))"
        )
    few = few_tasks_line(summary)
    if few:
        lines.append(few)
    lines += [f"weak rate: {w}" for w in rate_weak_lines(summary)]
    lines += comparison_lines(summary)
    if summary.health:
        lines.append("")
        lines.append(f"task health: {len(summary.health)} task(s) flagged")
        for health in list(summary.health.values())[:MAX_HEALTH_LINES]:
            lines.append(f"  {health.task}: {'; '.join(health.flags)}")
        if len(summary.health) > MAX_HEALTH_LINES:
            lines.append(f"  ... and {len(summary.health) - MAX_HEALTH_LINES} more (see summary.md)")
    return lines


def few_tasks_line(summary: CohortSummary) -> str | None:
    """The warning under the headline table (in every view) for subjects graded on fewer than ``WEAK_TASKS`` tasks.

    Counts each subject's graded tasks (tasks with an official row), not the cohort's tasks:
    a subject whose rows were mostly lost is weak even in a large cohort.
    """
    few = [(s.subject, s.graded_tasks) for s in summary.subjects if 0 < s.graded_tasks < WEAK_TASKS]
    if not few:
        return None
    sizes = {n for _, n in few}
    if len(few) == len(summary.subjects) and len(sizes) == 1:
        return (
            f"only {sizes.pop()} task(s): every interval here is approximate (a nominal 95% interval over so few "
            "tasks can cover less) and comparisons are weak"
        )
    who = ", ".join(f"{n} graded task(s) for {name}" for name, n in few)
    return (
        f"only {who}: their intervals are approximate (a nominal 95% interval over so few tasks can cover less) "
        "and their comparisons are weak"
    )


def rate_weak_lines(summary: CohortSummary) -> list[str]:
    """One line per non-reference subject whose clustered rate has at most 3 successes or failures."""
    return [
        f"{s.subject}: {s.official.weak}"
        for s in summary.subjects
        if s.kind not in REFERENCE_KINDS and s.official.weak is not None
    ]


def weak_line(summary: CohortSummary) -> str | None:
    """The warning printed (in every view) when some comparisons are weak, with the reasons counted."""
    weak = summary.weak
    if not weak:
        return None
    parts = []
    few = [c for c in weak if c.tasks < WEAK_TASKS]
    if few:
        fewest = min(c.tasks for c in few)
        parts.append(f"{len(few)} pair(s) share fewer than {WEAK_TASKS} tasks (fewest {fewest})")
    differ = [c for c in weak if c.tasks >= WEAK_TASKS and c.wins_a + c.wins_b < WEAK_DISCORDANT]
    if differ:
        parts.append(f"{len(differ)} pair(s) differ on fewer than {WEAK_DISCORDANT} tasks")
    unequal = [c for c in weak if c.unequal]
    if unequal:
        parts.append(f"{len(unequal)} pair(s) have unequal repetitions on the two sides")
    return (
        "comparisons are weak: "
        + "; ".join(parts)
        + "; a non-significant result there is not evidence of no difference"
    )


def ranking_line(summary: CohortSummary) -> str:
    """Which view ranks the subjects, and the pairs whose strict view decides otherwise."""
    line = (
        f"ranked on {summary.ranking} rows (p (Holm) decides); strict = every row, any non-pass "
        "(budget, infra, ...) = 0, shown beside"
    )
    split = [c for c in summary.comparisons if (s := summary.strict_of(c)) is not None and s.verdict != c.verdict]
    if split:
        line += "; official and strict disagree on " + ", ".join(f"{c.a} vs {c.b}" for c in split)
    return line


def interval_pp(c: PairedComparison | None) -> str:
    """``+12.5 pp [-3.0, +20.0]`` (fixed width friendly), or ``-``."""
    if c is None or c.diff is None or c.low is None or c.high is None:
        return "-"
    return f"{100 * c.diff:+.1f} pp [{100 * c.low:+.1f}, {100 * c.high:+.1f}]"


def comparison_lines(summary: CohortSummary, limit: int = MAX_COMPARISON_LINES) -> list[str]:
    """One line per pair of non-reference subjects: paired difference, interval, p-values, task wins."""
    graded = [c for c in summary.comparisons if c.tasks and c.diff is not None]
    kinds = {s.subject: s.kind for s in summary.subjects}
    models = [c for c in graded if kinds.get(c.a) not in REFERENCE_KINDS and kinds.get(c.b) not in REFERENCE_KINDS]
    if not models:
        return []
    out = ["", "paired (A - B on shared tasks, each task once; " + ranking_line(summary) + "):"]
    for c in models[:limit]:
        test = "McNemar" if c.method == MCNEMAR else "sign-flip"
        strict = summary.strict_of(c)
        out.append(
            f"  {c.a} - {c.b}: {interval_pp(c)}  "
            f"{p_text(c.p_value)}, Holm {p_text(c.p_adjusted, prefix=False)} ({test})  "
            f"wins {c.wins_a}/{c.wins_b}/{c.ties} tied, {c.tasks} tasks; strict {interval_pp(strict)}"
        )
        if c.power is not None:
            out.append(f"    power: {c.power.text}")
        if c.weak:
            out.append(f"    weak: {'; '.join(c.weak_reasons)}")
    if len(models) > limit:
        out.append(f"  ... and {len(models) - limit} more pairs (see summary.md)")
    warning = weak_line(summary)
    if warning:
        out.append(warning)
    return out


def terminal_lines(records: Sequence[AttemptRecord | Mapping[str, Any]]) -> list[str]:
    """Lines of a compact per-subject table for the given cell records (empty list for none)."""
    if not records:
        return []
    return summary_lines(summarize(records))


def rerun_summary(records: Sequence[AttemptRecord | Mapping[str, Any]]) -> str | None:
    """How the cells that stand on a rerun (``--maka-rerun``) changed from their previous run,
    so that a rerun's gains are never shown without its losses (None when no cell was rerun)."""
    changed = [r.runs[-2:] for r in as_records(records) if r.runs is not None and len(r.runs) > 1]
    if not changed:
        return None
    gained = sum(1 for before, now in changed if now.passed and not before.passed)
    lost = sum(1 for before, now in changed if before.passed and not now.passed)
    return (
        f"{len(changed)} cell(s) stand on a rerun: {gained} went from not passed to passed, {lost} from passed "
        "to not passed; every earlier run is kept (attempts.jsonl, each record's runs)"
    )
