"""The data behind the interactive parts of ``report.html``: one compact row per cell, and drill-downs.

Rows are arrays (not objects) so 10,000 cells stay around a megabyte. Drill-downs (outputs,
trajectory, diff, verifier output, claim, attempts) go into a separate JSON block that the
page parses only when a drill-down is first opened. Artifact text is budgeted for the whole
page: failing cells get theirs first; a cell past the budget keeps its artifact links.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.record_model import AgentInfo, Artifacts, AttemptRecord, BudgetInfo, ErrorInfo, VerifierInfo
from ..core.stats import CohortSummary
from ..core.taxonomy import Status
from .artifacts import TAIL_BYTES, cap, read_head, read_tail, read_trajectory, safe_rel_path
from .steps import step_rows

#: Characters of artifact-derived text inlined in the whole page.
TEXT_BUDGET = 8 * 1024 * 1024
#: Characters of the error message kept in a row (the drill-down has more).
ROW_ERROR_CHARS = 160
DRILL_TEXT_CHARS = 4096
INSTRUCTION_CHARS = 4096

#: Artifact keys shown in a drill-down, with their labels.
SUBJECT_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (
    ("agent_log", "subject output"),
    ("stdout", "subject stdout"),
    ("agent_stderr", "subject stderr"),
    ("stderr", "subject stderr"),
)
VERIFIER_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (
    ("verifier_output", "verifier output"),
    ("verifier_stderr", "verifier stderr"),
)

#: Row fields, in order (the page's script reads them by these positions).
ROW_FIELDS = (
    "id",
    "task",
    "subject",
    "rep",
    "cls",
    "score",
    "dur",
    "attempts",
    "cost",
    "err",
    "dir",
    "layout",
    "resumed",
    "detail",
    "tok",
)
NO_DETAIL, DETAIL, WITHHELD = 0, 1, 2


def error_text(record: AttemptRecord) -> str:
    """``Type: message`` of a record's error, or the empty string."""
    return record.error_text


