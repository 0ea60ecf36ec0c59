"""Labels on everything this executor creates, and who owns it (for cleanup of dead runs)."""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache
from pathlib import Path

PREFIX = "io.pytest-maka"
MANAGED = f"{PREFIX}.managed"
RUN = f"{PREFIX}.run"
CELL = f"{PREFIX}.cell"
CELL_KEY = f"{PREFIX}.cell-key"
ATTEMPT = f"{PREFIX}.attempt"
TASK = f"{PREFIX}.task"
ENV_DIGEST = f"{PREFIX}.env-digest"
OWNER_HOST = f"{PREFIX}.owner-host"
OWNER_PID = f"{PREFIX}.owner-pid"
OWNER_START = f"{PREFIX}.owner-start"
ROLE = f"{PREFIX}.role"


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone
    (a zombie, state ``Z`` or ``X``, is gone: it runs nothing and holds nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@cache
def run_id() -> str:
    """The xdist test-run id shared by every worker of one run, or one per process."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex


def owner_labels() -> dict[str, str]:
    """Labels saying which process on which host holds a container."""
    pid = os.getpid()
    return {
        MANAGED: "1",
        OWNER_HOST: socket.gethostname(),
        OWNER_PID: str(pid),
        OWNER_START: process_start(pid) or "",
    }


def owner_is_dead(labels: dict[str, str]) -> bool:
    """True when the owning process is known to be gone (same host, pid dead or reused)."""
    if labels.get(OWNER_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return False
    start = process_start(pid)
    return start is None or start != labels.get(OWNER_START)
