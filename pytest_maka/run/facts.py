"""The typed facts one attempt (or one step) gathers: of the subject, the verifier, its budget and isolation.

The phases fill these; ``run/record.py`` alone turns them into the record's ``agent``,
``verifier``, ``budget`` and ``isolation`` mappings. A fact's field here is its record key,
in the record's order: a field without a default is always recorded, one with a default only
once it differs from it (``record_of``); a ``MERGED`` field's keys (a nested run's, or a
subject's or verifier's own) go in at its place. So a misspelt fact is a type error, not a
new key, and a new recorded fact is one field here and the line of the phase that learns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.spec import Budgets

#: Field metadata: the field's mapping is merged into its record at its place, not nested under its name.
MERGED = {"merged": True}


@dataclass(frozen=True, slots=True)
class SubjectRun:
    """What the harness measured of the subject's run (all recorded, ``None`` included)."""

    exit_code: int | None
    timed_out: bool
    timeout_sec: float | None
    duration_s: float
    output_truncated: bool
    env_passed: list[str]


@dataclass(frozen=True, slots=True)
class StepSetup:
    """A step's ``setup.sh``: how it ended."""

    exit_code: int | None
    duration_s: float


@dataclass(slots=True)
class AgentFacts:
    """The record's ``agent``: the subject's run, what it reported and what freeze found."""

    #: A step's setup.sh (kept only when the subject did not run after it).
    setup: StepSetup | None = None
    #: Why the subject never started (a budget spent, the environment failed).
    not_started: str | None = None
    run: SubjectRun | None = field(default=None, metadata=MERGED)
    limits_hit: list[str] = field(default_factory=list)
    #: False: the subject could not start.
    started: bool | None = None
    stop_reason: str | None = None
    error: str | None = None
    cost_source: str | None = None
    version: str | None = None
    #: The agent's own name (an ACP agent's ``agentInfo.name``).
    name: str | None = None
    cost: dict[str, Any] | None = None
    usage_partial: bool = False
    #: The provider answered at least one model request; its failures by status (core/provider.py);
    #: why it was unusable (then the attempt is infra_failure).
    provider_answered: bool | None = None
    provider_errors: dict[str, int] | None = None
    provider_unusable: str | None = None
    #: What the subject handed over to the agent (its own keys, ``SubjectResult.handoff``).
    handoff: dict[str, Any] = field(default_factory=dict, metadata=MERGED)
    telemetry: dict[str, Any] | None = None
    workspace_changes: dict[str, int] | None = None
    copied_out: dict[str, Any] | None = None
    copy_truncated: bool = False
    freeze_notes: list[str] = field(default_factory=list)
    usage_problems: list[str] = field(default_factory=list)
    #: A diagnostic, never a verdict: did the subject's claim match the verifier?
    claim_agrees_with_verdict: bool | None = None
    #: A multi-step task: the step whose facts these are.
    decisive_step: str | None = None

    @property
    def timeout_sec(self) -> float | None:
        return self.run.timeout_sec if self.run is not None else None


@dataclass(frozen=True, slots=True)
class VerifierRun:
    """What the verifier did and said (all recorded, ``None`` included)."""

    kind: str
    exit_code: int | None
    timed_out: bool
    timeout_sec: float | None
    duration_s: float
    set_up_ahead: bool
    reward: float | None
    rewards: dict[str, float]
    reward_source: str | None
    error: str | None
    output_path: str
    verdict_channel: str
    #: A pass whose script exited non-zero (a diagnostic, docs/security.md "The verdict channel").
    passed_with_exit_code: int | None = None
    collect_notes: list[str] = field(default_factory=list)
    #: The verifier's own details (``Verdict.details``), merged into the record as they are.
    details: dict[str, Any] = field(default_factory=dict, metadata=MERGED)


