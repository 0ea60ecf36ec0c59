"""The task model every benchmark adapter produces and every executor consumes."""

from __future__ import annotations

import hashlib
import math
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TaskError
from .network import DeclaredNetwork, declared_problem
from .task_parts import (
    FEATURES,
    Artifact,
    CollectHook,
    Healthcheck,
    McpServer,
    RewardStrategy,
    Step,
    TaskPackage,
    Tpu,
    VerifierEnvironment,
)

__all__ = [
    "FEATURES",
    "Artifact",
    "CollectHook",
    "Healthcheck",
    "McpServer",
    "Step",
    "Task",
    "TaskPackage",
    "Tpu",
    "VerifierEnvironment",
]

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
#: Paths a task's workdir may not be (or lie under): the harness's own, or the kernel's.
RESERVED_DIRS = (LOGS_DIR, TESTS_DIR, SOLUTION_DIR, "/maka", "/proc", "/sys", "/dev")
#: Upper bounds no real task needs to pass; beyond them waits and limits overflow the OS's types.
MAX_TIMEOUT_SEC = 30 * 24 * 3600.0
MAX_CPUS = 4096
MAX_MEGABYTES = 2**40
#: Directory levels below a task (or bundle) root; deeper trees are refused.
MAX_TREE_DEPTH = 64


def check_workdir(value: Any) -> str:
    """A workdir the environment can have: absolute, normal, not ``/`` nor a reserved dir.

    Raises ValueError with the expectation; adapters turn it into a TaskError with their key.
    """
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"expected an absolute path (got {value!r})")
    if any(c in value for c in "\0\n\r") or ".." in value.split("/"):
        raise ValueError(f"expected a plain absolute path without '..' or control characters (got {value!r})")
    path = posixpath.normpath(value)
    if path == "/":
        raise ValueError("the workdir cannot be / (the subject's workspace would be the whole filesystem)")
    for reserved in RESERVED_DIRS:
        if path == reserved or path.startswith(reserved + "/"):
            raise ValueError(f"the workdir cannot be {reserved} or lie under it (reserved for the harness)")
    return path


_COPY_LINE = re.compile(r"^\s*(COPY|ADD)\s", re.IGNORECASE | re.MULTILINE)


def dockerfile_copies(dockerfile: Path) -> bool:
    """The Dockerfile puts files in the image (a COPY or ADD instruction): an executor without
    images would start the task without them."""
    try:
        return bool(_COPY_LINE.search(dockerfile.read_text(errors="replace")))
    except OSError:
        return False


_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")


