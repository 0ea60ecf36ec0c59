"""Was the model provider usable? A pure rule over evidence the subject's model cannot forge.

The evidence is what the agent CLI itself reports of its requests (claude-code's
``api_retry`` events with their status codes, codex's ``unexpected status`` errors, an ACP
agent's output) and what the egress proxy saw of the provider's connections (requests that got
no byte back; the status codes of plain-HTTP answers). A provider that
answered no model request at all, every one rejected for authentication, refused with a
rate limit, overload or server error, or never answered, leaves no fair result: the attempt
is ``infra_failure`` (not official), named, not retried, and its subject's remaining cells
are stopped. A provider that answered some requests and failed others is the agent's
weather: the attempt stays official and the failures are counted (``agent.provider_errors``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from . import hostpattern

#: Statuses that reject the key itself.
AUTH_STATUSES: frozenset[int] = frozenset({401, 403})
#: Statuses that say the provider would not serve now (rate limit, overload).
THROTTLE_STATUSES: frozenset[int] = frozenset({408, 429, 529})
#: The key of ``provider_errors`` for a request that got no answer (hung up, or timed out).
NO_ANSWER = "no answer"


def provider_side(status: int) -> bool:
    """A status the provider chose, not one the agent's request caused (a 400 is the agent's)."""
    return status in AUTH_STATUSES or status in THROTTLE_STATUSES or status >= 500


@dataclass(frozen=True)
class ProviderEvidence:
    """What is known of one run's model requests."""

    #: The error status codes of model requests, as the agent reported them, in order.
    statuses: tuple[int, ...] = ()
    #: Model requests that got no answer (connection closed or timed out), as the agent or the egress log saw.
    unanswered: int = 0
    #: The agent got at least one model reply (it reported tokens, or a turn that completed).
    answered: bool = False

    def merged(self, other: ProviderEvidence) -> ProviderEvidence:
        """Both runs' evidence (a multi-step task)."""
        return ProviderEvidence(
            self.statuses + other.statuses, self.unanswered + other.unanswered, self.answered or other.answered
        )

    def seen_by_the_proxy(self, statuses: Iterable[int], unanswered: int) -> ProviderEvidence:
        """With what the egress proxy saw of the same requests: per status, and for requests without
        an answer, the larger of the two counts (one request the agent reports and the proxy saw is
        counted once)."""
        both = Counter(self.statuses) | Counter(statuses)
        return ProviderEvidence(tuple(both.elements()), max(self.unanswered, unanswered), self.answered)


@dataclass(frozen=True)
class ProviderJudgement:
    """The rule's answer: the failures counted, and why the provider was unusable (None: it was usable)."""

    errors: dict[str, int]
    unusable: str | None = None


def judge(evidence: ProviderEvidence) -> ProviderJudgement:
    """Usable unless no model request was answered and every one failed on the provider's side."""
    counts = Counter(str(s) for s in evidence.statuses)
    if evidence.unanswered:
        counts[NO_ANSWER] = evidence.unanswered
    errors = dict(sorted(counts.items()))
    if evidence.answered or not errors:
        return ProviderJudgement(errors)
    if any(not provider_side(s) for s in evidence.statuses):
        return ProviderJudgement(errors)  # the agent's own bad request: its result
    listed = ", ".join(f"{k} x{n}" for k, n in errors.items())
    if evidence.statuses and all(s in AUTH_STATUSES for s in evidence.statuses):
        why = f"provider refused every request: {listed} (authentication rejected)"
    elif not evidence.statuses:
        why = f"provider never answered: {listed}"
    else:
        why = f"provider failed every request: {listed}"
    return ProviderJudgement(errors, why)


@dataclass(frozen=True)
class Connection:
    """One connection of the agent phase as the egress proxy logged it."""

    destination: str
    allowed: bool
    bytes_out: int | None
    bytes_in: int | None
    #: The status codes of the HTTP answers the proxy read (none from TLS).
    statuses: tuple[int, ...] = ()


def _to_providers(connections: Iterable[Connection], providers: Iterable[str]) -> list[Connection]:
    """The allowed connections to a provider (an allowlist entry of the subject's)."""
    patterns = hostpattern.parse_all(list(providers))
    out = []
    for c in connections:
        host, _, port = c.destination.rpartition(":")
        if c.allowed and port.isdigit() and hostpattern.allowed(patterns, host, int(port)):
            out.append(c)
    return out


def silent_connections(connections: Iterable[Connection], providers: Iterable[str]) -> int:
    """Connections to a provider that carried a request and got not one byte back: requests the
    provider never answered, as the egress proxy saw them."""
    return sum(1 for c in _to_providers(connections, providers) if (c.bytes_out or 0) > 0 and not c.bytes_in)


def failed_statuses(connections: Iterable[Connection], providers: Iterable[str]) -> tuple[int, ...]:
    """The provider-side failure statuses (``provider_side``) a provider answered with, as the egress
    proxy read them (plain HTTP, also tunnelled), in order. A 400 or 404 is left out: the proxy cannot tell a model
    request from a side request (a tunnel's answer is encrypted: nothing from TLS providers)."""
    return tuple(s for c in _to_providers(connections, providers) for s in c.statuses if provider_side(s))