@dataclass(frozen=True, slots=True)
class StepsVerdict:
    """A multi-step task's verifier facts: how its steps' verdicts were folded."""

    kind: str
    strategy: str
    reward: float | None
    rewards: dict[str, float]
    reward_source: str | None
    steps_run: int
    steps_total: int
    timed_out: bool
    timeout_sec: float | None
    error: str | None
    stopped: str | None = None


@dataclass(slots=True)
class Tamper:
    """The record's ``verifier.tamper``: how the environment was made fit to verify, and a refusal."""

    #: The restore step's report (``restore_for_verification`` / the executor's own keys).
    report: dict[str, Any] = field(default_factory=dict)
    refused: str | None = None
    paths: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class HookResult:
    """How a collect hook that ran ended (both recorded, ``None`` included)."""

    exit_code: int | None
    timed_out: bool


@dataclass(frozen=True, slots=True)
class CollectHookRun:
    """One ``[[verifier.collect]]`` hook, run in the subject's environment before it stops."""

    command: str
    service: str
    #: Why it did not run (a sidecar's hook without a compose environment).
    not_run: str | None = None
    result: HookResult | None = field(default=None, metadata=MERGED)


@dataclass(slots=True)
class CarriedArtifact:
    """One declared artifact carried (or not) into a separate verifier environment."""

    source: str
    bytes: int
    entries: int
    #: Why it was not carried (then nothing below is set).
    not_carried: str | None = None
    skipped_links: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    truncated: bool = False
    #: What its ``exclude`` patterns removed (the first 50).
    excluded: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeparateEnvironment:
    """Which fresh environment verified: its definition and what the executor says of it."""

    mode: str
    definition: str
    #: ``VerifierEnvironments.describe_verifier``: the executor's own keys (image, container).
    described: dict[str, Any] = field(default_factory=dict, metadata=MERGED)


@dataclass(slots=True)
class VerifierFacts:
    """The record's ``verifier``."""

    run: VerifierRun | None = None
    #: Set instead of ``run`` for a multi-step task (run/steps.py folds its steps).
    steps: StepsVerdict | None = None
    tamper: Tamper | None = None
    #: A separate verifier environment: which one verified.
    environment: SeparateEnvironment | None = None
    #: A separate verifier environment: what was carried into it, per artifact.
    artifacts: list[CarriedArtifact] | None = None
    collect_hooks: list[CollectHookRun] | None = None

    @property
    def timeout_sec(self) -> float | None:
        if self.steps is not None:
            return self.steps.timeout_sec
        return self.run.timeout_sec if self.run is not None else None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """The timeouts a step's subject and verifier got (scaled; the agent's cut by a deadline)."""

    agent_timeout_sec: float | None
    verifier_timeout_sec: float | None


@dataclass(frozen=True, slots=True)
class CellLimits:
    """The experimenter's limits of the cell."""

    cell_timeout_sec: float | None
    max_tokens: int | None
    max_cost_usd: float | None
    max_output_bytes: int | None

    @classmethod
    def of(cls, budgets: Budgets) -> CellLimits:
        return cls(budgets.cell_timeout_sec, budgets.max_tokens, budgets.max_cost_usd, budgets.max_output_bytes)


@dataclass(slots=True)
class BudgetFacts:
    """The record's ``budget`` (its ``exceeded`` is ``AttemptWork.budget_exceeded``)."""

    #: Set once the step got as far as its agent's limit.
    timeouts: Timeouts | None = None
    limits: CellLimits | None = None
    #: A multi-step task: each step's own.
    steps: list[BudgetFacts] | None = None


@dataclass(slots=True)
class IsolationFacts:
    """The record's ``isolation``: what the sandbox reported of itself, then the network it had."""

    #: ``Sandbox.isolation(...)``: the executor's own keys.
    sandbox: dict[str, Any] = field(default_factory=dict, metadata=MERGED)
    teardown_error: str | None = None
    #: ``egress.phase.network_record``: set when the attempt ends (replaces the sandbox's ``network``).
    network: dict[str, Any] | None = None