def task_id_for(name: str) -> str:
    """A task id (``NAME_PATTERN``) for a task directory's name: each run of other characters
    (spaces, brackets, non-ASCII) becomes one ``-``, and what starts the id is a letter or digit.
    ``001. ledger audit`` becomes ``001.-ledger-audit``; the directory keeps its name."""
    safe = _ID_UNSAFE.sub("-", name)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)
    return safe or "task"


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
    #: The agent phase's declared network (``core.network``).
    network: DeclaredNetwork = "none"
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Grading strategy name and its options (adapters may add strategies).
    grading: str = "reward"
    grading_options: dict[str, Any] = field(default_factory=dict)
    #: Set by adapters for tasks that need a feature not supported yet: the cell is skipped.
    unsupported: str | None = None
    #: Set by adapters for a task whose files are invalid (one line: file, key, expectation):
    #: its cells are skipped with it, or the run is a usage error under ``--maka-strict``.
    invalid: str | None = None

    # -- Harbor 0.25 (task.toml schema 1.x); defaults mean "not declared" ----------------
    schema_version: str | None = None
    package: TaskPackage | None = None
    #: Harbor's top-level ``source`` (where the task comes from, e.g. a dataset name).
    source: str | None = None
    os: str = "linux"
    gpus: int = 0
    gpu_types: tuple[str, ...] = ()
    tpu: Tpu | None = None
    healthcheck: Healthcheck | None = None
    #: ``[agent] user`` / ``[verifier] user``: None (or root / 0) is the image's default user.
    agent_user: str | int | None = None
    verifier_user: str | int | None = None
    agent_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    #: Values the env tables took from the host's environment (``${VAR}``): scrubbed from every
    #: artifact and record like a subject's secrets.
    host_values: tuple[str, ...] = ()
    #: The verifier phase's declared network and hosts; None: not declared apart, the
    #: environment's (``network``). Read it as ``verifier_declared``.
    verifier_network: DeclaredNetwork | None = None
    #: The hosts each phase's ``allowlist`` names (the one place they are kept: a format that
    #: declares one list for both phases sets both).
    verifier_allowed_hosts: tuple[str, ...] = ()
    agent_allowed_hosts: tuple[str, ...] = ()
    #: Task-level artifacts (each step's own are on the Step).
    artifacts: tuple[Artifact, ...] = ()
    #: None: the verifier shares the subject's environment.
    verifier_environment: VerifierEnvironment | None = None
    verifier_collect: tuple[CollectHook, ...] = ()
    #: ``environment/docker-compose.yaml`` (a main service plus sidecars), when present.
    compose_file: Path | None = None
    #: The compose service that is the subject's environment (Terminal-Bench calls it "client").
    compose_service: str = "main"
    steps: tuple[Step, ...] = ()
    multi_step_reward_strategy: RewardStrategy = "mean"
    mcp_servers: tuple[McpServer, ...] = ()
    #: A directory in the environment whose contents go to the subject's skills config.
    skills_dir: str | None = None

    @property
    def verifier_declared(self) -> DeclaredNetwork:
        """The network the verifier phase (and the set-up before the agent) declares."""
        return self.network if self.verifier_network is None else self.verifier_network

    @property
    def features(self) -> frozenset[str]:
        """The FEATURES keys this task needs from its executor (beyond one plain container)."""
        needed = set()
        if self.steps:
            needed.add("multi-step")
        if self.verifier_environment is not None or any(s.verifier_environment for s in self.steps):
            needed.add("separate-verifier")
        if self.compose_file is not None:
            needed.add("compose")
        users = [self.agent_user, self.verifier_user, *(u for s in self.steps for u in (s.agent_user, s.verifier_user))]
        if any(u not in (None, "root", 0) for u in users):
            needed.add("users")
        if self.healthcheck is not None or any(s.healthcheck for s in self.steps):
            needed.add("healthcheck")
        if self.gpus:
            needed.add("gpus")
        if self.workspace_dir is None and (
            self.docker_image or (self.dockerfile is not None and dockerfile_copies(self.dockerfile))
        ):
            needed.add("image")
        return frozenset(needed)

    def __post_init__(self) -> None:
        """The last guard for every adapter: a Task that cannot run is never built."""
        limits = {
            "agent_timeout_sec": (self.agent_timeout_sec, MAX_TIMEOUT_SEC),
            "verifier_timeout_sec": (self.verifier_timeout_sec, MAX_TIMEOUT_SEC),
            "build_timeout_sec": (self.build_timeout_sec, MAX_TIMEOUT_SEC),
            "cpus": (self.cpus, MAX_CPUS),
            "memory_mb": (self.memory_mb, MAX_MEGABYTES),
            "storage_mb": (self.storage_mb, MAX_MEGABYTES),
        }
        for key, (value, limit) in limits.items():
            optional = key not in ("verifier_timeout_sec", "build_timeout_sec")
            if value is None and optional:
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not math.isfinite(value) or not 0 < value <= limit:
                raise TaskError(
                    self.path, key, f"expected a number greater than 0 and at most {limit:g} (got {value!r})"
                )
        try:
            check_workdir(self.workdir)
        except ValueError as e:
            raise TaskError(self.path, "workdir", str(e)) from None
        for key, value in (("network", self.network), ("verifier_network", self.verifier_declared)):
            if problem := declared_problem(value):
                raise TaskError(self.path, key, problem)
        if "network" in self.grading_options:
            raise TaskError(
                self.path, "grading_options.network", "the verifier's network is Task.verifier_network, set it there"
            )
        if "allowed_hosts" in self.grading_options:
            raise TaskError(
                self.path,
                "grading_options.allowed_hosts",
                "the hosts are Task.agent_allowed_hosts and Task.verifier_allowed_hosts, set them there",
            )


def _utf8(raw: bytes, full: bytes, what: str) -> bytes:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskError(os.fsdecode(full), None, f"{what} is not valid UTF-8") from None
    return raw


def walk_tree(root: Path, prune: frozenset[bytes] = frozenset()) -> list[tuple[bytes, os.DirEntry[bytes]]]:
    """Every entry below ``root`` as (relative path, entry), sorted, never following a link.

    Iterative, so any depth is safe; names and link targets must be UTF-8, depth is bounded
    by MAX_TREE_DEPTH and an unreadable directory is a TaskError naming it. Directories
    named in ``prune`` are left out with their contents.
    """
    out: list[tuple[bytes, os.DirEntry[bytes]]] = []
    base = os.fsencode(root)
    stack: list[tuple[bytes, int]] = [(b"", 0)]
    while stack:
        rel, depth = stack.pop()
        here = os.path.join(base, rel) if rel else base
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            raise TaskError(os.fsdecode(here), None, f"cannot read the directory: {e.strerror or e}") from None
        subdirs = []
        for entry in entries:
            child = os.path.join(rel, entry.name) if rel else entry.name
            _utf8(entry.name, entry.path, "the file name")
            if entry.is_symlink():
                _utf8(os.readlink(entry.path), entry.path, "the symlink's target")
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in prune:
                    continue
                if depth + 1 > MAX_TREE_DEPTH:
                    raise TaskError(root, None, f"directories nested more than {MAX_TREE_DEPTH} levels deep")
                subdirs.append(child)
            out.append((child, entry))
        stack.extend((d, depth + 1) for d in reversed(subdirs))
    return out


def digest_tree(root: Path, *, extra: str = "") -> str:
    """A stable content digest of every regular file below ``root`` (names and bytes)."""
    h = hashlib.sha256(extra.encode())
    if root.is_file():
        h.update(root.read_bytes())
        return h.hexdigest()
    for rel, entry in walk_tree(root, prune=frozenset({b"__pycache__", b".git"})):
        if entry.is_dir(follow_symlinks=False):
            continue
        h.update(rel + b"\0")
        if entry.is_symlink():
            h.update(b"L" + os.readlink(entry.path))
        elif entry.is_file(follow_symlinks=False):
            h.update(_file_digest(entry.path))
    return h.hexdigest()


def _file_digest(path: bytes) -> bytes:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError as e:
        raise TaskError(os.fsdecode(path), None, f"cannot read the file: {e.strerror or e}") from None
    return h.digest()
