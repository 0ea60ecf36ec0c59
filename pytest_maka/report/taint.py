"""Tainted passes, shown apart (DESIGN.md §3, ``core/taint.py``): passes that depended on code
the subject changed outside the workdir, with the paths, per cell; and the count per subject."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.record_model import AttemptRecord

#: Rows listed (the count says how many there were).
MAX_ROWS = 200


@dataclass(frozen=True)
class TaintedRow:
    """One tainted pass: its cell and the paths the verifier ran or loaded."""

    cell_id: str
    subject: str
    paths: tuple[str, ...]
    checked: bool


def tainted_rows(records: Sequence[AttemptRecord]) -> list[TaintedRow]:
    out = []
    for r in records:
        if r.is_tainted and r.taint is not None:
            paths = tuple(r.taint.paths or ())
            out.append(TaintedRow(r.cell_id, r.subject, paths, bool(r.taint.checked)))
    return sorted(out, key=lambda t: (t.subject, t.cell_id))


def tainted_by_subject(records: Sequence[AttemptRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in tainted_rows(records):
        counts[row.subject] = counts.get(row.subject, 0) + 1
    return counts


def paths_text(row: TaintedRow) -> str:
    if not row.paths:
        return "(not checked)" if not row.checked else "-"
    return ", ".join(row.paths[:5]) + (f" … (+{len(row.paths) - 5})" if len(row.paths) > 5 else "")


def taint_lines(records: Sequence[AttemptRecord], md: Callable[[object], str]) -> list[str]:
    """The summary.md section (nothing when no pass is tainted)."""
    rows = tainted_rows(records)
    if not rows:
        return []
    out = [
        f"### Tainted passes ({len(rows)})",
        "",
        "Passes whose verifier ran or loaded code the subject changed outside the workdir; counted as"
        " passes unless `policy.refuse_tainted` is on. Review them, or turn the switch on.",
        "",
        "| cell | files the verifier ran or loaded |",
        "| --- | --- |",
    ]
    out += [f"| {md(r.cell_id)} | {md(paths_text(r))} |" for r in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        out.append(f"\n… and {len(rows) - MAX_ROWS} more (see results.jsonl, field `taint`).")
    return [*out, ""]
