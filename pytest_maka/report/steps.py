"""The steps of a multi-step cell, for the report's drill-down (HTML) and summary.md."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .artifacts import cap

#: Columns of one step's row, in the HTML drill-down and the markdown table.
STEP_FIELDS = ("step", "name", "class", "verdict", "score", "duration", "subject", "why")
#: Multi-step cells listed in summary.md (the rest are in report.html).
MAX_MARKDOWN_CELLS = 50


def _subject(entry: Mapping[str, Any]) -> str:
    subject = entry.get("subject") if isinstance(entry.get("subject"), Mapping) else {}
    if subject.get("timed_out"):
        return f"timed out ({subject.get('timeout_sec')} s)"
    code = subject.get("exit_code")
    return "" if code is None else f"exit {code}"


def _why(entry: Mapping[str, Any]) -> str:
    if not entry.get("run"):
        return f"not run: {entry.get('not_run') or 'an earlier step stopped the run'}"
    error = entry.get("error") if isinstance(entry.get("error"), Mapping) else {}
    return cap(str(error.get("message") or ""), 300)


def step_rows(record: Mapping[str, Any]) -> list[list[Any]]:
    """One row per declared step (STEP_FIELDS); [] for a single-step cell."""
    steps = record.get("steps")
    if not isinstance(steps, list):
        return []
    rows = []
    for entry in steps:
        if not isinstance(entry, Mapping):
            continue
        run = bool(entry.get("run"))
        score, duration = entry.get("score"), entry.get("duration_s")
        rows.append(
            [
                entry.get("index"),
                str(entry.get("name") or ""),
                str(entry.get("status")) if run else "not run",
                str(entry.get("verdict") or "") if run else "",
                score if isinstance(score, (int, float)) else None,
                round(duration, 3) if isinstance(duration, (int, float)) else None,
                _subject(entry) if run else "",
                _why(entry),
            ]
        )
    return rows


def markdown_lines(records: Iterable[Mapping[str, Any]], md: Any) -> list[str]:
    """A ``<details>`` block per multi-step cell with its steps as a table ([] when there are none)."""
    cells = [(r, rows) for r in records if (rows := step_rows(r))]
    if not cells:
        return []
    out = [f"### Multi-step cells ({len(cells)})", ""]
    for record, rows in cells[:MAX_MARKDOWN_CELLS]:
        ran = sum(1 for row in rows if row[2] != "not run")
        title = f"{md(record.get('cell_id'))}: `{md(record.get('status'))}`, {ran} of {len(rows)} steps run"
        out += [f"<details><summary>{title}</summary>", ""]
        out += ["| " + " | ".join(STEP_FIELDS) + " |", "| " + " | ".join(["---"] * len(STEP_FIELDS)) + " |"]
        for row in rows:
            out.append("| " + " | ".join("" if v is None else md(v) for v in row) + " |")
        out += ["", "</details>", ""]
    if len(cells) > MAX_MARKDOWN_CELLS:
        out += [f"… and {len(cells) - MAX_MARKDOWN_CELLS} more multi-step cells (see report.html).", ""]
    return out
