"""``task.toml`` of a Harbor task: the validation boundary (typed sections, Harbor 0.25 keys).

Known keys are strictly typed; keys Harbor accepts that we do not use yet are kept, so a
Harbor 0.25 task loads. Values that load but cannot run (a zero or NaN timeout, a workdir
of ``/`` or ``/logs``) are refused here with the key that holds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import TaskError
from ..core.task import (
    DEFAULT_AGENT_TIMEOUT_SEC,
    DEFAULT_BUILD_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC,
    MAX_MEGABYTES,
)
from .fields import Cpus, Megabytes, Seconds, Section, Text, Workdir, validate

NetworkMode = Literal["public", "no-network", "allowlist"]
#: Top-level keys of a Harbor 0.25 task.toml.
TOP_LEVEL = (
    "version",
    "schema_version",
    "task",
    "metadata",
    "source",
    "artifacts",
    "multi_step_reward_strategy",
    "steps",
    "agent",
    "verifier",
    "environment",
    "solution",
)


class AgentSection(Section):
    timeout_sec: Seconds | None = DEFAULT_AGENT_TIMEOUT_SEC
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allow_internet: bool | None = None
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)


class VerifierSection(Section):
    timeout_sec: Seconds = DEFAULT_VERIFIER_TIMEOUT_SEC
    user: str | int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class EnvironmentSection(Section):
    build_timeout_sec: Seconds = DEFAULT_BUILD_TIMEOUT_SEC
    docker_image: Text | None = None
    cpus: Cpus | None = None
    memory_mb: Megabytes | None = None
    memory: str | int | None = None  # legacy "1G"
    storage_mb: Megabytes | None = None
    gpus: int | None = Field(default=None, ge=0)
    workdir: Workdir = "/app"
    env: dict[str, str] = Field(default_factory=dict)
    network_mode: NetworkMode | None = None
    allow_internet: bool | None = None
    allowed_hosts: list[str] | None = None


class TaskToml(BaseModel):
    """The whole file; an unknown top-level key is a typo worth an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    version: str | None = None
    schema_version: str | None = None
    task: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: Any = None
    artifacts: Any = None
    multi_step_reward_strategy: str | None = None
    steps: list[dict[str, Any]] | None = None
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: dict[str, Any] = Field(default_factory=dict)


def parse(data: dict[str, Any], file: Path) -> TaskToml:
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise TaskError(file, unknown[0], f"unknown section; expected one of: {', '.join(sorted(TOP_LEVEL))}")
    return validate(TaskToml, data, file)


def memory_mb(env: EnvironmentSection, file: Path) -> int | None:
    """``memory_mb``, else the legacy ``memory = "1G"`` in megabytes."""
    if env.memory_mb is not None or env.memory is None:
        return env.memory_mb
    text = str(env.memory).strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    try:
        number = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
        value = int(number)
    except (ValueError, OverflowError):
        value = 0
    if not 1 <= value <= MAX_MEGABYTES:
        raise TaskError(file, "environment.memory", f"expected a size such as '1G' (got {env.memory!r})")
    return value


def network(mode: str | None, allow_internet: bool | None) -> str | None:
    """The declared network: public, none or allowlist (None when the section says nothing)."""
    if mode is None and allow_internet is not None:
        mode = "public" if allow_internet else "no-network"
    return {None: None, "public": "public", "no-network": "none", "allowlist": "allowlist"}[mode]
