"""``aider``: aider (PyPI ``aider-chat``), Chat Completions without tools; its price table kept offline;
exact tokens from its event log (stdout rounds them to ``2.4k``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from ...core.provider import ProviderEvidence
from ...core.task import AGENT_LOGS_DIR
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import litellm_errors
from .base import Invocation, Parsed, Preset, json_lines
from .meter import StreamUsage

#: One failed request, retried or not: ``litellm.RateLimitError: RateLimitError: OpenAIException - ...``.
_FAILED = re.compile(r"^litellm\.(\w+): ", re.MULTILINE)
_TOKENS = re.compile(r"Tokens: ([\d.]+)(k?) sent, ([\d.]+)(k?) received(?:\. Cost: \$([\d.]+) message)?")


#: aider's event log (``--analytics-log``; written with analytics off): ``message_send`` events
#: carry each reply's exact ``prompt_tokens``, ``completion_tokens`` and ``cost``.
EVENTS_FILE = f"{AGENT_LOGS_DIR}/aider-events.jsonl"


def _argv(inv: Invocation) -> list[str]:
    flags = ["--yes-always", "--no-git", "--no-check-update", "--no-analytics", "--no-show-model-warnings"]
    flags += ["--analytics-log", EVENTS_FILE]
    return ["--message", "{prompt}", "--model", inv.model, *flags, "--no-pretty", *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if inv.base_url:
        env["OPENAI_API_BASE"] = f"{inv.base_url}/v1"
    return env


def _files(inv: Invocation) -> dict[str, str]:
    """A seeded price table, fresh each run: without it aider fetches one from GitHub at start."""
    entry = {"max_input_tokens": 128000, "max_output_tokens": 16384, "litellm_provider": "openai", "mode": "chat"}
    return {".aider/caches/model_prices_and_context_window.json": json.dumps({inv.model.split("/")[-1]: entry})}


def _count(number: str, kilo: str) -> int:
    return round(float(number) * (1000 if kilo else 1))


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    traj = Trajectory(agent="aider")
    raw = read(EVENTS_FILE)
    usage = _exact(raw.decode("utf-8", errors="replace")) if raw else TokenUsage()
    if not usage.as_dict():  # no event log: the rounded "Tokens: 2.4k sent" lines
        for match in _TOKENS.finditer(stdout):
            usage += _rounded(match)
    edits = re.findall(r"Applied edit to (\S+)", stdout)
    body = stdout.strip()[-4000:]
    traj.say(body)
    for i, path in enumerate(edits):
        traj.call(f"edit-{i + 1}", "apply_edit", {"path": path, "content": "(SEARCH/REPLACE block)"})
        traj.result(f"edit-{i + 1}", f"Applied edit to {path}")
    error = None if usage.as_dict() else "aider reported no token usage (no model reply reached it)"
    provider = ProviderEvidence(tuple(litellm_errors.statuses(stdout, _FAILED)), 0, bool(usage.as_dict()))
    return Parsed(
        provider=provider,
        usage=usage,
        stop_reason="end_turn" if not error else "error",
        error=error,
        final_message=body[-1000:] or None,
        trajectory=traj.to_json(),
    )


def _rounded(match: re.Match[str]) -> TokenUsage:
    """One "Tokens: 2.4k sent, 26 received. Cost: ..." line."""
    cost = float(match[5]) if match[5] else None
    return TokenUsage(_count(match[1], match[2]), _count(match[3], match[4]), cost_usd=cost)


def _exact(events: str) -> TokenUsage:
    """Exact tokens (and cost, when aider priced it) summed over the ``message_send`` events."""
    usage = TokenUsage()
    for event in json_lines(events):
        props = event.get("properties")
        if event.get("event") != "message_send" or not isinstance(props, dict):
            continue
        cost = props.get("cost") if isinstance(props.get("cost"), (int, float)) and props["cost"] > 0 else None
        reported = {"input_tokens": props.get("prompt_tokens"), "output_tokens": props.get("completion_tokens")}
        usage += TokenUsage.of({**reported, "cost_usd": cost})  # cost 0: aider could not price it
    return usage


def stream_usage(line: str) -> StreamUsage | None:
    """One reply's tokens (aider rounds counts of 1,000 and more to ``2.4k``) and cost."""
    match = _TOKENS.search(line)
    if match is None:
        return None
    return StreamUsage(_rounded(match).as_dict())


PRESET = Preset(
    kind="aider",
    registry="pypi",
    package="aider-chat",
    version="0.86.2",
    binary="aider",
    model="gpt-4o",
    key_env="OPENAI_API_KEY",
    egress=("api.openai.com",),
    argv=_argv,
    env=_env,
    files=_files,
    parse=_parse,
    no_mcp="aider has no MCP client and no tools",
    stream_usage=stream_usage,
)
