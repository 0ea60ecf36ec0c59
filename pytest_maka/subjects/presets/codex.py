"""``codex``: OpenAI Codex CLI (npm ``@openai/codex``), ``exec --json`` events, a custom provider for base_url."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ...core.provider import ProviderEvidence
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import mcp
from .base import Invocation, Parsed, Preset, as_mapping, json_lines
from .meter import StreamUsage

PROVIDER = "maka"
#: How codex words a model request the provider failed, or one that got no answer.
_STATUS = re.compile(r"unexpected status (\d{3})\b")
_NO_ANSWER = ("stream disconnected before completion", "error sending request", "timeout waiting")


def _argv(inv: Invocation) -> list[str]:
    argv = ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    argv += ["--disable", "plugins", "-c", "analytics.enabled=false", "-m", inv.model]
    if inv.base_url:  # OPENAI_BASE_URL is ignored: only a provider entry moves codex
        entry = f'{{name="{PROVIDER}",base_url="{inv.base_url}/v1",env_key="{inv.key_env}",wire_api="responses"}}'
        argv += ["-c", f"model_provider={PROVIDER}", "-c", f"model_providers.{PROVIDER}={entry}"]
    return [*argv, *inv.args, "{prompt}"]


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    traj = Trajectory(agent="codex")
    usage = TokenUsage()
    error = final = None
    stop = None
    statuses: list[int] = []
    unanswered = 0
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "error":  # one per failed request (its retries, then the last); turn.failed repeats the last
            text = str(event.get("message") or "")
            status = _STATUS.search(text)
            if status:
                statuses.append(int(status[1]))
            elif any(s in text for s in _NO_ANSWER):
                unanswered += 1
        item = as_mapping(event.get("item"))
        if kind == "thread.started":
            traj.session_id = event.get("thread_id")
        elif kind == "item.completed" and item.get("type") == "agent_message":
            final = item.get("text")
            traj.say(final or "")
        elif kind == "item.completed" and item.get("type") in ("command_execution", "file_change", "mcp_tool_call"):
            name = {"command_execution": "shell", "file_change": "apply_patch"}.get(
                item["type"], item.get("tool", "tool")
            )
            args = (
                {"command": item.get("command")}
                if item["type"] == "command_execution"
                else {"changes": item.get("changes")}
            )
            traj.call(item.get("id", ""), name, args)
            traj.result(item.get("id", ""), item.get("aggregated_output") or item.get("status") or "")
        elif kind == "turn.completed":
            usage += _turn_usage(as_mapping(event.get("usage")))
            stop = "end_turn"
        elif kind in ("turn.failed", "error") and not str(event.get("message") or "").startswith("Reconnecting"):
            message = as_mapping(event.get("error")).get("message") or event.get("message")
            error, stop = f"the agent reported an error: {str(message)[:300]}", "error"
    if stop is None and error is None:
        error = "the agent never completed a turn"
    provider = ProviderEvidence(tuple(statuses), unanswered, answered=stop == "end_turn" or bool(usage.as_dict()))
    return Parsed(
        usage=usage, stop_reason=stop, error=error, final_message=final, trajectory=traj.to_json(), provider=provider
    )


def stream_usage(line: str) -> StreamUsage | None:
    """A turn's usage (``turn.completed``): codex prints none per request."""
    if '"turn.completed"' not in line:
        return None
    event = json.loads(line)
    if event.get("type") != "turn.completed":
        return None
    return StreamUsage(_turn_usage(as_mapping(event.get("usage"))).as_dict())


def _turn_usage(raw: Mapping[str, Any]) -> TokenUsage:
    """A ``turn.completed`` event's usage."""
    reported = {"input_tokens": raw.get("input_tokens"), "output_tokens": raw.get("output_tokens")}
    return TokenUsage.of({**reported, "cache_read_tokens": raw.get("cached_input_tokens")})


PRESET = Preset(
    kind="codex",
    registry="npm",
    package="@openai/codex",
    version="0.171.0",
    binary="codex",
    model="gpt-5-codex",
    key_env="OPENAI_API_KEY",
    egress=("api.openai.com",),
    argv=_argv,
    parse=_parse,
    mcp=mcp.CODEX,
    skills=(".agents/skills",),
    stream_usage=stream_usage,
)
