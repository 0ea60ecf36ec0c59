"""``mini-swe-agent``: mini (PyPI ``mini-swe-agent``), one bash tool; its trajectory file holds cost and exit status."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ...core import subject_json
from ...core.provider import ProviderEvidence
from ...core.task import AGENT_LOGS_DIR
from ...core.trajectory import Trajectory
from ...core.usage import TokenUsage
from . import litellm_errors
from .base import Invocation, Parsed, Preset, as_mapping

TRAJ_FILE = f"{AGENT_LOGS_DIR}/mini.traj.json"
#: The OpenAI SDK's words for the request that ended the run, in the traceback mini prints on stderr
#: (``AuthenticationError: Error code: 401 - invalid x-api-key``).
_STATUS = re.compile(r"Error code: (\d{3})\b")
#: A request it retries (tenacity's log line): ``Retrying <unknown> in 4 seconds as it raised RateLimitError: ...``;
#: an intermittent 429 it got through left none (2026-12-04).
_RETRIED = re.compile(r"^Retrying .* seconds as it raised (\w+):", re.MULTILINE)


def _argv(inv: Invocation) -> list[str]:
    return ["-t", "{prompt}", "-y", "--exit-immediately", "-m", inv.model, "-o", TRAJ_FILE, *inv.args]


def _env(inv: Invocation) -> dict[str, str]:
    env = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if inv.base_url:
        env["OPENAI_API_BASE"] = f"{inv.base_url}/v1"
    return env


def _parse(stdout: str, read: Callable[[str], bytes | None]) -> Parsed:
    raw = read(TRAJ_FILE)
    try:
        data = subject_json.loads(raw) if raw else {}
    except ValueError:
        data = {}
    traj = Trajectory(agent="mini-swe-agent")
    usage = TokenUsage()
    final = None
    for message in data.get("messages") or []:
        role = message.get("role")
        if role == "assistant":
            if message.get("content"):
                final = str(message["content"])
                traj.say(final)
            for call in message.get("tool_calls") or []:
                fn = as_mapping(call.get("function"))
                traj.call(call.get("id", ""), fn.get("name", ""), _args(fn.get("arguments")))
            usage += _reply_usage(as_mapping(as_mapping(as_mapping(message.get("extra")).get("response")).get("usage")))
        elif role == "tool":
            traj.result(message.get("tool_call_id", ""), message.get("content") or "")
    info = as_mapping(data.get("info"))
    cost = as_mapping(info.get("model_stats")).get("instance_cost")
    if isinstance(cost, (int, float)) and cost > 0:  # 0 means "not tracked" here, never "free"
        usage = replace(usage, cost_usd=float(cost))
    status = info.get("exit_status")
    error = None
    if not data:
        error = "mini-swe-agent wrote no trajectory"
    elif status not in ("Submitted", None):
        error = f"mini-swe-agent ended with {status}"
    reason = {"Submitted": "end_turn", "LimitsExceeded": "max_turn_requests"}.get(str(status), "error")
    return Parsed(
        usage=usage,
        stop_reason=reason,
        error=error if reason == "error" else None,
        final_message=str(info.get("submission") or final or f"mini-swe-agent exit status: {status}"),
        trajectory=traj.to_json(),
    )


def evidence(stdout: str, stderr: str) -> ProviderEvidence:
    """The requests it retried, and the one its fatal traceback names (chained exceptions repeat it:
    the last one counts)."""
    retried = litellm_errors.statuses(stderr, _RETRIED)
    found = _STATUS.findall(stderr)
    return ProviderEvidence((*retried, *((int(found[-1]),) if found else ())))


def _args(value: Any) -> Any:
    try:
        return subject_json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def _reply_usage(raw: Mapping[str, Any]) -> TokenUsage:
    return TokenUsage.of({"input_tokens": raw.get("prompt_tokens"), "output_tokens": raw.get("completion_tokens")})


PRESET = Preset(
    kind="mini-swe-agent",
    registry="pypi",
    package="mini-swe-agent",
    version="2.4.6",
    binary="mini",
    model="openai/gpt-4o",
    key_env="OPENAI_API_KEY",
    egress=("api.openai.com",),
    argv=_argv,
    env=_env,
    parse=_parse,
    no_mcp="mini-swe-agent has one bash tool and no MCP client",
    evidence=evidence,
)
