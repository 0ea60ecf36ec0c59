"""The result record (schema ``pytest-maka/result/1``, DESIGN.md §6) and cell-level selection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .cell import Cell
from .taint import ReadOnlySystem, TaintRecord
from .taxonomy import FINAL, OFFICIAL, Status

SCHEMA = "pytest-maka/result/1"

Record = dict[str, Any]


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def empty_usage() -> dict[str, Any]:
    return {"input_tokens": None, "output_tokens": None, "cost_usd": None}


def attempt_record(
    cell: Cell,
    *,
    cohort: str,
    attempt: int,
    status: Status,
    started: float,
    finished: float,
    score: float | None = None,
    usage: Mapping[str, Any] | None = None,
    agent: Mapping[str, Any] | None = None,
    verifier: Mapping[str, Any] | None = None,
    subject_claim: Any = None,
    isolation: Mapping[str, Any] | None = None,
    budget: Mapping[str, Any] | None = None,
    artifacts: Mapping[str, Any] | None = None,
    timings: Mapping[str, float] | None = None,
    error: Mapping[str, str] | None = None,
    steps: list[dict[str, Any]] | None = None,
    taint: TaintRecord | None = None,
    read_only_system: ReadOnlySystem | None = None,
) -> Record:
    """One attempt, in the shape every reader of the ledger expects."""
    return {
        "schema": SCHEMA,
        "cohort": cohort,
        "cell_id": cell.id,
        "cell_key": cell.key,
        "task": cell.task.id,
        "subject": cell.subject.name,
        "subject_kind": cell.subject.kind,
        "repetition": cell.repetition,
        "attempt": attempt,
        "attempt_count": attempt,
        "status": status.value,
        "passed": status is Status.AGENT_SUCCESS,
        "official": status in OFFICIAL,
        "score": score,
        "duration_s": round(finished - started, 4),
        "started_at": utc_iso(started),
        "finished_at": utc_iso(finished),
        "usage": {**empty_usage(), **(usage or {})},
        "agent": dict(agent or {}),
        "verifier": dict(verifier or {}),
        "subject_claim": subject_claim,
        "isolation": dict(isolation or {}),
        "budget": dict(budget or {}),
        "artifacts": dict(artifacts or {}),
        "timings": {k: round(v, 4) for k, v in (timings or {}).items()},
        "error": dict(error) if error else None,
        "task_digest": cell.task.digest,
        "subject_digest": cell.subject.digest,
        "task_metadata": dict(cell.task.metadata),
        **({"steps": steps} if steps is not None else {}),
        **({"taint": taint.as_record()} if taint is not None else {}),
        **({"read_only_system": read_only_system.as_record()} if read_only_system is not None else {}),
    }


def is_final(record: Mapping[str, Any]) -> bool:
    """A final record is never re-executed by a rerun into the same output directory."""
    return Status(record["status"]) in FINAL


def cell_record(attempts: Iterable[Mapping[str, Any]]) -> Record:
    """The record that stands for a cell: the earliest final attempt, else the latest one.

    Earliest-valid-wins means rerunning cannot cherry-pick a lucky pass.
    """
    ordered = sorted(attempts, key=lambda r: (r["attempt"], r["finished_at"]))
    if not ordered:
        raise ValueError("a cell record needs at least one attempt")
    chosen = next((r for r in ordered if is_final(r)), ordered[-1])
    out = dict(chosen)
    out["attempt_count"] = len(ordered)
    out["attempts"] = [{"attempt": r["attempt"], "status": r["status"], "error": r.get("error")} for r in ordered]
    out.pop("attempt", None)
    out["attempt"] = chosen["attempt"]
    return out


def group_by_cell(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Attempts grouped by cell key, in ledger order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["cell_key"], []).append(r)
    return groups


def is_tainted(record: Mapping[str, Any]) -> bool:
    """The record's pass depended on code the subject changed outside the workdir (``taint``,
    core/taint.py); refused ones are failures and not counted here."""
    taint = record.get("taint")
    return bool(record.get("passed")) and isinstance(taint, Mapping) and bool(taint.get("tainted"))
