"""The failed model requests a litellm-based agent (aider, mini-swe-agent) prints, by exception class.

litellm raises one class per provider status and the agents print its name with each retry
(``litellm.RateLimitError: RateLimitError: OpenAIException - ...``); the class stands for the
status litellm built it from. ``BadRequestError`` is left out: litellm also raises it for an
OpenAI-style 401 whose body says ``invalid_request_error`` (checked with litellm in aider 0.86.2
against the stand-in's OpenAI error body, 2026-12-04), so it names no status reliably.
"""

from __future__ import annotations

import re

#: Exception class -> the status litellm raises it for (litellm/exceptions.py).
STATUS_OF_CLASS: dict[str, int] = {
    "AuthenticationError": 401,
    "PermissionDeniedError": 403,
    "Timeout": 408,
    "RateLimitError": 429,
    "InternalServerError": 500,
    "BadGatewayError": 502,
    "ServiceUnavailableError": 503,
}


def statuses(text: str, line: re.Pattern[str]) -> list[int]:
    """The status of each match of ``line`` (its group 1: a litellm class name) that names one."""
    return [STATUS_OF_CLASS[m] for m in line.findall(text) if m in STATUS_OF_CLASS]
