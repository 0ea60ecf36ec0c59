"""The task model every benchmark adapter produces and every executor consumes."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_WORKDIR = "/app"
DEFAULT_AGENT_TIMEOUT_SEC = 600.0
DEFAULT_VERIFIER_TIMEOUT_SEC = 600.0
DEFAULT_BUILD_TIMEOUT_SEC = 600.0

#: Where things live inside an environment (Harbor's conventions).
LOGS_DIR = "/logs"
AGENT_LOGS_DIR = "/logs/agent"
VERIFIER_LOGS_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"


@dataclass(frozen=True)
class Task:
    """Instruction + initial environment + hidden verifier (+ optional reference solution).

    Paths are host paths inside the task's source directory. ``digest`` covers every
    file of the task, so a changed task is a different cell.
    """

    id: str
    path: Path
    instruction: str
    digest: str
    format: str = "harbor"
    workdir: str = DEFAULT_WORKDIR
    agent_timeout_sec: float | None = DEFAULT_AGENT_TIMEOUT_SEC
    verifier_timeout_sec: float = DEFAULT_VERIFIER_TIMEOUT_SEC
    build_timeout_sec: float = DEFAULT_BUILD_TIMEOUT_SEC
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    environment_dir: Path | None = None
    workspace_dir: Path | None = None
    dockerfile: Path | None = None
    docker_image: str | None = None
    tests_dir: Path | None = None
    solution_dir: Path | None = None
    verifier_command: str = "bash /tests/test.sh"
    verifier_env: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    network: str = "none"
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Grading strategy name and its options (adapters may add strategies).
    grading: str = "reward"
    grading_options: dict[str, Any] = field(default_factory=dict)
    #: Set by adapters for tasks that need a feature not supported yet: the cell is skipped.
    unsupported: str | None = None


def digest_tree(root: Path, *, extra: str = "") -> str:
    """A stable content digest of every regular file below ``root`` (names and bytes)."""
    h = hashlib.sha256(extra.encode())
    if root.is_file():
        h.update(root.read_bytes())
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in {"__pycache__", ".git"})
        for name in sorted(filenames):
            full = Path(dirpath, name)
            rel = full.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0")
            if full.is_symlink():
                h.update(b"L" + os.readlink(full).encode())
            elif full.is_file():
                h.update(hashlib.sha256(full.read_bytes()).digest())
    return h.hexdigest()
