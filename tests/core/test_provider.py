"""The pure rule: was the model provider usable, from the statuses the agent reported and what got no answer."""

from __future__ import annotations

from pytest_maka.core.provider import (
    NO_ANSWER,
    Connection,
    ProviderEvidence,
    failed_statuses,
    judge,
    silent_connections,
)
from pytest_maka.core.taxonomy import AttemptFacts, Status, SubjectOutcome, VerifierOutcome, classify


def test_every_request_rejected_for_authentication_is_unusable_and_named() -> None:
    judged = judge(ProviderEvidence(statuses=(401,) * 11))
    assert judged.errors == {"401": 11}
    assert judged.unusable == "provider refused every request: 401 x11 (authentication rejected)"
    assert judge(ProviderEvidence(statuses=(401, 403))).unusable is not None


def test_every_request_throttled_or_failed_is_unusable() -> None:
    judged = judge(ProviderEvidence(statuses=(429, 529, 503, 429)))
    assert judged.unusable == "provider failed every request: 429 x2, 503 x1, 529 x1"


def test_no_request_answered_is_unusable() -> None:
    judged = judge(ProviderEvidence(unanswered=6))
    assert judged.errors == {NO_ANSWER: 6}
    assert judged.unusable == "provider never answered: no answer x6"


def test_intermittent_failures_are_the_agents_weather_and_counted() -> None:
    judged = judge(ProviderEvidence(statuses=(429, 429, 500), unanswered=1, answered=True))
    assert judged.unusable is None
    assert judged.errors == {"429": 2, "500": 1, NO_ANSWER: 1}


def test_a_request_the_agent_got_wrong_keeps_the_result_the_agents() -> None:
    """A 400 is the agent's request, not the provider's choice: nothing here is unusable."""
    assert judge(ProviderEvidence(statuses=(400, 401))).unusable is None
    assert judge(ProviderEvidence(statuses=(404,))).unusable is None


def test_no_evidence_is_usable() -> None:
    judged = judge(ProviderEvidence())
    assert judged.unusable is None and judged.errors == {}


def test_evidence_merges() -> None:
    merged = ProviderEvidence((401,)).merged(ProviderEvidence((429,), 2, answered=True))
    assert merged == ProviderEvidence((401, 429), 2, True)


def test_an_unusable_provider_is_infra_failure_before_any_verdict() -> None:
    base = AttemptFacts(subject=SubjectOutcome(exit_code=1), verifier=VerifierOutcome(passed=False))
    assert classify(base) is Status.AGENT_INCOMPLETE
    down = AttemptFacts(
        subject=SubjectOutcome(exit_code=1),
        verifier=VerifierOutcome(passed=False),
        provider_unusable="provider refused every request: 401 x3 (authentication rejected)",
    )
    assert classify(down) is Status.INFRA_FAILURE
    assert classify(AttemptFacts(subject=SubjectOutcome(exit_code=0), provider_unusable="x", aborted=True)) is (
        Status.AGENT_ABORTED
    )


def test_silent_connections_are_requests_to_the_provider_that_got_nothing_back() -> None:
    seen = [
        Connection("127.0.0.1:4000", True, bytes_out=900, bytes_in=0),  # sent, never answered
        Connection("127.0.0.1:4000", True, bytes_out=900, bytes_in=None),
        Connection("127.0.0.1:4000", True, bytes_out=900, bytes_in=120),  # answered (a 401 is an answer)
        Connection("127.0.0.1:4000", True, bytes_out=0, bytes_in=0),  # opened, nothing sent
        Connection("127.0.0.1:5000", True, bytes_out=900, bytes_in=0),  # not the provider
        Connection("api.anthropic.com:443", False, bytes_out=900, bytes_in=0),  # refused
        Connection("api.anthropic.com:443", True, bytes_out=517, bytes_in=0),
    ]
    assert silent_connections(seen, ["127.0.0.1:4000"]) == 2
    assert silent_connections(seen, ["api.anthropic.com"]) == 1
    assert silent_connections(seen, []) == 0


def test_the_proxys_statuses_are_the_providers_failures_a_side_requests_404_is_not() -> None:
    seen = [
        Connection("model.test:8080", True, 900, 246, statuses=(401,)),
        Connection("model.test:8080", True, 900, 903, statuses=(200, 401, 404, 401)),  # keep-alive
        Connection("model.test:8080", True, 900, 246, statuses=(503,)),
        Connection("other.test:8080", True, 900, 246, statuses=(401,)),  # not the provider
        Connection("model.test:8080", False, 90, 120, statuses=(403,)),  # the proxy refused it
    ]
    assert failed_statuses(seen, ["model.test:8080"]) == (401, 401, 401, 503)
    assert failed_statuses(seen, []) == ()


def test_what_the_proxy_saw_and_what_the_agent_reported_of_the_same_requests_count_once() -> None:
    agent = ProviderEvidence((401, 401, 429), unanswered=1)
    both = agent.seen_by_the_proxy((401, 401, 401), unanswered=0)
    assert sorted(both.statuses) == [401, 401, 401, 429] and both.unanswered == 1 and not both.answered
    silent = ProviderEvidence(answered=False).seen_by_the_proxy((401,) * 7, unanswered=0)
    judged = judge(silent)
    assert judged.errors == {"401": 7}
    assert judged.unusable == "provider refused every request: 401 x7 (authentication rejected)"
    assert judge(ProviderEvidence(answered=True).seen_by_the_proxy((401,), 0)).unusable is None
