"""The parts of a record (``agent``, ``verifier``, ``usage``, ...) and what they share: strict
types, extra keys kept, and the keys' order kept on a round trip (core/record_model.py).

Open-ended on purpose (``extra="allow"``): a preset, an executor or a ``pytest_maka_record``
hook may add keys to a part; they are kept as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidatorFunctionWrapHandler,
    model_validator,
)

#: A JSON number as written: an int stays an int, a float a float (bool is neither).
Num = int | float
#: A JSON value a task or a subject chose (metadata, a claim).
JsonValue = Any


class RecordPart(BaseModel):
    """A part of a record: strict types, extra keys kept, and the keys' order kept on a round trip."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, populate_by_name=True)

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        model = handler(data)
        if isinstance(data, Mapping) and isinstance(model, RecordPart):
            model._order = tuple(k for k in data if isinstance(k, str))
        return model

    def to_json(self) -> dict[str, Any]:
        """The part as the ledger writes it: the keys it was given, in their order, by their JSON
        names. Parts are rebuilt; other JSON values (lists, mappings) are the model's own."""
        names, nested = part_fields(type(self))
        given = self.model_fields_set
        values = {
            names[k]: plain_json(v) if k in nested else v.value if isinstance(v, Enum) else v
            for k, v in self.__dict__.items()
            if k in given
        }
        values.update(self.__pydantic_extra__ or {})
        if not self._order:
            return values
        ordered = {k: values[k] for k in self._order if k in values}
        if len(ordered) < len(values):
            ordered.update((k, v) for k, v in values.items() if k not in ordered)
        return ordered

    def extra(self, key: str) -> Any:
        """An extra key's value (one a preset or a hook added), or None."""
        return (self.model_extra or {}).get(key)


_NAMES: dict[type[BaseModel], tuple[dict[str, str], frozenset[str]]] = {}


def part_fields(cls: type[BaseModel]) -> tuple[dict[str, str], frozenset[str]]:
    """Field name -> JSON key of a model (``schema_`` -> ``schema``), and the fields that may
    hold parts; computed once per class."""
    known = _NAMES.get(cls)
    if known is None:
        names = {n: f.alias or n for n, f in cls.model_fields.items()}
        nested = frozenset(n for n, f in cls.model_fields.items() if _holds_part(f.annotation))
        known = _NAMES[cls] = (names, nested)
    return known


def _holds_part(annotation: object) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, RecordPart):
        return True
    return any(_holds_part(arg) for arg in get_args(annotation))


def plain_json(value: Any) -> Any:
    """``value`` (a part, or a list or mapping of parts) as plain JSON."""
    if isinstance(value, RecordPart):
        return value.to_json()
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_json(v) for v in value]
    return value.value if isinstance(value, Enum) else value


class Usage(RecordPart):
    """What the subject spent, as it reported it (None where unknown)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: Num | None = None


class CostInfo(RecordPart):
    """Where the agent's cost came from (``agent.cost``)."""

    source: str | None = None
    guess: bool | None = None


class AgentInfo(RecordPart):
    """What the harness measured of the subject's run (a preset may add keys: kept as extras)."""

    exit_code: int | None = None
    timed_out: bool | None = None
    timeout_sec: Num | None = None
    duration_s: Num | None = None
    output_truncated: bool | None = None
    stop_reason: str | None = None
    version: str | None = None
    name: str | None = None
    cost_source: str | None = None
    cost: CostInfo | None = None
    usage_partial: bool | None = None
    provider_answered: bool | None = None
    provider_errors: dict[str, int] | None = None
    provider_unusable: str | None = None
    claim_agrees_with_verdict: bool | None = None
    started: bool | None = None


class VerifierInfo(RecordPart):
    """What the verifier did and said (a verifier may add keys: kept as extras)."""

    kind: str | None = None
    exit_code: int | None = None
    timed_out: bool | None = None
    timeout_sec: Num | None = None
    duration_s: Num | None = None
    reward: Num | None = None
    rewards: dict[str, Num] | None = None
    reward_source: str | None = None
    error: str | None = None
    output_path: str | None = None


