"""``qwen-code``: Qwen Code (npm ``@qwen-code/qwen-code``), OpenAI-compatible, one JSON array of messages."""

from __future__ import annotations

import json
from collections.abc import Callable

from . import mcp
from .base import Invocation, Parsed, Preset, first_json
from .claude_code import message_events


def _argv(inv: Invocation) -> list[str]:
    return ["{prompt}", "--yolo", "--auth-type", "openai", "-o", "json", *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"OPENAI_MODEL": inv.model}
    if inv.base_url:
        env["OPENAI_BASE_URL"] = f"{inv.base_url}/v1"
    return env


def _files(inv: Invocation) -> dict[str, str]:
    return {".qwen/settings.json": json.dumps({"privacy": {"usageStatisticsEnabled": False}})}


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    events = first_json(stdout)
    return message_events(events if isinstance(events, list) else [], "qwen-code")


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
)
