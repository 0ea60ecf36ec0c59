"""One normalised trajectory per attempt, compatible with Harbor's ATIF, and what it tells afterwards.

Shape (``schema_version`` ATIF-v1.2): ``{session_id, agent: {name, version, model_name},
steps: [{step_id, timestamp, source, message, tool_calls: [{tool_call_id, function_name,
arguments}], observation: {results: [{source_call_id, content}]}, metrics}], final_metrics}``.
Converters (ACP updates, each preset's transcript) build it through ``Trajectory``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA_VERSION = "ATIF-v1.2"
MAX_TEXT = 8000
_WRITE_NAMES = re.compile(r"(write|edit|create|apply_patch|str_replace|replace|patch)", re.I)
_TEST_RUN = re.compile(r"\b(pytest|py\.test|unittest|tox|nox|go test|cargo test|npm (run )?test|make test|jest)\b")
_PATH_KEYS = ("file_path", "path", "filePath", "absolute_path", "filename")
_CMD_KEYS = ("command", "cmd", "commands")


def _iso(ts: float | str | None) -> str | None:
    if ts is None or isinstance(ts, str):
        return ts
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def _cut(text: Any) -> str:
    s = text if isinstance(text, str) else str(text)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + " [...]"


@dataclass
class Trajectory:
    """Builds the steps in order; tool results attach to the step that made the call."""

    agent: str
    version: str | None = None
    model: str | None = None
    session_id: str | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    def step(self, source: str, message: str = "", *, ts: float | str | None = None, **metrics: Any) -> dict:
        """Append a step from ``source`` (user, agent or system)."""
        step: dict[str, Any] = {"step_id": len(self.steps) + 1, "source": source, "message": _cut(message)}
        if ts is not None:
            step["timestamp"] = _iso(ts)
        known = {k: v for k, v in metrics.items() if v is not None}
        if known:
            step["metrics"] = known
        self.steps.append(step)
        return step

    def say(self, text: str, *, ts: float | str | None = None, **metrics: Any) -> None:
        """Agent text; consecutive chunks of one message are joined."""
        last = self.steps[-1] if self.steps else None
        if last and last["source"] == "agent" and not last.get("tool_calls") and not metrics and ts is None:
            last["message"] = _cut(last["message"] + text)
            return
        self.step("agent", text, ts=ts, **metrics)

    def call(self, call_id: str, name: str, arguments: Any, *, ts: float | str | None = None) -> None:
        """A tool call, on the last agent step (a new one if the last step is not the agent's).

        A call id seen before updates that call (agents announce a call, then fill it in)."""
        known = self._calls.get(str(call_id))
        if known is not None:
            for entry in known.get("tool_calls") or []:
                if entry["tool_call_id"] == str(call_id):
                    entry["function_name"] = str(name) or entry["function_name"]
                    entry["arguments"] = arguments if arguments else entry["arguments"]
            return
        last = self.steps[-1] if self.steps else None
        if last is None or last["source"] != "agent" or last.get("observation"):
            last = self.step("agent", ts=ts)
        elif ts is not None and "timestamp" not in last:
            last["timestamp"] = _iso(ts)
        entry = {"tool_call_id": str(call_id), "function_name": str(name), "arguments": arguments}
        last.setdefault("tool_calls", []).append(entry)
        self._calls[str(call_id)] = last

    def result(self, call_id: str, content: Any) -> None:
        """What a tool call returned."""
        step = self._calls.get(str(call_id)) or (self.steps[-1] if self.steps else self.step("system"))
        results = step.setdefault("observation", {"results": []})["results"]
        results.append({"source_call_id": str(call_id), "content": _cut(content)})

    def to_json(self, final_metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id or "",
            "agent": {"name": self.agent, "version": self.version, "model_name": self.model},
            "steps": self.steps,
        }
        if final_metrics:
            out["final_metrics"] = {k: v for k, v in final_metrics.items() if v is not None}
        return out


def _is_write(call: dict[str, Any]) -> bool:
    args = call.get("arguments")
    if (
        isinstance(args, dict)
        and any(k in args for k in _PATH_KEYS)
        and any(k in args for k in ("content", "contents", "text", "new_string", "file_text", "patch"))
    ):
        return True
    return bool(_WRITE_NAMES.search(str(call.get("function_name") or ""))) and not _command(call)


def _command(call: dict[str, Any]) -> str:
    args = call.get("arguments")
    if isinstance(args, dict):
        for key in _CMD_KEYS:
            value = args.get(key)
            if value:
                return " ".join(map(str, value)) if isinstance(value, list) else str(value)
    return ""


def _seconds(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def telemetry(trajectory: dict[str, Any] | None, started_at: float | None = None) -> dict[str, Any]:
    """Derived after the run, never asked of the agent: steps, tool calls, and times to the
    first file write and first test run (seconds from ``started_at`` or the first step)."""
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    if not isinstance(steps, list):
        return {}
    times = [_seconds(s.get("timestamp")) for s in steps if isinstance(s, dict)]
    origin = started_at if started_at is not None else next((t for t in times if t is not None), None)
    out: dict[str, Any] = {"steps": len(steps), "tool_calls": 0}
    first_write = first_test = None
    for index, step in enumerate(s for s in steps if isinstance(s, dict)):
        for call in step.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            out["tool_calls"] += 1
            when = _seconds(step.get("timestamp"))
            offset = None if when is None or origin is None else round(when - origin, 3)
            if first_write is None and _is_write(call):
                first_write = (offset, index + 1, out["tool_calls"])
            if first_test is None and _TEST_RUN.search(_command(call)):
                first_test = (offset,)
    if first_write is not None:
        out["time_to_first_write_s"] = first_write[0]
        out["steps_before_first_write"] = first_write[1] - 1
        out["tool_calls_before_first_write"] = first_write[2] - 1
    if first_test is not None:
        out["time_to_first_test_run_s"] = first_test[0]
    return out


_CLAIM_YES = {"complete", "completed", "success", "succeeded", "done", "passed", "solved", "fixed"}
_CLAIM_NO = {"failed", "failure", "incomplete", "gave_up", "unsolved", "error"}


def claimed_success(claim: Any) -> bool | None:
    """What a structured self-check claims (``status``/``passed``/``success``), or None if it does not say."""
    if not isinstance(claim, dict):
        return None
    for key in ("passed", "success", "solved", "complete"):
        if isinstance(claim.get(key), bool):
            return claim[key]
    status = str(claim.get("status", "")).strip().lower()
    return True if status in _CLAIM_YES else False if status in _CLAIM_NO else None
