"""The outcome taxonomy (DESIGN.md §4) and the one pure function that assigns it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """Every attempt ends in exactly one of these classes."""

    AGENT_SUCCESS = "agent_success"
    AGENT_FAILURE = "agent_failure"
    AGENT_INCOMPLETE = "agent_incomplete"
    BUDGET_EXHAUSTED = "budget_exhausted"
    VERIFIER_FAILURE = "verifier_failure"
    INFRA_FAILURE = "infra_failure"
    POLICY_DENIED = "policy_denied"
    AGENT_ABORTED = "agent_aborted"


#: Classes that count in the official denominator.
OFFICIAL: frozenset[Status] = frozenset({Status.AGENT_SUCCESS, Status.AGENT_FAILURE, Status.AGENT_INCOMPLETE})

#: Classes that are a final result for a cell: a rerun into the same output reuses them.
FINAL: frozenset[Status] = OFFICIAL | {Status.BUDGET_EXHAUSTED}

#: Classes that are the harness's or the verifier's fault, not the subject's.
HARNESS_SIDE: frozenset[Status] = frozenset({Status.VERIFIER_FAILURE, Status.INFRA_FAILURE, Status.POLICY_DENIED})

#: How each class shows in pytest: "passed", "failed" or "error".
PYTEST_OUTCOME: dict[Status, str] = {
    Status.AGENT_SUCCESS: "passed",
    Status.AGENT_FAILURE: "failed",
    Status.AGENT_INCOMPLETE: "failed",
    Status.BUDGET_EXHAUSTED: "failed",
    Status.VERIFIER_FAILURE: "error",
    Status.INFRA_FAILURE: "error",
    Status.POLICY_DENIED: "error",
    Status.AGENT_ABORTED: "failed",
}

#: One-line meaning of each class, shown in reports.
MEANING: dict[Status, str] = {
    Status.AGENT_SUCCESS: "the subject stopped, the verifier ran and passed",
    Status.AGENT_FAILURE: "the subject stopped, the verifier ran and rejected the result",
    Status.AGENT_INCOMPLETE: "the subject did not finish (timeout, crash, non-zero exit) and did not pass",
    Status.BUDGET_EXHAUSTED: "a budget set by the experimenter ran out before success",
    Status.VERIFIER_FAILURE: "the verifier could not give a verdict",
    Status.INFRA_FAILURE: "the platform failed before a fair result",
    Status.POLICY_DENIED: "a safety policy stopped the attempt",
    Status.AGENT_ABORTED: "cancelled by the user or the system",
}


#: Stop reasons a subject may report (``usage.json``) that mean it did not finish its work.
INCOMPLETE_STOP_REASONS: frozenset[str] = frozenset(
    {"max_tokens", "context_length", "refusal", "error", "max_turn_requests", "permission_denied"}
)


#: Budgets judged on figures the subject itself reports (usage.json, a protocol agent's usage
#: updates): a subject can inflate them at will, so they never take a verdict out of the
#: official denominator (a subject stopped for them did not finish: agent_incomplete).
REPORTED_BUDGETS: frozenset[str] = frozenset({"max_tokens", "max_cost_usd"})


@dataclass(frozen=True)
class SubjectOutcome:
    """What happened to the subject's run: measured by the harness, plus the stop reason the
    subject reported (which can only turn a non-pass into agent_incomplete, never into a pass)."""

    exit_code: int | None = None
    timed_out: bool = False
    started: bool = True
    stop_reason: str | None = None

    @property
    def finished(self) -> bool:
        return not self.timed_out and self.exit_code == 0 and self.stop_reason not in INCOMPLETE_STOP_REASONS


@dataclass(frozen=True)
class VerifierOutcome:
    """What the verifier produced. ``passed`` is None when it gave no verdict."""

    ran: bool = True
    #: The verifier did not end in its time. The subject's environment is what it ran on (a FIFO
    #: or /dev/zero where it reads the output keeps it waiting): as in Harbor and Terminal-Bench,
    #: a rejection, unless an experimenter's deadline cut it short (budget_exhausted).
    timed_out: bool = False
    passed: bool | None = None
    #: A line of the verifier's output saying a host could not be resolved or reached. Alone a
    #: diagnostic: the verifier runs code the subject left, which can print any line, so it never
    #: takes an attempt out of the denominator.
    network_failure: str | None = None
    #: Why the harness holds that failure for real on evidence the subject could not produce (the
    #: host is named by the task's own verifier files, and the phase could not reach it: no network
    #: granted, or the harness cannot resolve or reach it either). With no verdict: infra_failure.
    network_confirmed: str | None = None


@dataclass(frozen=True)
class AttemptFacts:
    """Everything classify() looks at. Each field is a fact the harness observed."""

    subject: SubjectOutcome | None = None
    verifier: VerifierOutcome | None = None
    infra_error: str | None = None
    policy_denied: str | None = None
    budget_exceeded: str | None = None
    aborted: bool = False
    #: The subject left its environment so that it cannot be verified fairly (tampering with
    #: protected paths, or a harness step failed on what it left): its result, a failure.
    subject_fault: str | None = None
    #: The verifier passed, but on code the subject changed outside the workdir, and the
    #: policy refuses such passes (``policy.refuse_tainted``): the subject's failure.
    tainted_refused: str | None = None
    #: The model provider answered none of the subject's requests (core/provider.py): no fair result.
    provider_unusable: str | None = None


def classify(facts: AttemptFacts) -> Status:
    """Map the facts of one attempt to exactly one taxonomy class.

    Order matters: cancellation, policy and infrastructure come first because no fair
    verdict exists then; next the verifier is the only authority on pass/fail; only
    when it rejected the result do we ask why the subject did not succeed.
    """
    if facts.aborted:
        return Status.AGENT_ABORTED
    if facts.policy_denied:
        return Status.POLICY_DENIED
    measured_budget = facts.budget_exceeded if facts.budget_exceeded not in REPORTED_BUDGETS else None
    if facts.budget_exceeded and (facts.subject is None or not facts.subject.started):
        return Status.BUDGET_EXHAUSTED
    if facts.provider_unusable or facts.infra_error or facts.subject is None or not facts.subject.started:
        return Status.INFRA_FAILURE
    if facts.subject_fault:
        return Status.AGENT_FAILURE
    verifier = facts.verifier
    if measured_budget and (verifier is None or not verifier.ran or verifier.timed_out):
        return Status.BUDGET_EXHAUSTED  # the deadline left the verifier no (or too little) time
    if verifier is None or not verifier.ran:
        return Status.VERIFIER_FAILURE
    if verifier.passed is None and not verifier.timed_out and verifier.network_failure and verifier.network_confirmed:
        return Status.INFRA_FAILURE  # the verifier's network failed it, as the harness saw on its own side
    if verifier.passed is None and not verifier.timed_out and not verifier.network_failure:
        return Status.VERIFIER_FAILURE
    if verifier.passed and not verifier.timed_out:
        return Status.AGENT_FAILURE if facts.tainted_refused else Status.AGENT_SUCCESS
    if measured_budget:
        return Status.BUDGET_EXHAUSTED
    if not facts.subject.finished:
        return Status.AGENT_INCOMPLETE
    return Status.AGENT_FAILURE


def is_retryable(status: Status, *, retry_verifier: bool = False) -> bool:
    """Only infrastructure failures (and verifier failures, if the policy says so) earn another attempt."""
    return status is Status.INFRA_FAILURE or (retry_verifier and status is Status.VERIFIER_FAILURE)
