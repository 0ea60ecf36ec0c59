"""The result record (schema ``pytest-maka/result/N``, DESIGN.md §6), its versions, and cell-level selection."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .cell import Cell
from .record_model import AttemptRecord
from .taint import ReadOnlySystem, TaintRecord
from .taxonomy import FINAL, OFFICIAL, Status

SCHEMA_PREFIX = "pytest-maka/result/"
#: Bumped whenever a field changes shape (adding a field is no bump); every reader reads each
#: earlier version through :func:`upgrade`.
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_PREFIX}{SCHEMA_VERSION}"

#: A record as JSON: what a line of the ledger holds and what crosses the wire (an xdist report,
#: a Dask result), read back with :func:`read_record` or ``AttemptRecord.model_validate``.
JsonRecord = dict[str, Any]


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
    run: int = 1,
    taint: TaintRecord | None = None,
    read_only_system: ReadOnlySystem | None = None,
) -> AttemptRecord:
    """One attempt, in the shape every reader of the ledger expects (RecordError when a part does
    not fit its type)."""
    return AttemptRecord._checked({
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
        "run": run,
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
    })


def is_final(record: AttemptRecord) -> bool:
    """A final record is never re-executed by a resume into the same output directory."""
    return record.status in FINAL


def run_of(record: AttemptRecord) -> int:
    """The run of the cell an attempt belongs to: 1, then one more per ``--maka-rerun``
    (attempts written before reruns existed carry no ``run``: they are run 1)."""
    return _run_value(record.run)


def _run_value(run: object) -> int:
    return run if isinstance(run, int) and not isinstance(run, bool) and run >= 1 else 1


def next_run(previous: Iterable[AttemptRecord], *, rerun: bool, session_started: float) -> int:
    """The run a cell's new attempts belong to: the latest one recorded, or under
    ``--maka-rerun`` one past the latest run recorded before the session started (so a
    replacement xdist worker, started later, picks the same run)."""
    if not rerun:
        return max((run_of(r) for r in previous), default=1)
    return max((run_of(r) for r in previous if _finished_before(r, session_started)), default=0) + 1


def _finished_before(record: AttemptRecord, ts: float) -> bool:
    """Whether ``record`` finished before ``ts`` (an unreadable time counts as before: an old line)."""
    try:
        return datetime.fromisoformat(record.finished_at).timestamp() < ts
    except ValueError:
        return True


def _ordered(attempts: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    return sorted(attempts, key=lambda r: (r.attempt, r.finished_at))


def latest_run(attempts: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    """The attempts of the cell's latest run, in attempt order."""
    ordered = _ordered(attempts)
    last = max((run_of(r) for r in ordered), default=1)
    return [r for r in ordered if run_of(r) == last]


def has_result(attempts: Iterable[AttemptRecord]) -> bool:
    """Whether the cell's latest run has a final attempt (a resume reports it, not runs it)."""
    return any(is_final(r) for r in latest_run(attempts))


def cell_record(attempts: Iterable[AttemptRecord]) -> AttemptRecord:
    """The record that stands for a cell: the earliest final attempt of its latest run, else
    that run's latest attempt.

    Within a run, earliest-valid-wins: retrying or resuming cannot cherry-pick a lucky pass.
    A new run exists only when the user asked for one (``--maka-rerun``) for every selected
    cell before any of its outcomes was known; it stands whatever it gives, and the record
    lists every earlier run's result in ``runs`` (nothing of them is hidden or deleted).
    """
    ordered = _ordered(attempts)
    if not ordered:
        raise ValueError("a cell record needs at least one attempt")
    runs: dict[int, list[AttemptRecord]] = {}
    for r in ordered:
        runs.setdefault(run_of(r), []).append(r)
    standing = {n: next((r for r in group if is_final(r)), group[-1]) for n, group in sorted(runs.items())}
    last = max(runs)
    chosen = standing[last]
    out = chosen.to_json()
    out["attempt_count"] = len(ordered)
    out["attempts"] = [
        {
            "attempt": r.attempt,
            "status": r.status.value,
            "error": r.error.to_json() if r.error is not None else None,
            **({"run": run_of(r)} if last > 1 else {}),
        }
        for r in ordered
    ]
    out.pop("attempt", None)
    out["attempt"] = chosen.attempt
    out["run"] = last
    if last > 1:
        out["runs"] = [
            {"run": n, "status": r.status.value, "passed": r.status is Status.AGENT_SUCCESS, "attempt": r.attempt}
            for n, r in standing.items()
        ]
    return AttemptRecord.model_validate(out)


