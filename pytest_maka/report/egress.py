"""Refused egress per subject, from the records' ``isolation.network.phases`` (an agent that keeps
calling telemetry hosts shows up here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: At most this many (subject, destination) rows are shown.
MAX_ROWS = 100


@dataclass(frozen=True)
class RefusedRow:
    subject: str
    phase: str
    destination: str
    refused: int
    cells: int


def refused_rows(records: Iterable[Mapping[str, Any]], limit: int = MAX_ROWS) -> list[RefusedRow]:
    """(subject, phase, destination) with the refused connection count and the cells it happened in."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for record in records:
        phases = ((record.get("isolation") or {}).get("network") or {}).get("phases") or {}
        for phase, detail in phases.items():
            refused = (detail or {}).get("refused_destinations") or {}
            for dest, n in refused.items():
                entry = counts.setdefault((str(record.get("subject")), phase, dest), [0, 0])
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
