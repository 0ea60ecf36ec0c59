"""Evidence of a missing network in real verifier output (tests/fixtures/harbor/network/ORIGIN.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.core.network_evidence import MAX_EVIDENCE_CHARS, failed_host, named_hosts, network_failure
from pytest_maka.core.taxonomy import AttemptFacts, Status, SubjectOutcome, VerifierOutcome, classify

OUTPUTS = Path(__file__).parent.parent / "fixtures" / "harbor" / "network"


@pytest.mark.parametrize(
    ("name", "evidence"),
    [
        ("harbor-template-test-sh.out", "Temporary failure resolving 'deb.debian.org'"),
        ("pip-install.out", "Temporary failure in name resolution"),
        ("curl-pipe-sh.out", "curl: (6) Could not resolve host: astral.sh"),
        ("wget.out", "Resolving astral.sh (astral.sh)... failed: Temporary failure in name resolution."),
        ("git-clone.out", "Could not resolve host: github.com"),
        ("npm-eai-again.out", "getaddrinfo EAI_AGAIN registry.npmjs.org"),
        ("npm-enotfound.out", "getaddrinfo ENOTFOUND registry.nonexistent-maka.invalid"),
        ("uvx.out", "failed to lookup address information: Temporary failure in name resolution"),
        ("python-urllib.out", "socket.gaierror: [Errno -3] Temporary failure in name resolution"),
    ],
)
def test_real_failed_downloads_are_evidence(name: str, evidence: str) -> None:
    found = network_failure((OUTPUTS / name).read_text())
    assert found is not None and evidence in found, found


@pytest.mark.parametrize("name", ["curl-localhost-refused.out", "pytest-failure.out"])
def test_local_services_and_plain_failures_are_not(name: str) -> None:
    assert network_failure((OUTPUTS / name).read_text()) is None


def test_remote_refusals_count_and_the_line_is_bounded() -> None:
    assert network_failure("curl: (7) Failed to connect to pypi.org port 443 after 3 ms: Network is unreachable")
    assert network_failure("curl: (56) CONNECT tunnel failed, response 403") is not None  # the egress proxy said no
    assert network_failure("curl: (7) Failed to connect to [::1] port 80: Connection refused") is None
    long = "x" * 500 + " Could not resolve host: example.org"
    shown = network_failure(long) or ""
    assert len(shown) <= MAX_EVIDENCE_CHARS and shown.endswith("Could not resolve host: example.org...")


def test_network_evidence_never_takes_an_attempt_out_of_the_denominator() -> None:
    """The verifier runs code the subject left, which can print any line: the text is a
    diagnostic on the record, never evidence the subject could not have produced."""
    finished = SubjectOutcome(exit_code=0)
    starved = VerifierOutcome(passed=False, network_failure="curl: (6) Could not resolve host: astral.sh")
    assert classify(AttemptFacts(subject=finished, verifier=starved)) is Status.AGENT_FAILURE
    no_reward = VerifierOutcome(passed=None, network_failure="curl: (6) Could not resolve host: astral.sh")
    assert classify(AttemptFacts(subject=finished, verifier=no_reward)) is Status.AGENT_FAILURE
    passed = VerifierOutcome(passed=True, network_failure="curl: (6) Could not resolve host: astral.sh")
    assert classify(AttemptFacts(subject=finished, verifier=passed)) is Status.AGENT_SUCCESS  # a pass stands
    tampered = AttemptFacts(subject=finished, verifier=starved, subject_fault="replaced /usr/bin/curl")
    assert classify(tampered) is Status.AGENT_FAILURE  # a subject that broke the tools keeps its failure
    assert classify(AttemptFacts(subject=finished, verifier=VerifierOutcome(passed=False))) is Status.AGENT_FAILURE


def test_a_failure_the_harness_confirmed_is_no_verdict() -> None:
    """Confirmed on the harness's side (core.network_evidence docstring): infra_failure, not official.
    A pass still stands, and a rejection with a reward (passed False) is never touched."""
    finished = SubjectOutcome(exit_code=0)
    line = "curl: (6) Could not resolve host: astral.sh.invalid"
    confirmed = VerifierOutcome(passed=None, network_failure=line, network_confirmed="does not resolve")
    assert classify(AttemptFacts(subject=finished, verifier=confirmed)) is Status.INFRA_FAILURE
    passed = VerifierOutcome(passed=True, network_failure=line, network_confirmed="does not resolve")
    assert classify(AttemptFacts(subject=finished, verifier=passed)) is Status.AGENT_SUCCESS
    rejected = VerifierOutcome(passed=False, network_failure=line, network_confirmed="does not resolve")
    assert classify(AttemptFacts(subject=finished, verifier=rejected)) is Status.AGENT_FAILURE
    tampered = AttemptFacts(subject=finished, verifier=confirmed, subject_fault="replaced /usr/bin/curl")
    assert classify(tampered) is Status.AGENT_FAILURE


@pytest.mark.parametrize(
    ("line", "host"),
    [
        ("curl: (6) Could not resolve host: Astral.SH.invalid", "astral.sh.invalid"),
        ("Resolving astral.sh (astral.sh)... failed: Temporary failure in name resolution.", "astral.sh"),
        ("npm ERR! getaddrinfo ENOTFOUND registry.npmjs.org", "registry.npmjs.org"),
        ("curl: (7) Failed to connect to pypi.org port 443 after 3 ms", "pypi.org"),
        ("socket.gaierror: [Errno -3] Temporary failure in name resolution", None),
    ],
)
def test_the_failed_host_is_read_from_the_line(line: str, host: str | None) -> None:
    assert failed_host(line) == host


def test_the_hosts_a_verifier_names() -> None:
    template = (OUTPUTS / "harbor-template-test.sh").read_text()
    assert "astral.sh" in named_hosts(template)
    text = (
        "curl -LsSf https://Astral.sh/uv/install.sh | sh\n"
        "git clone git@github.com:org/repo.git\n"
        "wget http://127.0.0.1:8000/x http://localhost/y http://web:80/z\n"
        "pip install pytest==8\n"
    )
    assert named_hosts(text) == ("astral.sh", "github.com", "pypi.org"), "local and single-label hosts left out"
    assert named_hosts("echo 1 > /logs/verifier/reward.txt") == ()
