"""``opencode``: opencode (npm ``opencode-ai``), JSONL parts; the provider's baseURL through its config content."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ...core.provider import ProviderEvidence
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import mcp
from .base import Invocation, Parsed, Preset, as_mapping, json_lines
from .meter import StreamUsage


def _provider(inv: Invocation) -> tuple[str, str]:
    provider, _, model = inv.model.partition("/")
    return (provider, model) if model else ("anthropic", provider)


def _argv(inv: Invocation) -> list[str]:
    provider, model = _provider(inv)
    return ["run", "--format", "json", "-m", f"{provider}/{model}", *inv.args, "{prompt}"]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    if inv.base_url:
        provider, _ = _provider(inv)
        config = {"provider": {provider: {"options": {"baseURL": f"{inv.base_url}/v1"}}}}
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
    return env


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    traj = Trajectory(agent="opencode")
    usage = TokenUsage()
    final = error = stop = None
    statuses: list[int] = []
    for event in json_lines(stdout):
        kind, part = event.get("type"), as_mapping(event.get("part"))
        ts = event["timestamp"] / 1000 if isinstance(event.get("timestamp"), (int, float)) else None
        traj.session_id = traj.session_id or event.get("sessionID")
        if kind == "text":
            final = part.get("text")
            traj.step("agent", str(final or ""), ts=ts)
        elif kind == "tool_use":
            state = as_mapping(part.get("state"))
            traj.call(part.get("callID", ""), part.get("tool", ""), state.get("input"), ts=ts)
            traj.result(part.get("callID", ""), state.get("output") or state.get("error") or state.get("status") or "")
        elif kind == "step_finish":
            usage += _step_usage(part)
            stop = "end_turn" if part.get("reason") == "stop" else stop
        elif kind == "error":
            data = as_mapping(as_mapping(event.get("error")).get("data"))
            if isinstance(data.get("statusCode"), int):  # the provider's answer to its last attempt
                statuses.append(data["statusCode"])
            message = data.get("message") or event.get("error")
            error, stop = f"the agent reported an error: {str(message)[:300]}", "error"
    if stop is None and error is None:
        error = "the agent never finished a step"
    provider = ProviderEvidence(tuple(statuses), 0, answered=bool(usage.as_dict()) or final is not None)
    return Parsed(
        usage=usage, stop_reason=stop, error=error, final_message=final, trajectory=traj.to_json(), provider=provider
    )


def stream_usage(line: str) -> StreamUsage | None:
    """One step's tokens and cost (``step_finish``)."""
    if '"step_finish"' not in line:
        return None
    event = json.loads(line)
    if event.get("type") != "step_finish":
        return None
    return StreamUsage(_step_usage(as_mapping(event.get("part"))).as_dict())


def _step_usage(part: Mapping[str, Any]) -> TokenUsage:
    """A ``step_finish`` part's tokens and cost."""
    tokens = as_mapping(part.get("tokens"))
    cache = as_mapping(tokens.get("cache"))
    reported = {"input_tokens": tokens.get("input"), "output_tokens": tokens.get("output")}
    cached = {"cache_read_tokens": cache.get("read"), "cache_write_tokens": cache.get("write")}
    return TokenUsage.of({**reported, **cached, "cost_usd": part.get("cost")})


PRESET = Preset(
    kind="opencode",
    registry="npm",
    package="opencode-ai",
    version="1.18.33",
    binary="opencode",
    model="anthropic/claude-sonnet-4-5",
    key_env="ANTHROPIC_API_KEY",
    egress=("api.anthropic.com",),  # not registry.npmjs.org: its plugin install at start-up is refused
    argv=_argv,
    env=_env,
    parse=_parse,
    mcp=mcp.OPENCODE,
    skills=(".config/opencode/skills",),
    stream_usage=stream_usage,
)
