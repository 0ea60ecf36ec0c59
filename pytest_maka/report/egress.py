"""Refused egress per subject, from the records' ``isolation.network.phases`` (an agent that keeps
calling telemetry hosts shows up here)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.record_model import AttemptRecord

#: At most this many (subject, destination) rows are shown.
MAX_ROWS = 100


@dataclass(frozen=True)
class RefusedRow:
    subject: str
    phase: str
    destination: str
    refused: int
    cells: int


def refused_rows(records: Iterable[AttemptRecord], limit: int = MAX_ROWS) -> list[RefusedRow]:
    """(subject, phase, destination) with the refused connection count and the cells it happened in."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for record in records:
        for phase, detail in record.network_phases().items():
            for dest, n in (detail.refused_destinations or {}).items():
                entry = counts.setdefault((record.subject, phase, dest), [0, 0])
                entry[0] += int(n)
                entry[1] += 1
    rows = [RefusedRow(s, p, d, n, c) for (s, p, d), (n, c) in counts.items()]
    rows.sort(key=lambda r: (r.subject, -r.refused, r.destination))
    return rows[:limit]


def markdown_lines(rows: list[RefusedRow], md: Any) -> list[str]:
    """The ``summary.md`` section (empty when nothing was refused)."""
    if not rows:
        return []
    out = ["### Refused egress", "", "| subject | phase | destination | refused | cells |"]
    out.append("| --- | --- | --- | --: | --: |")
    out += [f"| {md(r.subject)} | {r.phase} | {md(r.destination)} | {r.refused} | {r.cells} |" for r in rows]
    return [*out, "", "Connections the egress proxy refused (each attempt's `egress.log` has every one).", ""]
