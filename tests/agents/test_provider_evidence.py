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


# gemini-cli 0.61.0, opencode 1.18.33, pi 0.73.1, qwen-code 0.15.10, mini-swe-agent 2.4.6 (2026-12-04)

_GEMINI_401 = {
    "type": "result",
    "status": "error",
    "error": {"type": "unknown", "message": '[API Error: {"error":{"code":401,"message":"invalid x-api-key"}}]'},
    "stats": {"input_tokens": 0, "output_tokens": 0, "cached": 0},
}


def test_gemini_cli_the_results_api_error_and_the_retries_on_stderr() -> None:
    from pytest_maka.subjects.presets import gemini_cli

    parsed = gemini_cli.PRESET.parse(_lines({"type": "init", "model": "m"}, _GEMINI_401), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(401,))
    stderr = (
        "YOLO mode is enabled.\nAttempt 1 failed with status 429. Retrying with backoff... _ApiError: {}\n"
        "    at throwErrorIfNotOK (file:///x.js:1:2) {\n  status: 429\n}\n"
    )
    assert gemini_cli.evidence("", stderr) == ProviderEvidence(statuses=(429,))
    reply = {"type": "message", "role": "assistant", "content": "Done.", "delta": True}
    done = {"type": "result", "status": "success", "stats": {"input_tokens": 5, "output_tokens": 1}}
    assert gemini_cli.PRESET.parse(_lines(reply, done), lambda p: None).provider.answered is True


def test_opencode_an_error_events_status_code() -> None:
    from pytest_maka.subjects.presets import opencode

    data = {"message": "invalid x-api-key", "statusCode": 401, "isRetryable": False}
    event = {"type": "error", "sessionID": "s", "error": {"name": "APIError", "data": data}}
    parsed = opencode.PRESET.parse(_lines(event), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(401,)) and "invalid x-api-key" in str(parsed.error)


def test_pi_an_assistant_message_that_is_a_failed_request() -> None:
    from pytest_maka.subjects.presets import pi

    failed = {
        "role": "assistant",
        "content": [],
        "usage": {"input": 0, "output": 0},
        "stopReason": "error",
        "errorMessage": '401 {"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}',
    }
    parsed = pi.PRESET.parse(_lines({"type": "message_end", "message": failed}), lambda p: None)
    assert parsed.provider == ProviderEvidence(statuses=(401,), answered=False)
    reply = {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "stopReason": "stop", "usage": {}}
    assert pi.PRESET.parse(_lines({"type": "message_end", "message": reply}), lambda p: None).provider.answered


def _qwen_assistant(*blocks: dict[str, object]) -> dict[str, object]:
    usage = {"input_tokens": 0, "output_tokens": 0}
    return {"type": "assistant", "message": {"id": "m", "role": "assistant", "content": list(blocks), "usage": usage}}


def test_qwen_code_an_api_error_turn_is_a_failed_request_not_an_answer() -> None:
    from pytest_maka.subjects.presets import qwen_code

    text = "[API Error: 401 invalid x-api-key]"
    result = {"type": "result", "subtype": "success", "is_error": False, "result": text, "usage": {}}
    events = [{"type": "system", "subtype": "init", "qwen_code_version": "0.15.10"}]
    events += [_qwen_assistant({"type": "text", "text": text}), result]
    stream = qwen_code.PRESET.parse(_lines(*events), lambda p: None)
    assert stream.provider == ProviderEvidence(statuses=(401,), answered=False)
    assert qwen_code.PRESET.parse(json.dumps(events), lambda p: None).provider == stream.provider  # -o json
    call = {"type": "tool_use", "id": "c", "name": "write_file", "input": {}}
    assert qwen_code.PRESET.parse(_lines(_qwen_assistant(call)), lambda p: None).provider.answered is True


def test_mini_swe_agent_the_request_its_traceback_names_once() -> None:
    from pytest_maka.subjects.presets import mini_swe_agent

    stderr = (
        "AuthenticationError: Error code: 401 - invalid x-api-key\n\nDuring handling of the above exception, "
        "another exception occurred:\n\nOpenAIError: Error code: 401 - invalid x-api-key\n"
    )
    assert mini_swe_agent.evidence("", stderr) == ProviderEvidence(statuses=(401,))
    assert mini_swe_agent.evidence("", "Warning: Input is not a terminal (fd=0).\n") == ProviderEvidence()


def test_aider_litellms_exception_names_and_a_401_that_names_no_status() -> None:
    from pytest_maka.subjects.presets import aider

    out = (
        "litellm.RateLimitError: RateLimitError: OpenAIException - rate limit exceeded: \ntry again shortly\n"
        "The API provider has rate limited you. Try again later or check your quotas.\nRetrying in 0.5 seconds...\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - internal \nserver error\n"
    )
    assert aider.PRESET.parse(out, lambda p: None).provider == ProviderEvidence(statuses=(429, 500))
    refused = "litellm.BadRequestError: OpenAIException - invalid x-api-key\n"
    assert aider.PRESET.parse(refused, lambda p: None).provider == ProviderEvidence()


def test_mini_swe_agent_the_retries_tenacity_logs() -> None:
    from pytest_maka.subjects.presets import mini_swe_agent

    line = "Retrying <unknown> in {} seconds as it raised RateLimitError: litellm.RateLimitError: RateLimitError: x.\n"
    stderr = line.format(4) + line.format(8) + "RateLimitError: Error code: 429 - rate limit exceeded\n"
    assert mini_swe_agent.evidence("", stderr) == ProviderEvidence(statuses=(429, 429, 429))