def _num(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _layout(artifacts: Artifacts | None) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(dir, ((key, path relative to dir or to the out dir), ...)) of the safe artifact paths."""
    if artifacts is None:
        return "", ()
    base = safe_rel_path(artifacts.dir) or ""
    pairs = []
    for key, value in artifacts.paths().items():
        rel = safe_rel_path(value)
        if rel is None:
            continue
        if base and rel.startswith(base + "/"):
            pairs.append((str(key), rel[len(base) + 1 :]))
        else:
            pairs.append((str(key), "/" + rel))  # leading "/": relative to the out dir, not to dir
    return base, tuple(pairs)


def _verdict(record: AttemptRecord) -> dict[str, Any]:
    verifier, agent = record.verifier or VerifierInfo(), record.agent or AgentInfo()
    out = {"status": record.status.value, "passed": bool(record.passed), "score": _num(record.score)}
    verifier_facts = {
        "reward": verifier.reward,
        "exit_code": verifier.exit_code,
        "timed_out": verifier.timed_out,
        "error": None if verifier.error is None else cap(verifier.error, 300),
        "reward_source": verifier.reward_source,
    }
    subject_facts = {
        "exit_code": agent.exit_code,
        "timed_out": agent.timed_out,
        "duration_s": agent.duration_s,
        "output_truncated": agent.output_truncated,
        "stop_reason": agent.stop_reason,
    }
    out.update({f"verifier_{k}": v for k, v in verifier_facts.items() if v is not None})
    out.update({f"subject_{k}": v for k, v in subject_facts.items() if v is not None})
    if agent.claim_agrees_with_verdict is False:
        out["claim_disagrees_with_verdict"] = True
    out.update(usage_marks(record))
    package = (record.task_metadata or {}).get("task")  # the task's own metadata: open-ended JSON
    if isinstance(package, Mapping) and package.get("name"):  # Harbor's [task] section
        version = f" {package['version']}" if package.get("version") else ""
        described = f": {package['description']}" if package.get("description") else ""
        out["task_package"] = cap(f"{package['name']}{version}{described}", 300)
    return out


def usage_marks(record: AttemptRecord) -> dict[str, Any]:
    """A budget the cell crossed (also on a pass), where its cost came from, the agent's version."""
    agent, budget = record.agent or AgentInfo(), record.budget or BudgetInfo()
    out: dict[str, Any] = {}
    if budget.exceeded:
        out["budget_exceeded"] = budget.exceeded
    if agent.cost is not None and agent.cost.source:
        out["cost_source"] = agent.cost.source + (" (a guess)" if agent.cost.guess else "")
    if agent.usage_partial:
        out["usage_partial"] = True
    if agent.version:
        out["agent_version"] = agent.version
    return out


def row_note(record: AttemptRecord) -> str:
    """The row's error column: the error, or for a pass that met a limit (a budget crossed,
    its timeout), that mark."""
    exceeded = usage_marks(record).get("budget_exceeded")
    marks = []
    if record.passed and record.agent is not None and record.agent.timed_out:
        marks.append("passed at its timeout")
    if record.passed and exceeded:
        marks.append(f"passed over budget: {exceeded}")
    return "; ".join(marks) if marks else record.error_text


def cell_tokens(record: AttemptRecord) -> int | None:
    """Input plus output tokens of a cell (either alone when only one is known), or None."""
    usage = record.usage
    known = [t for t in ((usage.input_tokens, usage.output_tokens) if usage else ()) if t is not None]
    return sum(known) if known else None


def _budgeted(text: str | None, budget: list[int]) -> str | None:
    if text is None:
        return None
    budget[0] -= len(text)
    return text


def _drill(record: AttemptRecord, out_dir: Path | None, budget: list[int]) -> tuple[dict[str, Any], bool]:
    """One cell's drill-down, and whether artifact text was withheld for the budget."""
    detail: dict[str, Any] = {"verdict": _verdict(record)}
    err = record.error_text
    if err:
        detail["error"] = cap(err, DRILL_TEXT_CHARS)
    if record.subject_claim is not None:
        claim = json.dumps(record.subject_claim, ensure_ascii=False, default=str, indent=1)
        detail["claim"] = cap(claim, TAIL_BYTES)
    steps = step_rows(record)
    if steps:
        detail["steps"] = steps
    if record.attempts:
        detail["attempts"] = [[a.attempt, a.status, cap((a.error or ErrorInfo()).text(), 300)] for a in record.attempts]
    artifacts = record.artifacts
    if out_dir is None or artifacts is None:
        return detail, False
    if budget[0] <= 0:
        return detail, True
    outputs = _tails(out_dir, artifacts, SUBJECT_OUTPUT_KEYS, budget)
    if outputs:
        detail["out"] = outputs
    trajectory, diff_path = artifacts.get("trajectory"), artifacts.get("diff")
    if trajectory:
        traj = read_trajectory(out_dir, trajectory)
        if traj is not None:
            budget[0] -= sum(len(json.dumps(s, ensure_ascii=False)) for s in traj["steps"])
            detail["traj"] = traj
    if diff_path:
        diff = _budgeted(read_head(out_dir, diff_path), budget)
        if diff:
            detail["diff"] = diff
    verifier = _tails(out_dir, artifacts, VERIFIER_OUTPUT_KEYS, budget)
    if verifier:
        detail["ver"] = verifier
    return detail, False


def _tails(
    out_dir: Path, artifacts: Artifacts, keys: tuple[tuple[str, str], ...], budget: list[int]
) -> list[list[str]]:
    """``[label, tail]`` of each artifact in ``keys`` that exists, within the page's text budget."""
    found = []
    for key, label in keys:
        path = artifacts.get(key)
        text = _budgeted(read_tail(out_dir, path) if path else None, budget)
        if text:
            found.append([label, text])
    return found


def page_data(
    summary: CohortSummary, records: Sequence[AttemptRecord], out_dir: Path | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, details)``: the rows the page renders at load, and the drill-downs it parses on demand.

    Cells are ordered by task, subject, repetition; a cell's index is its position.
    """
    subjects = summary.subject_names()
    tasks = list(summary.tasks)
    classes = [s.value for s in Status]
    s_index = {n: i for i, n in enumerate(subjects)}
    t_index = {n: i for i, n in enumerate(tasks)}
    c_index = {c: i for i, c in enumerate(classes)}
    ordered = sorted(records, key=lambda r: (r.task, r.subject, r.repetition))
    layouts: dict[tuple[tuple[str, str], ...], int] = {}
    rows: list[list[Any]] = []
    for i, r in enumerate(ordered):
        base, layout = _layout(r.artifacts)
        dur = _num(r.duration_s)
        cost = _num(r.usage.cost_usd) if r.usage is not None else None
        rows.append(
            [
                r.cell_id or f"cell-{i}",
                t_index[r.task],
                s_index[r.subject],
                r.repetition,
                c_index[r.status.value],
                _num(r.score),
                None if dur is None else round(dur, 3),
                r.attempt_count or 1,
                None if cost is None else round(cost, 6),
                cap(row_note(r), ROW_ERROR_CHARS),
                base,
                layouts.setdefault(layout, len(layouts)),
                1 if r.resumed else 0,
                NO_DETAIL,
                cell_tokens(r),
            ]
        )
    budget = [TEXT_BUDGET]
    instructions: dict[int, str] = {}
    for r in ordered:
        ti = t_index[r.task]
        rel = r.artifacts.get("instruction") if r.artifacts is not None else None
        if ti not in instructions and rel and out_dir is not None:
            text = read_head(out_dir, rel, INSTRUCTION_CHARS)
            if text is not None:
                instructions[ti] = text
                budget[0] -= len(text)
    cells: dict[int, dict[str, Any]] = {}
    # failing cells first: their outputs are what a reader opens the report for
    for i in sorted(range(len(ordered)), key=lambda j: ordered[j].status is Status.AGENT_SUCCESS):
        detail, withheld = _drill(ordered[i], out_dir, budget)
        cells[i] = detail
        rows[i][ROW_FIELDS.index("detail")] = WITHHELD if withheld else DETAIL
    health = {t_index[t]: [f.value for f in h.flags] for t, h in summary.health.items() if t in t_index}
    data = {
        "fields": list(ROW_FIELDS),
        "subjects": subjects,
        "tasks": tasks,
        "classes": classes,
        "health": health,
        "layouts": [list(map(list, lay)) for lay in sorted(layouts, key=layouts.__getitem__)],
        "cells": rows,
    }
    return data, {"cells": cells, "instructions": instructions}


def script_json(value: Any) -> str:
    """JSON safe to place inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
