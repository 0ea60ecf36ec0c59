"""One attempt's mutable state (``AttemptWork``): the facts its phases gather for classify() and the record."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import progress
from ..core.cell import Cell
from ..core.steps import StepOutcome
from ..core.taint import ReadOnlySystem, TaintRecord
from ..core.task import AGENT_LOGS_DIR, Task
from ..core.taxonomy import REPORTED_BUDGETS, AttemptFacts, Status, SubjectOutcome, VerifierOutcome
from ..egress.log import LOG_NAME, EgressLog
from ..egress.plan import NetworkPlan, build_plan
from ..executors.base import Executor
from ..subjects.base import Subject
from ..subjects.install.cache import watch_installs
from ..verifiers.base import Verdict, Verifier
from .facts import AgentFacts, BudgetFacts, IsolationFacts, VerifierFacts
from .settings import RunSettings

INSTRUCTION_FILE = f"{AGENT_LOGS_DIR}/instruction.md"
#: The record's artifact keys and where they are in an attempt directory (listed when present).
ARTIFACT_FILES = {
    "instruction": "instruction.md",
    "agent_log": "agent.stdout.txt",
    "agent_stderr": "agent.stderr.txt",
    "agent_logs": "agent",
    "trajectory": "agent/trajectory.json",
    "diff": "workspace.diff",
    "verifier_output": "verifier.stdout.txt",
    "verifier_stderr": "verifier.stderr.txt",
    "verifier_logs": "verifier",
    "harness_error": "harness-error.txt",
    "egress_log": LOG_NAME,
}


def attempt_plan(work: AttemptWork) -> NetworkPlan:
    """The attempt's NetworkPlan: task, policy, the subject's declared needs and its own hook."""
    needs = (*work.cell.subject.egress, *work.subject.egress())
    return build_plan(work.cell.task, work.settings.policy, needs, tuple(work.subject.setup_egress()))


#: The timing an install into the agent cache is booked to (a cold cache only; never ``setup``).
INSTALL = "install"


def subject_mounts(subject: Subject, task: Task, work: AttemptWork) -> dict[str, Path]:
    """The subject's read-only mounts (an installed agent). When the agent was not in the cache,
    the time spent installing it (or waiting for the worker installing it) is ``timings.install``."""
    with watch_installs() as watch:
        try:
            return dict(subject.mounts(task))
        finally:
            if watch.seconds is not None:
                work.add_time(INSTALL, watch.seconds)


@dataclass(slots=True)
class AttemptWork:
    """Mutable state of one attempt: what happened, measured by the harness."""

    cell: Cell
    subject: Subject
    verifier: Verifier
    executor: Executor
    settings: RunSettings
    attempt_dir: Path
    subject_outcome: SubjectOutcome | None = None
    verifier_outcome: VerifierOutcome | None = None
    infra_error: str | None = None
    policy_denied: str | None = None
    budget_exceeded: str | None = None
    aborted: bool = False
    subject_fault: str | None = None
    #: The model provider was unusable (core/provider.py): why.
    provider_unusable: str | None = None
    verdict: Verdict | None = None
    #: The subject's usage report, normalised (``core.usage`` keys).
    usage: dict[str, Any] = field(default_factory=dict)
    claim: Any = None
    trajectory: dict[str, Any] | None = None
    agent_facts: AgentFacts = field(default_factory=AgentFacts)
    verifier_facts: VerifierFacts = field(default_factory=VerifierFacts)
    isolation: IsolationFacts = field(default_factory=IsolationFacts)
    plan: NetworkPlan = field(default_factory=NetworkPlan)
    egress: EgressLog | None = None
    budget_facts: BudgetFacts = field(default_factory=BudgetFacts)
    timings: dict[str, float] = field(default_factory=dict)
    #: False when an infra error says another attempt would fail the same way.
    retryable: bool = True
    #: A multi-step task's steps that ran (run/steps.py); None for a single-step task.
    steps: StepsRun | None = None
    #: What the whole run spent so far (USD; run/spend.py), when it has a cost cap.
    cohort_spent: Callable[[], float] | None = None
    #: What the subject changed outside the workdir and what the verifier used of it (run/taint.py).
    taint: TaintRecord | None = None
    #: A failed attempt whose subject met the host's read-only system (run/taint.py).
    read_only_system: ReadOnlySystem | None = None

    def for_step(self, task: Task, attempt_dir: Path) -> AttemptWork:
        """Fresh facts for one step of this attempt: the step's view of the task, its own
        artifact dir; the same subject, verifier, executor and settings, the attempt's
        isolation, egress log and cohort spend (the step's NetworkPlan from its own networks)."""
        step = AttemptWork(
            replace(self.cell, task=task),
            self.subject,
            self.verifier,
            self.executor,
            self.settings,
            attempt_dir,
            isolation=self.isolation,
            egress=self.egress,
            cohort_spent=self.cohort_spent,
        )
        step.plan = attempt_plan(step)
        return step

    def facts(self) -> AttemptFacts:
        return AttemptFacts(
            subject=self.subject_outcome,
            verifier=self.verifier_outcome,
            infra_error=self.infra_error,
            policy_denied=self.policy_denied,
            budget_exceeded=self.budget_exceeded,
            aborted=self.aborted,
            subject_fault=self.subject_fault,
            provider_unusable=self.provider_unusable,
            tainted_refused=self.taint.reason() if self.taint is not None and self.taint.refused else None,
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        progress.phase(phase)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(phase, time.perf_counter() - t0)

    def add_time(self, phase: str, seconds: float) -> None:
        """Book ``seconds`` to ``phase`` (negative: taken out of it)."""
        self.timings[phase] = self.timings.get(phase, 0.0) + seconds

    def error_for(self, status: Status, facts: AttemptFacts) -> dict[str, str] | None:
        """A one-line cause for every non-pass, in the reader's terms."""
        if status is Status.AGENT_SUCCESS:
            return None
        score = self.verdict.score if self.verdict else None
        message = {
            Status.AGENT_ABORTED: "cancelled by the user or the system",
            Status.POLICY_DENIED: facts.policy_denied,
            Status.INFRA_FAILURE: (
                facts.infra_error or facts.provider_unusable or self._verifier_problem_if_confirmed(facts)
            ),
            Status.BUDGET_EXHAUSTED: f"budget exhausted: {facts.budget_exceeded}" + self._why_not_started(),
            Status.VERIFIER_FAILURE: self._verifier_problem(),
            Status.AGENT_INCOMPLETE: self._incomplete_reason(),
            Status.AGENT_FAILURE: self._rejection(score),
        }[status]
        if status in (Status.AGENT_INCOMPLETE, Status.AGENT_FAILURE) and facts.budget_exceeded in REPORTED_BUDGETS:
            message = f"{message or status.value}; over {facts.budget_exceeded} by its own report"
        if self.read_only_system is not None:  # the subject met the host's read-only system
            message = f"{message or status.value} ({self.read_only_system.note})"
        return {"type": status.value, "message": message or status.value}

    def _verifier_problem_if_confirmed(self, facts: AttemptFacts) -> str:
        if facts.verifier is not None and facts.verifier.network_confirmed:
            return f"no verdict: {self._verifier_problem()}"
        return "the subject could not be started"

    def _why_not_started(self) -> str:
        why = self.agent_facts.not_started
        return f" ({why})" if why else ""

    def _verifier_problem(self) -> str:
        if self.verifier_outcome is not None and self.verifier_outcome.timed_out:
            return f"the verifier timed out after {self.verifier_facts.timeout_sec} s"
        if self.verdict is not None and self.verdict.error:
            return self.verdict.error
        return "the verifier gave no verdict"

    def _rejection(self, score: float | None) -> str:
        if self.subject_fault:
            return f"not verified: {self.subject_fault}"
        if self.taint is not None and self.taint.refused:
            return f"refused (policy.refuse_tainted): {self.taint.reason()}"
        reason = self.verdict.details.get("reason") if self.verdict else None
        if reason:
            return f"the verifier rejected the result: {reason}"
        return f"the verifier rejected the result (reward {score})"

    def _incomplete_reason(self) -> str:
        if self.subject_outcome is not None and self.subject_outcome.timed_out:
            return f"the subject timed out after {self.agent_facts.timeout_sec} s"
        if self.subject_outcome is not None and self.subject_outcome.exit_code == 0:
            return f"the subject stopped early: {self.subject_outcome.stop_reason}"
        code = self.subject_outcome.exit_code if self.subject_outcome else None
        hit = self.agent_facts.limits_hit
        return f"the subject exited with code {code}" + (f" (hit its {' and '.join(hit)} limit)" if hit else "")

    def artifacts(self, out_dir: Path) -> dict[str, str]:
        """Paths (relative to the output directory) of what this attempt left."""
        d = self.attempt_dir
        present = _entries(d)
        if "agent" in present:
            present |= {f"agent/{name}" for name in _entries(d / "agent")}
        rel = d.relative_to(out_dir).as_posix()
        out = {"dir": rel}
        out.update({key: f"{rel}/{name}" for key, name in ARTIFACT_FILES.items() if name in present})
        return out


@dataclass(slots=True)
class StepsRun:
    """The steps of a multi-step task that ran, each with its own work and outcome, in order."""

    done: list[tuple[AttemptWork, StepOutcome]]
    #: Why the remaining steps did not run (None: every step ran).
    stopped: str | None = None


def _entries(directory: Path) -> set[str]:
    """The names in ``directory`` (one listing instead of a stat per artifact), empty if it is none."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()
