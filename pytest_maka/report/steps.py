"""The steps of a multi-step cell, for the report's drill-down (HTML) and summary.md."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.record_model import AttemptRecord, StepEntry
from .artifacts import cap

#: Columns of one step's row, in the HTML drill-down and the markdown table.
STEP_FIELDS = ("step", "name", "class", "verdict", "score", "duration", "subject", "why")
#: Multi-step cells listed in summary.md (the rest are in report.html).
MAX_MARKDOWN_CELLS = 50


def _subject(entry: StepEntry) -> str:
    subject = entry.subject
    if subject is None:
        return ""
    if subject.timed_out:
        return f"timed out ({subject.timeout_sec} s)"
    return "" if subject.exit_code is None else f"exit {subject.exit_code}"


def _why(entry: StepEntry) -> str:
    if not entry.run:
        return f"not run: {entry.not_run or 'an earlier step stopped the run'}"
    return cap((entry.error.message if entry.error is not None else None) or "", 300)


def step_rows(record: AttemptRecord) -> list[list[Any]]:
    """One row per declared step (STEP_FIELDS); [] for a single-step cell."""
    rows = []
    for entry in record.steps or ():
        run = bool(entry.run)
        duration = entry.duration_s
        rows.append(
            [
                entry.index,
                entry.name or "",
                str(entry.status) if run else "not run",
                (entry.verdict or "") if run else "",
                entry.score,
                None if duration is None else round(duration, 3),
                _subject(entry) if run else "",
                _why(entry),
            ]
        )
    return rows


def markdown_lines(records: Iterable[AttemptRecord], md: Any) -> list[str]:
    """A ``<details>`` block per multi-step cell with its steps as a table ([] when there are none)."""
    cells = [(r, rows) for r in records if (rows := step_rows(r))]
    if not cells:
        return []
    out = [f"### Multi-step cells ({len(cells)})", ""]
    for record, rows in cells[:MAX_MARKDOWN_CELLS]:
        ran = sum(1 for row in rows if row[2] != "not run")
        title = f"{md(record.cell_id)}: `{md(record.status.value)}`, {ran} of {len(rows)} steps run"
        out += [f"<details><summary>{title}</summary>", ""]
        out += ["| " + " | ".join(STEP_FIELDS) + " |", "| " + " | ".join(["---"] * len(STEP_FIELDS)) + " |"]
        for row in rows:
            out.append("| " + " | ".join("" if v is None else md(v) for v in row) + " |")
        out += ["", "</details>", ""]
    if len(cells) > MAX_MARKDOWN_CELLS:
        out += [f"… and {len(cells) - MAX_MARKDOWN_CELLS} more multi-step cells (see report.html).", ""]
    return out
