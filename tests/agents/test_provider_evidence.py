"""What the presets read of their model requests' failures, from the lines the pinned CLIs print
(claude-code 2.1.332 and codex 0.171.0 against the stand-in with faults, 2026-12-04)."""

from __future__ import annotations

import json

from pytest_maka.core.provider import ProviderEvidence
from pytest_maka.subjects.presets import claude_code, codex


def _lines(*events: dict[str, object]) -> str:
    return "\n".join(json.dumps(e) for e in events)


def _retry(status: int | None) -> dict[str, object]:
    return {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": status, "error": "x"}


def test_claude_code_api_retry_events_and_the_final_api_error() -> None:
    result = {"type": "result", "subtype": "success", "is_error": True, "result": "API Error: 401 invalid x-api-key"}
    parsed = claude_code.PRESET.parse(_lines(_retry(401), _retry(401), _retry(None), result), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(401, 401, 401), unanswered=1, answered=False)


def test_claude_code_a_reply_after_a_retry_is_answered() -> None:
    assistant = {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}]}}
    result = {"type": "result", "subtype": "success", "result": "hi", "usage": {"input_tokens": 5, "output_tokens": 1}}
    parsed = claude_code.PRESET.parse(_lines(_retry(429), assistant, result), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(429,), answered=True)
    assert parsed.error is None and parsed.usage.input_tokens == 5


def test_codex_reconnects_are_failed_requests_not_the_runs_error() -> None:
    url = "url: http://127.0.0.1:1/v1/responses"
    events = [
        {"type": "error", "message": f"Reconnecting... 1/5 (unexpected status 429 Too Many Requests: x, {url})"},
        {
            "type": "error",
            "message": "Reconnecting... 2/5 (stream disconnected before completion: error sending request)",
        },
        {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2, "cached_input_tokens": 0}},
    ]
    parsed = codex.PRESET.parse(_lines(*events), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(429,), unanswered=1, answered=True)
    assert parsed.error is None and parsed.stop_reason == "end_turn"
    assert parsed.usage.as_dict() == {"input_tokens": 10, "output_tokens": 2, "cache_read_tokens": 0}


def test_codex_every_request_refused() -> None:
    message = "unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:1/v1/responses"
    events = [{"type": "error", "message": f"Reconnecting... {i}/5 ({message})"} for i in range(1, 6)]
    events += [{"type": "error", "message": message}, {"type": "turn.failed", "error": {"message": message}}]
    parsed = codex.PRESET.parse(_lines(*events), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(401,) * 6)
    assert parsed.stop_reason == "error" and "401" in str(parsed.error)
