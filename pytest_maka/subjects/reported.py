"""What a ``command`` agent reports by writing files to $MAKA_LOGS_DIR: usage.json and claim.json.

Read by content through the sandbox (never through a planted link), before the harness
freezes the logs. ``trajectory.json`` there is kept as the attempt's trajectory as it is.
"""

from __future__ import annotations

import re
from typing import Any

from ..core import subject_json
from ..core.task import AGENT_LOGS_DIR
from ..core.usage import normalise
from ..executors.base import Sandbox

MAX_REPORT_BYTES = 1024 * 1024


def read_json(sandbox: Sandbox, path: str, limit: int = MAX_REPORT_BYTES) -> Any:
    """A small JSON file the subject wrote, or None (missing, a link, too large, nested too deeply, not JSON)."""
    try:
        data = sandbox.read_file(path, limit + 1)
    except (FileNotFoundError, ValueError):
        return None
    if len(data) > limit:
        return None
    try:
        return subject_json.loads(data)
    except ValueError:  # UnicodeDecodeError and a refused depth included
        return None


def read_reported(sandbox: Sandbox) -> dict[str, Any]:
    """``{usage, stop_reason, claim}`` from the files a subject may write; absent ones stay empty."""
    usage = read_json(sandbox, f"{AGENT_LOGS_DIR}/usage.json")
    reason = usage.get("stop_reason") if isinstance(usage, dict) else None
    return {
        "usage": normalise(usage) if isinstance(usage, dict) else {},
        "stop_reason": reason[:64] if isinstance(reason, str) and reason else None,
        "claim": read_json(sandbox, f"{AGENT_LOGS_DIR}/claim.json"),
    }


def start_failure(command: str, exit_code: int | None, stderr: str) -> str | None:
    """Why ``sh -c command`` never got going (its program missing or not executable), or None."""
    words = command.split()
    if exit_code not in (126, 127) or not words:
        return None
    program = re.escape(words[0])
    for line in stderr.splitlines()[:5]:
        if re.search(rf"(^|: ){program}: (command )?not found|(^|: ){program}: No such file", line):
            return f"{words[0]} was not found in the sandbox"
        if re.search(rf"(^|: ){program}: Permission denied", line):
            return f"{words[0]} is not executable in the sandbox"
    return None
