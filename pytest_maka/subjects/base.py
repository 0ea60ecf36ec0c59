"""The subject interface: one small class per kind, registered through a hook.

``Subject`` is the whole contract: ``kind``, ``reference``, ``Options`` and ``run`` are the
kind's own; every other member is optional, and ``SubjectBase`` holds its default (no
unsupported tasks, no uploads, mounts, variables, secrets, allowlist hosts or host needs).
The kernel calls every member directly: subclass ``SubjectBase`` or define them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from ..core.hostreqs import Need
from ..core.provider import ProviderEvidence
from ..core.spec import SubjectSpec
from ..core.task import Task
from ..core.usage import CostProvenance
from ..executors.base import ExecResult, ExecSettings, Sandbox


@dataclass(frozen=True)
class RunContext(ExecSettings):
    """Everything a subject needs to start, prepared by the lifecycle: ``env`` holds MAKA_*
    plus the allow-listed variables; ``run()`` executes a command with these settings.
    The budgets are for subjects that see usage while they run (and stop themselves)."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    #: The sandbox isolates the subject (permission requests may then be allowed).
    isolated: bool = True
    #: The whole run's cost cap (``budgets.cohort_max_cost_usd``) and what other attempts of
    #: this run spent so far (read from the shared ledger): a subject over the cap is stopped.
    cohort_max_cost_usd: float | None = None
    cohort_spent: Callable[[], float] | None = None

    def cohort_cost_left(self) -> float | None:
        """USD this attempt may still spend under the whole run's cap, or None without a cap."""
        if self.cohort_max_cost_usd is None:
            return None
        spent = self.cohort_spent() if self.cohort_spent is not None else 0.0
        return self.cohort_max_cost_usd - spent


@dataclass(frozen=True)
class SubjectResult:
    """What a subject hands the kernel: measured facts plus what it reported about itself.

    ``started=False`` means it could not start at all (binary or install missing): an
    infra_failure naming ``error``, never the agent's fault. ``policy_denied`` and
    ``budget_exceeded`` say that a permission denial or a budget ended its turn.
    """

    exit_code: int | None
    timed_out: bool
    duration_s: float
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    trajectory: dict[str, Any] | None = None
    claim: Any = None
    error: str | None = None
    started: bool = True
    policy_denied: str | None = None
    budget_exceeded: str | None = None
    #: The subject's run was cancelled (not by a budget or a timeout): agent_aborted.
    aborted: bool = False
    output_truncated: bool = False
    #: The sandbox limits the run hit (memory, pids), as the executor measured them.
    limits_hit: tuple[str, ...] = ()
    #: Where ``usage.cost_usd`` came from: ``subject``, ``price_table:DATE``, or None.
    cost_source: str | None = None
    #: What the task offered and this run was handed (``mcp_servers``, ``skills``), for the record.
    handoff: dict[str, Any] = field(default_factory=dict)
    #: Where the cost came from and whether it is a guess (typed; ``cost_source`` is the older string).
    cost: CostProvenance | None = None
    #: ``usage`` is what the agent's stream reported up to its stop (killed at its timeout or a
    #: budget, or it never printed its total): a lower bound of what it spent.
    usage_partial: bool = False
    #: The agent's own version, as it reported it (or as installed).
    agent_version: str | None = None
    #: The agent's own name, as it reported it (an ACP agent's ``agentInfo.name``).
    agent_name: str | None = None
    #: What the agent reported of its model requests (None: it says nothing of them).
    provider: ProviderEvidence | None = None
    #: False: another attempt would fail the same way (a setup error), so the cell is not retried.
    retryable: bool = True

    @classmethod
    def from_exec(cls, result: ExecResult, **facts: Any) -> SubjectResult:
        return cls(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            output_truncated=result.stdout_truncated or result.stderr_truncated,
            limits_hit=result.limits_hit,
            **facts,
        )

    @classmethod
    def not_started(cls, missing: str, *, retryable: bool = True) -> SubjectResult:
        return cls(exit_code=None, timed_out=False, duration_s=0.0, started=False, error=missing, retryable=retryable)


def as_subject_result(value: SubjectResult | ExecResult) -> SubjectResult:
    """Accept the older return type (an ExecResult) from third-party subjects."""
    return value if isinstance(value, SubjectResult) else SubjectResult.from_exec(value)


class Subject(Protocol):
    """An agent with its settings. Two settings of one agent are two subjects."""

    kind: ClassVar[str]
    #: True for reference subjects (oracle, nop): no model behind them, safe without a sandbox.
    reference: ClassVar[bool]
    #: Validates the keys of the spec entry other than name/kind.
    Options: ClassVar[type[BaseModel]]

    spec: SubjectSpec

    def unsupported(self, task: Task) -> str | None:
        """A reason this subject cannot attempt ``task`` at all (the cell is skipped), or None."""
        ...

    def uploads(self, task: Task) -> dict[str, Path]:
        """Sandbox path -> host path to upload before the run (e.g. /solution for oracle)."""
        ...

    def env(self) -> dict[str, str]:
        """Extra variables for the run; host values passed by name are included here."""
        ...

    def secrets(self) -> list[str]:
        """Values that must never appear in artifacts or reports."""
        ...

    def mounts(self, task: Task) -> dict[str, Path]:
        """Sandbox path -> host directory bound read-only for the run (an installed agent)."""
        ...

    def egress(self) -> list[str]:
        """Allowlist entries the agent phase reaches through the egress proxy (its provider's
        API), on top of the spec entry's ``egress:`` and ``policy.egress``."""
        ...

    def setup_egress(self) -> list[str]:
        """Allowlist entries the set-up phase reaches (what installing the subject needs)."""
        ...

    def host_needs(self) -> list[Need]:
        """What this host must have before any cell of this subject runs (``hostcheck``)."""
        ...

    def version_problem(self) -> str | None:
        """Before any cell: why the subject's pinned version cannot be had (a registry's answer), or None."""
        ...

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        """Run once, under ``ctx.timeout_sec``; return what happened and what it reported."""
        ...


class SubjectBase:
    """Defaults for the optional parts of the protocol (every member but ``run`` and ``Options``)."""

    kind: ClassVar[str] = ""
    reference: ClassVar[bool] = False

    def __init__(self, spec: SubjectSpec) -> None:
        self.spec = spec
        self.options = spec.options

    def unsupported(self, task: Task) -> str | None:
        return None

    def uploads(self, task: Task) -> dict[str, Path]:
        return {}

    def mounts(self, task: Task) -> dict[str, Path]:
        return {}

    def env(self) -> dict[str, str]:
        return {}

    def secrets(self) -> list[str]:
        return []

    def egress(self) -> list[str]:
        return []

    def setup_egress(self) -> list[str]:
        return []

    def host_needs(self) -> list[Need]:
        return []

    def version_problem(self) -> str | None:
        return None

    def _exec(self, sandbox: Sandbox, command: str, task: Task, ctx: RunContext) -> ExecResult:
        return ctx.run(sandbox, command, cwd=task.workdir)