class PhaseNetwork(RecordPart):
    """What one phase (setup, agent, verifier) could reach, and what it was refused."""

    mode: str | None = None
    declared: str | None = None
    refused_destinations: dict[str, int] | None = None


class NetworkInfo(RecordPart):
    """``isolation.network``: one summary string per phase (extras) and ``phases``, a mapping per phase."""

    phases: dict[str, PhaseNetwork] | None = None


class IsolationInfo(RecordPart):
    """The isolation the attempt actually got (each executor adds its own keys: kept as extras)."""

    executor: str | None = None
    sandbox: str | None = None
    network: NetworkInfo | None = None


class BudgetInfo(RecordPart):
    """The limits the attempt ran under, and the one it crossed (``exceeded``)."""

    agent_timeout_sec: Num | None = None
    verifier_timeout_sec: Num | None = None
    cell_timeout_sec: Num | None = None
    max_tokens: Num | None = None
    max_cost_usd: Num | None = None
    max_output_bytes: Num | None = None
    exceeded: str | None = None


class Artifacts(RecordPart):
    """Paths of the attempt's files, relative to the output directory; ``dir`` is the attempt's directory."""

    __pydantic_extra__: dict[str, str] = Field(init=False)  # every other key: a name -> a path
    dir: str | None = None

    def paths(self) -> dict[str, str]:
        """Every artifact but ``dir``, name -> path."""
        return dict(self.model_extra or {})

    def get(self, key: str) -> str | None:
        """The path of artifact ``key`` (``dir`` included), or None."""
        return self.dir if key == "dir" else (self.model_extra or {}).get(key)


class ErrorInfo(RecordPart):
    """The one-line cause of a non-pass."""

    type: str | None = None
    message: str | None = None
    retryable: bool | None = None

    def text(self) -> str:
        """``type: message`` (or whichever of them is set)."""
        kind, msg = self.type or "", self.message or ""
        return f"{kind}: {msg}" if kind and msg else kind or msg


class StepSubject(RecordPart):
    """The subject's part of one step."""

    exit_code: int | None = None
    timed_out: bool | None = None
    timeout_sec: Num | None = None
    duration_s: Num | None = None
    usage: dict[str, JsonValue] | None = None


class StepEntry(RecordPart):
    """One declared step of a multi-step task (``run: false`` for a step not reached)."""

    index: int | None = None
    name: str | None = None
    run: bool | None = None
    status: str | None = None
    verdict: str | None = None
    score: Num | None = None
    rewards: dict[str, Num] | None = None
    min_reward: JsonValue = None
    duration_s: Num | None = None
    timings: dict[str, Num] | None = None
    subject: StepSubject | None = None
    verifier: dict[str, JsonValue] | None = None
    network: dict[str, JsonValue] | None = None
    error: ErrorInfo | None = None
    artifacts: dict[str, str] | None = None
    not_run: str | None = None


class TaintInfo(RecordPart):
    """What the subject changed outside the workdir and what the verifier used of it (core/taint.py)."""

    schema_: str | None = Field(default=None, alias="schema")
    mechanism: str | None = None
    checked: bool | None = None
    changed_count: int | None = None
    changed: list[str] | None = None
    accessed: list[str] | None = None
    paths: list[str] | None = None
    tainted: bool | None = None
    refused: bool | None = None
    notes: list[str] | None = None


class ReadOnlySystemInfo(RecordPart):
    """A failed attempt whose subject met the host's read-only system (core/taint.py)."""

    schema_: str | None = Field(default=None, alias="schema")
    needs_writable_system: bool | None = None
    evidence: str | None = None
    seen_in: str | None = None
    note: str | None = None


class AttemptSummary(RecordPart):
    """One attempt of a cell, as its cell record lists them (``attempts``)."""

    attempt: int
    status: str
    error: ErrorInfo | None = None
    run: int | None = None


class RunSummary(RecordPart):
    """One run of a cell (``--maka-rerun``), as its cell record lists them (``runs``)."""

    run: int
    status: str
    passed: bool
    attempt: int
