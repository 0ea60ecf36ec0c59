"""Ten subjects of different kinds over twelve tasks, with the facts the choice section shows:
versions, cost sources and guesses, tokens, a pass at its timeout, a pass over budget, cells a
budget stopped, and two subjects whose cost-vs-pass points tie."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_maka.core.record_model import AttemptRecord
from pytest_maka.core.records import attempt_record, cell_record
from pytest_maka.core.taxonomy import Status

from .builders import make_cell

T0 = 1_700_000_000.0
TASKS = [f"task-{i:02d}" for i in range(12)]


@dataclass(frozen=True)
class Profile:
    """How one subject's cells look: its kind, version, passes out of 12, cost per cell and its source."""

    name: str
    kind: str
    version: str | None
    passes: int
    cost: float | None
    source: str | None = "agent"
    guess: bool = False
    tokens: tuple[int, int] | None = (40_000, 2_000)
    seconds: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)


PROFILES = (
    Profile("claude-sonnet", "claude-code", "2.0.14", 10, 0.42),
    Profile("codex-mini", "codex", "0.46.0", 8, 0.18, source="price_table"),
    Profile("aider-unknown-model", "aider", "0.86.1", 7, 0.25, guess=True),
    Profile("gemini-flash", "gemini-cli", None, 7, 0.25),  # ties with aider: same rate, same cost
    Profile("qwen-acp", "acp", "1.2.0", 6, 0.09),
    Profile("mini-swe", "mini-swe-agent", "1.14.2", 9, 0.31, source="price_table"),
    Profile("pi-haiku", "pi", "0.9.3", 5, 0.05),
    Profile("opencode-local", "opencode", "0.15.2", 4, None, source=None, tokens=None),
    Profile("scripted-baseline", "command", None, 3, 0.0, source=None, tokens=None, seconds=2.0),
    Profile("oracle", "oracle", None, 12, None, source=None, tokens=None, seconds=1.0),
)


def _cell(p: Profile, i: int, task: str) -> AttemptRecord:
    passed = (i * 5 + len(p.name)) % 12 < p.passes
    status = Status.AGENT_SUCCESS if passed else Status.AGENT_FAILURE
    agent: dict[str, Any] = {"exit_code": 0, "timed_out": False, "timeout_sec": 600}
    budget: dict[str, Any] = {"agent_timeout_sec": 600}
    usage: dict[str, Any] = {}
    if p.version:
        agent["version"] = p.version
    if p.kind == "acp":  # the name the ACP agent gave in its initialize answer
        agent["name"] = "@qwen-code/qwen-code"
    if p.tokens:
        usage |= {"input_tokens": p.tokens[0] + 1000 * i, "output_tokens": p.tokens[1]}
    if p.cost is not None:
        usage["cost_usd"] = p.cost
    if p.source:
        agent["cost"] = {"source": p.source, "guess": p.guess}
    if p.kind == "claude-code" and i == 0:  # passed, but only when its timeout hit
        status, agent["timed_out"], agent["usage_partial"] = Status.AGENT_SUCCESS, True, True
    if p.kind == "mini-swe-agent" and i in (1, 2):  # passed over its token budget
        status = Status.AGENT_SUCCESS
        budget |= {"max_tokens": 150_000, "exceeded": "max_tokens"}
        usage["input_tokens"] = 1_190_000
    if p.kind == "codex" and i == 11:  # stopped by its cost budget
        status = Status.BUDGET_EXHAUSTED
        budget |= {"max_cost_usd": 0.5, "exceeded": "max_cost_usd"}
        agent["stop_reason"] = "budget"
    error = None
    if status is Status.BUDGET_EXHAUSTED:
        error = {"type": "BudgetExhausted", "message": "max_cost_usd 0.5 crossed"}
    record = attempt_record(
        make_cell(task, p.name, p.kind),
        cohort="choose",
        attempt=1,
        status=status,
        started=T0 + i,
        finished=T0 + i + p.seconds * (1 + i / 12),
        score=1.0 if status is Status.AGENT_SUCCESS else 0.0,
        usage=usage,
        agent=agent,
        budget=budget,
        artifacts={"dir": f"cells/{p.name}-{task}/attempt-1"},
        error=error,
    )
    return cell_record([record])


def records(profiles: tuple[Profile, ...] = PROFILES) -> list[AttemptRecord]:
    """One record per (subject, task)."""
    return [_cell(p, i, task) for p in profiles for i, task in enumerate(TASKS)]


def records_every_class() -> list[AttemptRecord]:
    """:func:`records` with task-10 spread over the classes (more class columns in the subject table)."""
    classes = list(Status)
    return [
        r.updated(status=classes[i % len(classes)].value, passed=classes[i % len(classes)] is Status.AGENT_SUCCESS)
        if r.task == "task-10"
        else r
        for i, r in enumerate(records())
    ]
