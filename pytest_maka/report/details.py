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

from ..core.stats import CohortSummary, status_of
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
)
NO_DETAIL, DETAIL, WITHHELD = 0, 1, 2


def error_text(record: Mapping[str, Any]) -> str:
    """``Type: message`` of a record's error, or the empty string."""
    err = record.get("error") or {}
    if not isinstance(err, Mapping):
        return str(err)
    kind, msg = str(err.get("type") or ""), str(err.get("message") or "")
    return f"{kind}: {msg}" if kind and msg else kind or msg


def _num(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _layout(artifacts: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(dir, ((key, path relative to dir or to the out dir), ...)) of the safe artifact paths."""
    if not isinstance(artifacts, Mapping):
        return "", ()
    base = safe_rel_path(artifacts.get("dir")) or ""
    pairs = []
    for key, value in artifacts.items():
        rel = safe_rel_path(value)
        if rel is None or key == "dir":
            continue
        if base and rel.startswith(base + "/"):
            pairs.append((str(key), rel[len(base) + 1 :]))
        else:
            pairs.append((str(key), "/" + rel))  # leading "/": relative to the out dir, not to dir
    return base, tuple(pairs)


def _verdict(record: Mapping[str, Any]) -> dict[str, Any]:
    verifier = record.get("verifier") if isinstance(record.get("verifier"), Mapping) else {}
    agent = record.get("agent") if isinstance(record.get("agent"), Mapping) else {}
    out = {"status": record.get("status"), "passed": bool(record.get("passed")), "score": _num(record.get("score"))}
    for key in ("reward", "exit_code", "timed_out", "error", "reward_source"):
        if verifier.get(key) is not None:
            out[f"verifier_{key}"] = cap(str(verifier[key]), 300) if key == "error" else verifier[key]
    for key in ("exit_code", "timed_out", "duration_s", "output_truncated", "stop_reason"):
        if agent.get(key) is not None:
            out[f"subject_{key}"] = agent[key]
    if agent.get("claim_agrees_with_verdict") is False:
        out["claim_disagrees_with_verdict"] = True
    out.update(usage_marks(record))
    package = (record.get("task_metadata") or {}).get("task")
    if isinstance(package, Mapping) and package.get("name"):  # Harbor's [task] section
        version = f" {package['version']}" if package.get("version") else ""
        described = f": {package['description']}" if package.get("description") else ""
        out["task_package"] = cap(f"{package['name']}{version}{described}", 300)
    return out


def usage_marks(record: Mapping[str, Any]) -> dict[str, Any]:
    """A budget the cell crossed (also on a pass), where its cost came from, the agent's version."""
    agent = record.get("agent") if isinstance(record.get("agent"), Mapping) else {}
    budget = record.get("budget") if isinstance(record.get("budget"), Mapping) else {}
    cost = agent.get("cost") if isinstance(agent.get("cost"), Mapping) else {}
    out: dict[str, Any] = {}
    if budget.get("exceeded"):
        out["budget_exceeded"] = str(budget["exceeded"])
    if cost.get("source"):
        out["cost_source"] = str(cost["source"]) + (" (a guess)" if cost.get("guess") else "")
    if agent.get("usage_partial"):
        out["usage_partial"] = True
    if agent.get("version"):
        out["agent_version"] = str(agent["version"])
    return out


def row_note(record: Mapping[str, Any]) -> str:
    """The row's error column: the error, or for a pass that crossed a budget, that mark."""
    exceeded = usage_marks(record).get("budget_exceeded")
    if record.get("passed") and exceeded:
        return f"passed over budget: {exceeded}"
    return error_text(record)


def _budgeted(text: str | None, budget: list[int]) -> str | None:
    if text is None:
        return None
    budget[0] -= len(text)
    return text


def _drill(record: Mapping[str, Any], out_dir: Path | None, budget: list[int]) -> tuple[dict[str, Any], bool]:
    """One cell's drill-down, and whether artifact text was withheld for the budget."""
    detail: dict[str, Any] = {"verdict": _verdict(record)}
    err = error_text(record)
    if err:
        detail["error"] = cap(err, DRILL_TEXT_CHARS)
    if record.get("subject_claim") is not None:
        claim = json.dumps(record["subject_claim"], ensure_ascii=False, default=str, indent=1)
        detail["claim"] = cap(claim, TAIL_BYTES)
    steps = step_rows(record)
    if steps:
        detail["steps"] = steps
    history = record.get("attempts") or []
    if isinstance(history, list) and history:
        detail["attempts"] = [
            [a.get("attempt"), a.get("status"), cap(error_text(a), 300)] for a in history if isinstance(a, Mapping)
        ]
    artifacts = record.get("artifacts")
    if out_dir is None or not isinstance(artifacts, Mapping):
        return detail, False
    if budget[0] <= 0:
        return detail, True
    outputs = _tails(out_dir, artifacts, SUBJECT_OUTPUT_KEYS, budget)
    if outputs:
        detail["out"] = outputs
    if artifacts.get("trajectory"):
        traj = read_trajectory(out_dir, artifacts["trajectory"])
        if traj is not None:
            budget[0] -= sum(len(json.dumps(s, ensure_ascii=False)) for s in traj["steps"])
            detail["traj"] = traj
    if artifacts.get("diff"):
        diff = _budgeted(read_head(out_dir, artifacts["diff"]), budget)
        if diff:
            detail["diff"] = diff
    verifier = _tails(out_dir, artifacts, VERIFIER_OUTPUT_KEYS, budget)
    if verifier:
        detail["ver"] = verifier
    return detail, False


def _tails(out_dir: Path, artifacts: Mapping[str, Any], keys: Any, budget: list[int]) -> list[list[str]]:
    """``[label, tail]`` of each artifact in ``keys`` that exists, within the page's text budget."""
    found = []
    for key, label in keys:
        text = _budgeted(read_tail(out_dir, artifacts[key]) if artifacts.get(key) else None, budget)
        if text:
            found.append([label, text])
    return found


def page_data(
    summary: CohortSummary, records: Sequence[Mapping[str, Any]], out_dir: Path | None
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
    ordered = sorted(records, key=lambda r: (str(r["task"]), str(r["subject"]), r.get("repetition") or 0))
    layouts: dict[tuple[tuple[str, str], ...], int] = {}
    rows: list[list[Any]] = []
    for i, r in enumerate(ordered):
        base, layout = _layout(r.get("artifacts"))
        usage = r.get("usage") if isinstance(r.get("usage"), Mapping) else {}
        dur = _num(r.get("duration_s"))
        cost = _num(usage.get("cost_usd"))
        rows.append(
            [
                str(r.get("cell_id") or f"cell-{i}"),
                t_index[str(r["task"])],
                s_index[str(r["subject"])],
                r.get("repetition") or 0,
                c_index[status_of(r).value],
                _num(r.get("score")),
                None if dur is None else round(dur, 3),
                r.get("attempt_count") or 1,
                None if cost is None else round(cost, 6),
                cap(row_note(r), ROW_ERROR_CHARS),
                base,
                layouts.setdefault(layout, len(layouts)),
                1 if r.get("resumed") else 0,
                NO_DETAIL,
            ]
        )
    budget = [TEXT_BUDGET]
    instructions: dict[int, str] = {}
    for r in ordered:
        ti = t_index[str(r["task"])]
        rel = (r.get("artifacts") or {}).get("instruction") if isinstance(r.get("artifacts"), Mapping) else None
        if ti not in instructions and rel and out_dir is not None:
            text = read_head(out_dir, rel, INSTRUCTION_CHARS)
            if text is not None:
                instructions[ti] = text
                budget[0] -= len(text)
    cells: dict[int, dict[str, Any]] = {}
    # failing cells first: their outputs are what a reader opens the report for
    for i in sorted(range(len(ordered)), key=lambda j: status_of(ordered[j]) is Status.AGENT_SUCCESS):
        detail, withheld = _drill(ordered[i], out_dir, budget)
        cells[i] = detail
        rows[i][-1] = WITHHELD if withheld else DETAIL
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
