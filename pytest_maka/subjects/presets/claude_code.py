"""``claude-code``: Anthropic's Claude Code CLI (npm ``@anthropic-ai/claude-code``), stream-json output."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from ...core.provider import ProviderEvidence
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import mcp
from .base import Invocation, Parsed, Preset, as_mapping, json_lines
from .meter import StreamUsage


def _argv(inv: Invocation) -> list[str]:
    flags = ["--output-format", "stream-json", "--verbose", "--model", inv.model, "--dangerously-skip-permissions"]
    return ["-p", "{prompt}", *flags, *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    if inv.base_url:
        env["ANTHROPIC_BASE_URL"] = inv.base_url
    return env


def message_events(events: Iterable[Any], agent: str) -> Parsed:
    """Claude-style messages (also Qwen Code's): assistant/user content blocks, then one result object."""
    traj = Trajectory(agent=agent)
    result: dict[str, Any] = {}
    retries: list[int | None] = []
    answered = False
    for event in events:
        if not isinstance(event, dict):
            continue
        kind, ts = event.get("type"), event.get("timestamp")
        if kind == "system" and event.get("subtype") == "init":
            traj.model, traj.session_id = event.get("model"), event.get("session_id")
            traj.version = event.get("claude_code_version") or event.get("qwen_code_version")
        elif kind == "system" and event.get("subtype") == "api_retry":
            status = event.get("error_status")
            retries.append(status if isinstance(status, int) and not isinstance(status, bool) else None)
        elif kind == "assistant":
            answered = True
            for block in as_mapping(event.get("message")).get("content") or []:
                if block.get("type") == "text" and block.get("text"):
                    traj.say(block["text"], ts=ts)
                elif block.get("type") == "tool_use":
                    traj.call(block.get("id", ""), block.get("name", ""), block.get("input"), ts=ts)
        elif kind == "user":
            content = as_mapping(event.get("message")).get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    traj.result(block.get("tool_use_id", ""), _text(block.get("content")))
        elif kind == "result":
            result = event
    parsed = _from_result(result, traj)
    parsed.provider = _provider(retries, result, answered)
    return parsed


#: How claude-code words a request that failed after its retries, in its result (``API Error: 401 ...``).
_API_ERROR = re.compile(r"API Error: (\d{3})\b")


def _provider(retries: list[int | None], result: dict[str, Any], answered: bool) -> ProviderEvidence:
    """Each ``api_retry`` event is one failed request (a null status: no answer); a result that is an
    API error is the last one."""
    statuses = [s for s in retries if s is not None]
    unanswered = len(retries) - len(statuses)
    if result.get("is_error"):
        final = _API_ERROR.search(str(result.get("result") or ""))
        if final:
            statuses.append(int(final[1]))
    return ProviderEvidence(tuple(statuses), unanswered, answered)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "" if content is None else str(content)


def _from_result(result: dict[str, Any], traj: Trajectory) -> Parsed:
    if not result:
        return Parsed(error="the agent printed no result", trajectory=traj.to_json())
    raw = as_mapping(result.get("usage"))
    reported: dict[str, Any] = {
        "input_tokens": raw.get("input_tokens"),
        "output_tokens": raw.get("output_tokens"),
        "cache_read_tokens": raw.get("cache_read_input_tokens"),
        "cache_write_tokens": raw.get("cache_creation_input_tokens"),
        "cost_usd": result.get("total_cost_usd"),
    }
    models = {
        name: {
            "input_tokens": m.get("inputTokens"),
            "output_tokens": m.get("outputTokens"),
            "cost_usd": m.get("costUSD"),
        }
        for name, m in as_mapping(result.get("modelUsage")).items()
        if isinstance(m, dict)
    }
    usage = TokenUsage.of({**reported, "models": models})
    error = None
    if result.get("is_error") or str(result.get("subtype", "")).startswith("error"):
        error = f"the agent reported an error ({result.get('subtype')}): {str(result.get('result') or '')[:300]}"
    elif not (usage.input_tokens or usage.output_tokens):
        error = "the agent reported success without any model tokens (no model reply reached it)"
    denials = result.get("permission_denials") or []
    denied = None
    if denials:
        names = sorted({str(as_mapping(d).get("tool_name", "?")) for d in denials})
        denied = f"{len(denials)} tool call(s) denied: {', '.join(names)}"
    stop = result.get("stop_reason") or ("end_turn" if result.get("subtype") == "success" else None)
    return Parsed(
        usage=usage,
        model=traj.model,
        stop_reason=stop,
        error=error,
        denied=denied,
        final_message=result.get("result") if isinstance(result.get("result"), str) else None,
        trajectory=traj.to_json(
            {
                "total_prompt_tokens": usage.input_tokens,
                "total_completion_tokens": usage.output_tokens,
                "total_cost_usd": usage.cost_usd,
            }
        ),
    )


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    return message_events(json_lines(stdout), "claude-code")


def stream_usage(line: str) -> StreamUsage | None:
    """An assistant message's usage (repeated on each of its content blocks: keyed by message id)."""
    if '"assistant"' not in line or '"usage"' not in line:
        return None
    event = json.loads(line)
    message = as_mapping(as_mapping(event).get("message"))
    if event.get("type") != "assistant" or not message.get("usage"):
        return None
    raw = as_mapping(message.get("usage"))
    usage = {
        "input_tokens": raw.get("input_tokens"),
        "output_tokens": raw.get("output_tokens"),
        "cache_read_tokens": raw.get("cache_read_input_tokens"),
        "cache_write_tokens": raw.get("cache_creation_input_tokens"),
    }
    key = message.get("id")
    return StreamUsage(usage, key=str(key) if key else None)


PRESET = Preset(
    kind="claude-code",
    registry="npm",
    package="@anthropic-ai/claude-code",
    version="2.1.332",
    binary="claude",
    model="claude-sonnet-4-5",
    key_env="ANTHROPIC_API_KEY",
    egress=("api.anthropic.com",),
    argv=_argv,
    env=_env,
    parse=_parse,
    mcp=mcp.CLAUDE,
    skills=(".claude/skills",),
    stream_usage=stream_usage,
)
