"""A compact per-subject table for the pytest terminal summary (plain text, fixed width)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.stats import CohortSummary, SubjectSummary, summarize

#: At most this many flagged tasks are listed; the rest are counted.
MAX_HEALTH_LINES = 10


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
    if summary.health:
        lines.append("")
        lines.append(f"task health: {len(summary.health)} task(s) flagged")
        for health in list(summary.health.values())[:MAX_HEALTH_LINES]:
            lines.append(f"  {health.task}: {'; '.join(health.flags)}")
        if len(summary.health) > MAX_HEALTH_LINES:
            lines.append(f"  ... and {len(summary.health) - MAX_HEALTH_LINES} more (see summary.md)")
    return lines


def terminal_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Lines of a compact per-subject table for the given cell records (empty list for none)."""
    if not records:
        return []
    return summary_lines(summarize(records))
