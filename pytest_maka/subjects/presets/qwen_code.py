"""``qwen-code``: Qwen Code (npm ``@qwen-code/qwen-code``), OpenAI-compatible, Claude-style stream-json events."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ...core.provider import ProviderEvidence
from . import mcp
from .base import Invocation, Parsed, Preset, as_mapping, first_json, json_lines
from .claude_code import message_events
from .claude_code import stream_usage as claude_stream_usage
from .meter import StreamUsage

#: How it words a request the provider failed, as the turn's text (``[API Error: 401 invalid x-api-key]``).
_API_ERROR = re.compile(r"^\[API Error: (\d{3})\b")


def _argv(inv: Invocation) -> list[str]:
    return ["{prompt}", "--yolo", "--auth-type", "openai", "-o", "stream-json", *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"OPENAI_MODEL": inv.model}
    if inv.base_url:
        env["OPENAI_BASE_URL"] = f"{inv.base_url}/v1"
    return env


def _files(inv: Invocation) -> dict[str, str]:
    return {".qwen/settings.json": json.dumps({"privacy": {"usageStatisticsEnabled": False}})}


def _events(stdout: str) -> list[Any]:
    """One event a line (``-o stream-json``), or the one array ``-o json`` prints."""
    whole = first_json(stdout) if stdout.lstrip().startswith("[") else None
    return whole if isinstance(whole, list) else json_lines(stdout)


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    events = _events(stdout)
    parsed = message_events(events, "qwen-code")
    return replace(parsed, provider=_provider(events))


def _provider(events: Iterable[Any]) -> ProviderEvidence:
    """An assistant turn that is only ``[API Error: NNN ...]`` is a failed request, not an answer."""
    statuses: list[int] = []
    answered = False
    for event in events:
        message = as_mapping(as_mapping(event).get("message"))
        if as_mapping(event).get("type") != "assistant":
            continue
        blocks = [as_mapping(b) for b in message.get("content") or []]
        failed = [_API_ERROR.match(str(b.get("text") or "")) for b in blocks if b.get("type") == "text"]
        if blocks and len(failed) == len(blocks) and all(failed):
            statuses += [int(m[1]) for m in failed if m]
        else:
            answered = True
    return ProviderEvidence(tuple(statuses), 0, answered)


def stream_usage(line: str) -> StreamUsage | None:
    """An assistant message's usage, as claude-code's (qwen-code prints the same events)."""
    return claude_stream_usage(line)


PRESET = Preset(
    kind="qwen-code",
    registry="npm",
    package="@qwen-code/qwen-code",
    version="0.15.10",
    binary="qwen",
    model="qwen3-coder-plus",
    key_env="OPENAI_API_KEY",
    egress=("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com"),
    argv=_argv,
    env=_env,
    files=_files,
    parse=_parse,
    mcp=mcp.QWEN,
    skills=(".qwen/skills",),
    stream_usage=stream_usage,
)
