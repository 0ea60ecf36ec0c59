"""Typed parts of a Task beyond the single-environment basics (Harbor 0.25's task.toml).

Adapters fill them; executors and the lifecycle consume them. Every field is explicit and
already validated: a part that exists can be acted on without re-checking the task file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .network import DeclaredNetwork

#: How a cell's score follows from its steps' rewards.
RewardStrategy = Literal["mean", "final"]
#: The network a phase declares (``core.network``): none, an allowlist through the egress proxy, or public.
Network = DeclaredNetwork

#: Features a task may need from its executor, and how a skip reason names each.
#: An executor states what it supports in ``Executor.capabilities`` (one flag per key).
FEATURES: dict[str, str] = {
    "multi-step": "multi-step tasks (steps/)",
    "separate-verifier": 'a separate verifier environment (verifier.environment_mode = "separate")',
    "compose": "multi-container environments (environment/docker-compose.yaml)",
    "users": "running a phase as another user (agent.user / verifier.user)",
    "healthcheck": "environment healthchecks (environment.healthcheck)",
    "gpus": "GPU environments (environment.gpus)",
    "image": "files that only the environment's image has (a Dockerfile that COPYs or ADDs them, or a"
    " docker_image) and no environment/workspace/ to start from",
}


@dataclass(frozen=True)
class TaskPackage:
    """Harbor's ``[task]`` section: the task's registry identity, kept as metadata."""

    name: str
    version: str | None = None
    description: str = ""
    authors: tuple[tuple[str, str | None], ...] = ()  # (name, email)
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Healthcheck:
    """Polled with Docker's HEALTHCHECK semantics before the agent starts."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


@dataclass(frozen=True)
class Artifact:
    """A path the agent environment hands on (to a separate verifier, and to the record).

    ``source`` is absolute in the agent environment (a relative one is resolved against the
    workdir at load time); ``destination`` is relative under the attempt's artifacts dir.
    """

    source: str
    destination: str | None = None
    exclude: tuple[str, ...] = ()
    service: str | None = None  # compose service; None is the main container


@dataclass(frozen=True)
class CollectHook:
    """``[[verifier.collect]]``: run in a service after the agent phase, before artifacts are copied."""

    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | int | None = None


@dataclass(frozen=True)
class McpServer:
    """An MCP server the task offers its subject (handed on by subjects that support MCP)."""

    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Tpu:
    type: str
    topology: str


@dataclass(frozen=True)
class VerifierEnvironment:
    """A fresh environment the verifier runs in (Harbor ``environment_mode = "separate"``).

    Built from ``build_context`` (its ``Dockerfile``) or ``docker_image``. ``bundled_tests``:
    the image is the verifier's own (``tests/Dockerfile`` or ``[verifier.environment]
    docker_image``) rather than a copy of the task's environment; ``/tests`` is uploaded
    fresh either way.
    """

    build_context: Path | None
    dockerfile: Path | None
    docker_image: str | None
    bundled_tests: bool
    workdir: str
    env: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    build_timeout_sec: float = 600.0
    network: Network = "public"
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One step of a multi-step task (``steps/<name>/``), run in order in one environment.

    ``tests_dir`` is the step's tests with the task's top-level ``tests/`` merged under them
    (the step's files win); ``workdir_dir`` is uploaded to the workdir before the step's
    agent run and ``setup_script`` (its ``setup.sh``) runs then.
    """

    name: str
    instruction: str
    tests_dir: Path
    solution_dir: Path | None = None
    workdir_dir: Path | None = None
    setup_script: Path | None = None
    agent_timeout_sec: float | None = 600.0
    verifier_timeout_sec: float = 600.0
    agent_user: str | int | None = None
    verifier_user: str | int | None = None
    verifier_env: dict[str, str] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    #: Stop the remaining steps when this step's reward is below it ({key: threshold} gates each key).
    min_reward: float | dict[str, float] | None = None
    artifacts: tuple[Artifact, ...] = ()
    verifier_environment: VerifierEnvironment | None = None
    #: ``[steps.agent]`` / ``[steps.verifier]`` network_mode and allowed_hosts: None (not
    #: declared) keeps the task's; declared, they replace the task's for this step (Harbor).
    agent_network: Network | None = None
    verifier_network: Network | None = None
    agent_allowed_hosts: tuple[str, ...] = ()
    verifier_allowed_hosts: tuple[str, ...] = ()
