"""Faults of the scripted model server: a provider that rejects keys, rate-limits, fails, hangs or hangs up.

A fault applies to model requests (the wire endpoints' POSTs; ``count_tokens`` and ``GET``
are left alone), counted from 1 across the server's life: ``every=1`` faults every one of
them, ``every=K`` only each K-th (an intermittent provider the agent can retry through).

    status 401, 403, 429, 529, 5xx  the provider's error body for the request's protocol
    hang                             the request is read, then never answered (until the server stops)
    no-answer                        the connection is closed without a response

    python -m pytest_maka.testing.model_server --fault 401
    python -m pytest_maka.testing.model_server --fault 429 --fault-every 2
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

HANG = "hang"
NO_ANSWER = "no-answer"
#: Status codes a fault may answer with.
STATUSES = (400, 401, 403, 404, 429, 500, 502, 503, 504, 529)
KINDS = (*(str(s) for s in STATUSES), HANG, NO_ANSWER)

#: The Anthropic error type, and the OpenAI/Gemini status name, per code.
_ANTHROPIC = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_GOOGLE = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
_MESSAGES = {
    401: "invalid x-api-key",
    403: "this key may not use this model",
    429: "rate limit exceeded: try again shortly",
    529: "overloaded",
}


@dataclass(frozen=True)
class Fault:
    """What goes wrong: ``kind`` (a status code as text, ``hang`` or ``no-answer``) on every ``every``-th request."""

    kind: str
    every: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if self.every < 1:
            raise ValueError(f"fault every must be 1 or more (got {self.every})")

    @property
    def status(self) -> int | None:
        return int(self.kind) if self.kind.isdigit() else None


class FaultPlan:
    """Counts model requests and says which one a fault hits (thread-safe)."""

    def __init__(self, fault: Fault | None) -> None:
        self.fault = fault
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        #: Released when the server stops: hung requests end then.
        self.stopping = threading.Event()

    def next(self) -> Fault | None:
        """The fault of the next model request, or None when it is answered normally."""
        if self.fault is None:
            return None
        with self._lock:
            number = next(self._count)
        return self.fault if number % self.fault.every == 0 else None


def error_body(wire: str, status: int) -> dict[str, Any]:
    """The provider's own error body for ``status`` on protocol ``wire``."""
    message = _MESSAGES.get(status, "internal server error" if status >= 500 else "request failed")
    if wire == "anthropic":
        kind = _ANTHROPIC.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if wire == "gemini":
        return {"error": {"code": status, "message": message, "status": _GOOGLE.get(status, "INTERNAL")}}
    code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
    kind = {401: "invalid_request_error", 429: "requests"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
