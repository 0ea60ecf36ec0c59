"""``pi``: the pi coding agent (npm ``@mariozechner/pi-coding-agent``), JSONL events; no permission system."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ...core.provider import ProviderEvidence
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from .base import Invocation, Parsed, Preset, as_mapping, json_lines
from .meter import StreamUsage

#: A failed request's ``errorMessage``: the provider's status, then its body (``401 {"type":"error",...``).
_STATUS = re.compile(r"^(\d{3}) ")


def _argv(inv: Invocation) -> list[str]:
    model = inv.model if "/" in inv.model else f"anthropic/{inv.model}"
    return ["-p", "--mode", "json", "--model", model, *inv.args, "{prompt}"]


def _files(inv: Invocation) -> dict[str, str]:
    if not inv.base_url:
        return {}
    return {".pi/agent/models.json": json.dumps({"providers": {"anthropic": {"baseUrl": inv.base_url}}})}


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    traj = Trajectory(agent="pi")
    usage = TokenUsage()
    final = stop = error = None
    statuses: list[int] = []
    answered = False
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "session":
            traj.session_id = event.get("id")
        elif kind == "message_end":
            message = as_mapping(event.get("message"))
            ts = message["timestamp"] / 1000 if isinstance(message.get("timestamp"), (int, float)) else None
            if message.get("role") == "assistant":
                traj.model = message.get("model") or traj.model
                usage += _message_usage(as_mapping(message.get("usage")))
                stop = message.get("stopReason")
                if message.get("errorMessage"):
                    error = f"the agent reported an error: {str(message['errorMessage'])[:300]}"
                    status = _STATUS.match(str(message["errorMessage"]))
                    if status and stop == "error":
                        statuses.append(int(status[1]))
                else:
                    answered = True
                for block in message.get("content") or []:
                    if block.get("type") == "text":
                        final = block.get("text")
                        traj.say(final or "", ts=ts)
                    elif block.get("type") == "toolCall":
                        traj.call(block.get("id", ""), block.get("name", ""), block.get("arguments"), ts=ts)
            elif message.get("role") == "toolResult":
                text = "\n".join(str(c.get("text", "")) for c in message.get("content") or [] if isinstance(c, dict))
                traj.result(message.get("toolCallId", ""), text)
    reason = {"stop": "end_turn", "length": "max_tokens", "error": "error", "aborted": "cancelled"}.get(str(stop), stop)
    if reason is None and error is None:
        error = "the agent never finished a message"
    return Parsed(
        usage=usage,
        model=traj.model,
        stop_reason=reason,
        error=error,
        final_message=final,
        trajectory=traj.to_json(),
        provider=ProviderEvidence(tuple(statuses), 0, answered),
    )


def _message_usage(raw: Mapping[str, Any]) -> TokenUsage:
    """An assistant message's tokens and cost."""
    reported = {"input_tokens": raw.get("input"), "output_tokens": raw.get("output")}
    cached = {"cache_read_tokens": raw.get("cacheRead"), "cache_write_tokens": raw.get("cacheWrite")}
    return TokenUsage.of({**reported, **cached, "cost_usd": as_mapping(raw.get("cost")).get("total")})


def stream_usage(line: str) -> StreamUsage | None:
    """An assistant message's tokens and cost (``message_end``)."""
    if '"message_end"' not in line:
        return None
    event = json.loads(line)
    message = as_mapping(event.get("message"))
    if event.get("type") != "message_end" or message.get("role") != "assistant":
        return None
    return StreamUsage(_message_usage(as_mapping(message.get("usage"))).as_dict())


PRESET = Preset(
    kind="pi",
    registry="npm",
    package="@mariozechner/pi-coding-agent",
    version="0.73.1",
    binary="pi",
    model="claude-sonnet-4-5",
    key_env="ANTHROPIC_API_KEY",
    egress=("api.anthropic.com",),
    argv=_argv,
    env=lambda inv: {"PI_OFFLINE": "1"},
    files=_files,
    parse=_parse,
    no_mcp='pi has no MCP client by design (its README: "No MCP.")',
    skills=(".pi/agent/skills",),
    stream_usage=stream_usage,
)
