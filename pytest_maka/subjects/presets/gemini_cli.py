"""``gemini-cli``: Google's Gemini CLI (npm ``@google/gemini-cli``), stream-json events; needs its auth setting."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ...core.provider import ProviderEvidence
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import mcp
from .base import Invocation, Parsed, Preset, as_mapping, json_lines

#: The failed request its result reports (``[API Error: {"error":{"code":401,...``).
API_ERROR = re.compile(r'API Error: (?:\{"error":\{"code":\s*)?(\d{3})\b')
#: A failed request it retries, on stderr (``Attempt 1 failed with status 429. Retrying with backoff...``).
_RETRIED = re.compile(r"^Attempt \d+ failed with status (\d{3})\b", re.MULTILINE)


def _argv(inv: Invocation) -> list[str]:
    return ["-p", "{prompt}", "--yolo", "--skip-trust", "-o", "stream-json", "-m", inv.model, *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    return {"GOOGLE_GEMINI_BASE_URL": inv.base_url} if inv.base_url else {}


def _files(inv: Invocation) -> dict[str, str]:
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "privacy": {"usageStatisticsEnabled": False}}
    return {".gemini/settings.json": json.dumps(settings)}  # without the auth type it exits 41


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    traj = Trajectory(agent="gemini-cli")
    result: dict[str, Any] = {}
    final = ""
    answered = False
    for event in json_lines(stdout):
        kind, ts = event.get("type"), event.get("timestamp")
        if kind == "init":
            traj.model, traj.session_id = event.get("model"), event.get("session_id")
        elif kind == "message" and event.get("role") == "assistant":
            answered = True
            final = final + str(event.get("content") or "") if event.get("delta") else str(event.get("content") or "")
            traj.say(str(event.get("content") or ""))
        elif kind == "tool_use":
            answered = True
            traj.call(event.get("tool_id", ""), event.get("tool_name", ""), event.get("parameters"), ts=ts)
            final = ""
        elif kind == "tool_result":
            traj.result(event.get("tool_id", ""), event.get("output") or event.get("status") or "")
        elif kind == "result":
            result = event
    stats = as_mapping(result.get("stats"))
    reported = {"input_tokens": stats.get("input_tokens"), "output_tokens": stats.get("output_tokens")}
    usage = TokenUsage.of({**reported, "cache_read_tokens": stats.get("cached")})
    error = None
    failed = API_ERROR.search(str(as_mapping(result.get("error")).get("message", "")))
    provider = ProviderEvidence((int(failed[1]),) if failed else (), 0, answered)
    if not result:
        error = "the agent printed no result"
    elif result.get("status") != "success":
        message = str(as_mapping(result.get("error")).get("message", ""))[:300]
        error = f"the agent reported {result.get('status')}: {message}"
    return Parsed(
        usage=usage,
        model=traj.model,
        stop_reason="end_turn" if error is None else "error",
        error=error,
        final_message=final or None,
        trajectory=traj.to_json(),
        provider=provider,
    )


def evidence(stdout: str, stderr: str) -> ProviderEvidence:
    """The requests it retried, one stderr line each (its stream-json output does not mention them)."""
    return ProviderEvidence(tuple(int(m) for m in _RETRIED.findall(stderr)))


PRESET = Preset(
    kind="gemini-cli",
    registry="npm",
    package="@google/gemini-cli",
    version="0.61.0",
    binary="gemini",
    model="gemini-2.5-pro",
    key_env="GEMINI_API_KEY",
    egress=("generativelanguage.googleapis.com",),
    argv=_argv,
    env=_env,
    files=_files,
    parse=_parse,
    mcp=mcp.GEMINI,
    skills=(".gemini/skills",),
    evidence=evidence,
)