def group_by_cell(records: Iterable[AttemptRecord]) -> dict[str, list[AttemptRecord]]:
    """Attempts grouped by cell key, in ledger order."""
    groups: dict[str, list[AttemptRecord]] = {}
    for r in records:
        groups.setdefault(r.cell_key, []).append(r)
    return groups


def schema_version(value: object) -> int | None:
    """N of ``pytest-maka/result/N`` (None for anything else)."""
    if not isinstance(value, str) or not value.startswith(SCHEMA_PREFIX):
        return None
    number = value.removeprefix(SCHEMA_PREFIX)
    return int(number) if number.isascii() and number.isdigit() and len(number) < 6 else None


#: One step per schema bump: ``UPGRADES[n]`` turns a record of version n into version n + 1.
UPGRADES: dict[int, Callable[[JsonRecord], JsonRecord]] = {}


def upgrade(record: Mapping[str, Any]) -> JsonRecord:
    """A record of any version this package ever wrote, in the shape of the current version.

    Version 1 was written with two shapes of ``isolation.network`` (releases before the
    per-phase network plan of 2026-12-01 wrote only ``{agent, verifier}`` summary strings, and
    the earliest ones could write a bare string); both are read as the current shape, whose
    ``phases`` holds a mapping per phase. Attempts written before reruns existed are run 1.
    """
    version = schema_version(record.get("schema"))
    if version is None or version > SCHEMA_VERSION:
        raise ValueError(f"not a record of a schema this version reads: {record.get('schema')!r}")
    out = dict(record)
    for step in range(version, SCHEMA_VERSION):
        out = UPGRADES[step](out)
    isolation = out.get("isolation")
    if isinstance(isolation, dict) and "network" in isolation:
        out["isolation"] = {**isolation, "network": _network_v1(isolation["network"])}
    out["run"] = _run_value(out.get("run"))
    out["schema"] = SCHEMA
    return out


def _network_v1(network: object) -> object:
    """``isolation.network`` with ``phases``: a mapping per phase, built from the per-phase
    summary strings where an earlier release wrote only those."""
    if isinstance(network, str):
        network = {"agent": network, "verifier": network}
    if not isinstance(network, dict):
        return network
    phases = network.get("phases")
    if isinstance(phases, dict):
        phases = {k: v if isinstance(v, dict) else {"mode": v} for k, v in phases.items()}
    else:
        phases = {k: {"mode": v} for k, v in network.items() if isinstance(v, str)}
    return {**network, "phases": phases}


def read_record(record: Mapping[str, Any]) -> AttemptRecord:
    """A ledger line of any version this package wrote, typed (ValueError when it is of no such
    version; pydantic's ValidationError when a field does not fit)."""
    return AttemptRecord.model_validate(upgrade(record))


def cells_of(attempts: Iterable[AttemptRecord]) -> list[AttemptRecord]:
    """One record per cell (:func:`cell_record`), cells in the order of their first attempt."""
    return [cell_record(group) for group in group_by_cell(attempts).values()]


def report_record(report: object) -> AttemptRecord | None:
    """The cell record a pytest call report carries (``report.maka``: JSON, which xdist ships to
    the controller), typed again; None for a report without one."""
    data = getattr(report, "maka", None)
    return AttemptRecord.model_validate(data) if data is not None else None


def is_tainted(record: AttemptRecord | Mapping[str, Any]) -> bool:
    """The record's pass depended on code the subject changed outside the workdir (``taint``,
    core/taint.py); refused ones are failures and not counted here."""
    return AttemptRecord.of(record).is_tainted
