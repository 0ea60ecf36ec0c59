"""The typed result record (schema ``pytest-maka/result/N``, DESIGN.md §6) that the ledger writes and every view reads.

Fields are named as the JSON keys are. Every model keeps the keys it was given and only
those (``exclude_unset``), in the order it was given them, so a line read and written again
is the same line: absent stays absent, ``null`` stays ``null``, ``1`` stays ``1`` (numbers
are ``int | float``, never coerced; validation is strict).

Open-ended on purpose (``extra="allow"``, the extra keys kept as they are): the sub-records
a preset, an executor or a ``pytest_maka_record`` hook adds keys to (agent, verifier,
isolation, budget, the top level); ``task_metadata`` (a task's own metadata tables) and
``subject_claim`` (whatever the subject claimed) are JSON values of the task's or the
subject's choosing. ``artifacts`` maps names to paths (strings), any name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import Field, Strict, ValidationError

from .record_parts import (
    AgentInfo,
    Artifacts,
    AttemptSummary,
    BudgetInfo,
    CostInfo,
    ErrorInfo,
    IsolationInfo,
    JsonValue,
    NetworkInfo,
    Num,
    PhaseNetwork,
    ReadOnlySystemInfo,
    RecordPart,
    RunSummary,
    StepEntry,
    StepSubject,
    TaintInfo,
    Usage,
    VerifierInfo,
    part_fields,
    plain_json,
)
from .taxonomy import Status
from .validation import first_error

#: The parts are defined in record_parts.py; importing them from here keeps working.
__all__ = [
    "AgentInfo",
    "Artifacts",
    "AttemptRecord",
    "AttemptSummary",
    "BudgetInfo",
    "CostInfo",
    "ErrorInfo",
    "IsolationInfo",
    "JsonValue",
    "NetworkInfo",
    "Num",
    "PhaseNetwork",
    "ReadOnlySystemInfo",
    "RecordError",
    "RecordPart",
    "RunSummary",
    "StepEntry",
    "StepSubject",
    "TaintInfo",
    "Usage",
    "VerifierInfo",
    "as_records",
    "describe",
]


class AttemptRecord(RecordPart):
    """One attempt (``attempts.jsonl``), or one cell (``results.jsonl``: the attempt that stands for it
    with ``attempts``, ``runs``, ``resumed``). Keys a ``pytest_maka_record`` hook adds are kept as extras."""

    schema_: str = Field(alias="schema")
    cohort: str | None = None
    cell_id: str
    cell_key: str = Field(min_length=1)
    task: str
    subject: str
    subject_kind: str | None = None
    repetition: int = Field(default=0, ge=0)
    attempt: int = Field(ge=1)
    attempt_count: int | None = None
    run: int | None = None
    status: Annotated[Status, Strict(False)]
    passed: bool | None = None
    official: bool | None = None
    score: Num | None = None
    duration_s: Num | None = None
    started_at: str | None = None
    finished_at: str
    usage: Usage | None = None
    agent: AgentInfo | None = None
    verifier: VerifierInfo | None = None
    subject_claim: JsonValue = None
    isolation: IsolationInfo | None = None
    budget: BudgetInfo | None = None
    artifacts: Artifacts | None = None
    timings: dict[str, Num] | None = None
    error: ErrorInfo | None = None
    task_digest: str | None = None
    subject_digest: str | None = None
    task_metadata: dict[str, JsonValue] | None = None
    steps: list[StepEntry] | None = None
    taint: TaintInfo | None = None
    read_only_system: ReadOnlySystemInfo | None = None
    attempts: list[AttemptSummary] | None = None
    runs: list[RunSummary] | None = None
    resumed: bool | None = None

    @classmethod
    def of(cls, record: AttemptRecord | Mapping[str, Any]) -> Self:
        """``record`` as a model (a model is returned as it is); ValidationError when it does not fit."""
        return record if isinstance(record, cls) else cls.model_validate(record)

    @property
    def error_text(self) -> str:
        """``Type: message`` of the record's error, or the empty string."""
        return self.error.text() if self.error is not None else ""

    @property
    def is_tainted(self) -> bool:
        """A pass that depended on code the subject changed outside the workdir (refused ones are failures)."""
        return bool(self.passed) and self.taint is not None and bool(self.taint.tainted)

    def updated(self, **changes: Any) -> Self:
        """A copy with top-level ``changes`` (``schema_`` for ``schema``): a key it has keeps its
        place, a new one goes last; checked like any record (RecordError)."""
        return type(self)._checked({**self.to_json(), **{k.rstrip("_"): plain_json(v) for k, v in changes.items()}})

    def annotated(self, keys: Mapping[str, Any], plugin: str) -> Self:
        """A copy with the NEW top-level ``keys`` a ``pytest_maka_record`` hook of ``plugin`` returned;
        RecordError for a key the record already has (a built-in one, or another plugin's)."""
        if not isinstance(keys, Mapping):
            raise RecordError(f"plugin {plugin!r} returned {type(keys).__name__}, not a mapping of new keys")
        values, builtin = self.to_json(), set(part_fields(type(self))[0].values())
        for key in keys:
            if not isinstance(key, str) or key in builtin or key in values:
                what = "a built-in key of the record" if key in builtin else "a key the record already has"
                raise RecordError(f"plugin {plugin!r} returned key {key!r}, {what}; a hook adds new keys only")
        return type(self)._checked({**values, **keys})

    @classmethod
    def _checked(cls, values: Mapping[str, Any]) -> Self:
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            raise RecordError(describe(e, values)) from None

    def network_phases(self) -> dict[str, PhaseNetwork]:
        """``isolation.network.phases`` (empty when the record has none)."""
        network = self.isolation.network if self.isolation is not None else None
        return dict(network.phases or {}) if network is not None else {}


class RecordError(ValueError):
    """A record that does not fit the schema's types: one line naming the key."""


def as_records(records: Iterable[AttemptRecord | Mapping[str, Any]]) -> list[AttemptRecord]:
    """Records as models, for a view handed dicts (a hook's caller, a test); RecordError naming the key."""
    out = []
    for record in records:
        try:
            out.append(AttemptRecord.of(record))
        except ValidationError as e:
            raise RecordError(describe(e, record)) from None
    return out


def describe(error: ValidationError, record: object) -> str:
    """One line for the first problem of a record: its cell, the key, what was expected, what it holds."""
    first = first_error(error, Path("record"), model=AttemptRecord)
    cell = record.get("cell_key") if isinstance(record, Mapping) else None
    where = f"record of cell {cell!r}: " if cell else "record: "
    return f"{where}{first.key or '(the record)'}: {first.message}"
