"""The one pure classify(): every branch, and the authority rule that only the verifier passes."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from pytest_maka.core.taxonomy import (
    FINAL,
    HARNESS_SIDE,
    OFFICIAL,
    PYTEST_OUTCOME,
    AttemptFacts,
    Status,
    SubjectOutcome,
    VerifierOutcome,
    classify,
    is_retryable,
)

OK = SubjectOutcome(exit_code=0)
PASSED = VerifierOutcome(passed=True)
REJECTED = VerifierOutcome(passed=False)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (AttemptFacts(subject=OK, verifier=PASSED), Status.AGENT_SUCCESS),
        (AttemptFacts(subject=OK, verifier=REJECTED), Status.AGENT_FAILURE),
        (AttemptFacts(subject=SubjectOutcome(exit_code=3), verifier=REJECTED), Status.AGENT_INCOMPLETE),
        (AttemptFacts(subject=SubjectOutcome(timed_out=True), verifier=REJECTED), Status.AGENT_INCOMPLETE),
        (
            AttemptFacts(subject=SubjectOutcome(exit_code=0, stop_reason="refusal"), verifier=REJECTED),
            Status.AGENT_INCOMPLETE,
        ),
        (
            AttemptFacts(subject=SubjectOutcome(exit_code=0, stop_reason="done"), verifier=REJECTED),
            Status.AGENT_FAILURE,
        ),
        # after an agent timeout the verifier still runs, and its verdict stands
        (AttemptFacts(subject=SubjectOutcome(timed_out=True), verifier=PASSED), Status.AGENT_SUCCESS),
        (AttemptFacts(subject=SubjectOutcome(exit_code=1), verifier=PASSED), Status.AGENT_SUCCESS),
        (AttemptFacts(subject=OK, verifier=VerifierOutcome(passed=None)), Status.VERIFIER_FAILURE),
        # a verifier kept waiting by the subject's environment (a FIFO where it reads): a rejection
        (AttemptFacts(subject=OK, verifier=VerifierOutcome(timed_out=True, passed=True)), Status.AGENT_FAILURE),
        (AttemptFacts(subject=OK, verifier=VerifierOutcome(timed_out=True)), Status.AGENT_FAILURE),
        (
            AttemptFacts(subject=OK, verifier=VerifierOutcome(timed_out=True), budget_exceeded="cell_timeout_sec"),
            Status.BUDGET_EXHAUSTED,
        ),
        (AttemptFacts(subject=OK, verifier=None), Status.VERIFIER_FAILURE),
        # tokens and cost are the subject's own report: they never take a rejection out of the denominator
        (AttemptFacts(subject=OK, verifier=REJECTED, budget_exceeded="max_tokens"), Status.AGENT_FAILURE),
        (
            AttemptFacts(subject=SubjectOutcome(exit_code=1), verifier=REJECTED, budget_exceeded="max_cost_usd"),
            Status.AGENT_INCOMPLETE,
        ),
        (AttemptFacts(subject=OK, verifier=REJECTED, budget_exceeded="cell_timeout_sec"), Status.BUDGET_EXHAUSTED),
        (
            AttemptFacts(subject=SubjectOutcome(started=False), budget_exceeded="cohort_timeout_sec"),
            Status.BUDGET_EXHAUSTED,
        ),
        (AttemptFacts(subject=OK, verifier=PASSED, budget_exceeded="max_cost_usd"), Status.AGENT_SUCCESS),
        (AttemptFacts(subject=OK, verifier=PASSED, infra_error="engine down"), Status.INFRA_FAILURE),
        (AttemptFacts(subject=None), Status.INFRA_FAILURE),
        (AttemptFacts(subject=OK, verifier=PASSED, policy_denied="unsandboxed"), Status.POLICY_DENIED),
        (AttemptFacts(subject=OK, verifier=PASSED, aborted=True), Status.AGENT_ABORTED),
        # a subject that tampered with protected paths fails, whatever a verifier said
        (AttemptFacts(subject=OK, verifier=PASSED, subject_fault="tampered"), Status.AGENT_FAILURE),
        (AttemptFacts(subject=OK, verifier=None, subject_fault="tampered"), Status.AGENT_FAILURE),
        (AttemptFacts(subject=OK, subject_fault="tampered", infra_error="engine down"), Status.INFRA_FAILURE),
    ],
)
def test_classify(facts: AttemptFacts, expected: Status) -> None:
    assert classify(facts) is expected


def test_nothing_passes_unless_the_verifier_passed() -> None:
    subjects = [OK, SubjectOutcome(exit_code=2), SubjectOutcome(timed_out=True), SubjectOutcome(started=False), None]
    verifiers = [None, VerifierOutcome(passed=None), REJECTED, VerifierOutcome(timed_out=True, passed=True), PASSED]
    for subject, verifier, infra, denied, budget, aborted in itertools.product(
        subjects, verifiers, [None, "x"], [None, "x"], [None, "x"], [False, True]
    ):
        facts = AttemptFacts(subject, verifier, infra, denied, budget, aborted)
        status = classify(facts)
        if status is Status.AGENT_SUCCESS:
            assert verifier is PASSED and not (infra or denied or aborted), facts


def test_class_sets_are_consistent() -> None:
    assert set(PYTEST_OUTCOME) == set(Status)
    assert OFFICIAL <= FINAL and not (FINAL & HARNESS_SIDE)
    assert {PYTEST_OUTCOME[s] for s in HARNESS_SIDE} == {"error"}
    assert [s for s in Status if is_retryable(s)] == [Status.INFRA_FAILURE]
    assert is_retryable(Status.VERIFIER_FAILURE, retry_verifier=True)


def test_core_imports_neither_pytest_nor_docker() -> None:
    code = (
        "import sys, pytest_maka.core.spec, pytest_maka.core.cohort, pytest_maka.core.records, "
        "pytest_maka.core.stats, pytest_maka.core.taxonomy;"
        "print(sorted(m for m in ('pytest', '_pytest', 'docker', 'jinja2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
