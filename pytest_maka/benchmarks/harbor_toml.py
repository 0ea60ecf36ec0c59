"""``task.toml`` of a Harbor task: the validation boundary (every Harbor 0.25 key, strictly typed).

Each section knows all of its keys (Harbor 0.25, task schema 1.4, and the legacy ones it
still reads), each strictly typed. A key it does not know is kept, as Harbor ignores it
(``lenient.py`` names it and checks what it would mean). Values that load but cannot run (a
zero or NaN timeout, a workdir of ``/`` or ``/logs``) are refused here with the key that holds them.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ..core.errors import TaskError
from ..core.network import DeclaredNetwork
from ..core.task import (
    DEFAULT_AGENT_TIMEOUT_SEC,
    DEFAULT_BUILD_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC,
    MAX_MEGABYTES,
    SOLUTION_DIR,
    TESTS_DIR,
    VERIFIER_LOGS_DIR,
)
from . import lenient
from .fields import Cpus, Megabytes, Seconds, Section, Text, WaitSeconds, Workdir, validate

NetworkMode = Literal["public", "no-network", "allowlist"]
User = str | int
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
#: What an artifact may not carry into a verifier environment: what the harness writes there.
ARTIFACT_FORBIDDEN = (TESTS_DIR, VERIFIER_LOGS_DIR, SOLUTION_DIR, "/maka", "/proc", "/sys", "/dev")
_PACKAGE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_STEP_NAME_BAD = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_TOPOLOGY = re.compile(r"^[1-9]\d*(x[1-9]\d*)+$")


def _allowlist_consistent(mode: str | None, hosts: list[str] | None) -> None:
    if hosts is not None and mode != "allowlist":
        raise ValueError('allowed_hosts is only valid with network_mode = "allowlist"')


def _service(value: str | None) -> str | None:
    if value is not None and not _SERVICE_NAME.match(value):
        raise ValueError(f"expected a compose service name (letters, digits, '_', '.', '-'), got {value!r}")
    return value


class Author(Section):
    name: Text
    email: str | None = None


class PackageSection(Section):
    """``[task]``: the package identity (``org/name``) and its description."""

    name: str
    version: Text | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_name(cls, value: str) -> str:
        if not _PACKAGE_NAME.match(value) or ".." in value:
            raise ValueError(f"expected a package name 'org/name' (got {value!r})")
        return value


class HealthcheckSection(Section):
    command: Text
    interval_sec: Seconds = 5.0
    timeout_sec: Seconds = 30.0
    start_period_sec: WaitSeconds = 0.0
    start_interval_sec: Seconds = 5.0
    retries: int = Field(default=3, ge=1, le=10_000)


class TpuSection(Section):
    type: Text
    topology: str

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str) -> str:
        if not _TOPOLOGY.match(value.strip()):
            raise ValueError(f"expected a TPU topology such as '2x4' (got {value!r})")
        return value.strip()


class McpServerSection(Section):
    name: Text
    transport: Literal["stdio", "sse", "streamable-http", "http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServerSection:
        if self.transport == "stdio" and not self.command:
            raise ValueError("transport 'stdio' needs 'command'")
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"transport {self.transport!r} needs 'url'")
        return self


class ArtifactSection(Section):
    source: Text
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if ".." in PurePosixPath(value).parts or "\0" in value:
            raise ValueError(f"expected a path without '..' (got {value!r})")
        path = posixpath.normpath(value)
        for reserved in ARTIFACT_FORBIDDEN:
            if path == "/" or path == reserved or path.startswith(reserved + "/"):
                where = "/" if path == "/" else reserved
                raise ValueError(f"an artifact cannot be {where} or lie under it (the verifier's own paths)")
        return value

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str | None) -> str | None:
        if not value:
            return None
        path = PurePosixPath(value)
        if "\\" in value or path.is_absolute() or ".." in path.parts or value.rstrip("/") == "manifest.json":
            raise ValueError(f"expected a relative path without '..' other than manifest.json (got {value!r})")
        return value

    @field_validator("service")
    @classmethod
    def _service_name(cls, value: str | None) -> str | None:
        return _service(value)


def _artifact_entry(value: Any) -> Any:
    """A path string is short for ``{source = path}``."""
    return {"source": value} if isinstance(value, str) else value


Artifacts = list[Annotated[ArtifactSection, BeforeValidator(_artifact_entry)]]


class EnvironmentSection(Section):
    build_timeout_sec: Seconds = DEFAULT_BUILD_TIMEOUT_SEC
    docker_image: Text | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: Cpus | None = None
    memory_mb: Megabytes | None = None
    memory: str | int | None = None  # legacy "1G"
    storage_mb: Megabytes | None = None
    storage: str | int | None = None  # legacy "10G"
    gpus: int | None = Field(default=None, ge=0, le=1024)
    gpu_types: list[Text] | None = None
    tpu: TpuSection | None = None
    mcp_servers: list[McpServerSection] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: Workdir | None = None
    healthcheck: HealthcheckSection | None = None
    workdir: Workdir = "/app"
    network_mode: NetworkMode | None = None
    allow_internet: bool | None = None  # legacy
    allowed_hosts: list[Text] | None = None

    @field_validator("os", mode="before")
    @classmethod
    def _os_case(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _network(self) -> EnvironmentSection:
        _allowlist_consistent(self.network_mode, self.allowed_hosts)
        return self


class AgentSection(Section):
    timeout_sec: Seconds | None = DEFAULT_AGENT_TIMEOUT_SEC
    user: User | None = None
    network_mode: NetworkMode | None = None
    allow_internet: bool | None = None  # legacy
    allowed_hosts: list[Text] | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _network(self) -> AgentSection:
        _allowlist_consistent(self.network_mode, self.allowed_hosts)
        return self


class CollectSection(Section):
    command: Text
    service: str = "main"
    timeout_sec: Seconds = 60.0
    user: User | None = None

    @field_validator("service")
    @classmethod
    def _service_name(cls, value: str) -> str:
        return _service(value) or value


class VerifierSection(Section):
    timeout_sec: Seconds = DEFAULT_VERIFIER_TIMEOUT_SEC
    user: User | None = None
    env: dict[str, str] = Field(default_factory=dict)
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentSection | None = None
    collect: list[CollectSection] = Field(default_factory=list)
    network_mode: NetworkMode | None = None
    allowed_hosts: list[Text] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> VerifierSection:
        _allowlist_consistent(self.network_mode, self.allowed_hosts)
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError('environment_mode = "shared" cannot have a [verifier.environment]')
        return self

    @property
    def mode(self) -> Literal["shared", "separate"] | None:
        """The declared mode; a ``[verifier.environment]`` alone means separate."""
        if self.environment_mode is not None:
            return self.environment_mode
        return "separate" if self.environment is not None else None


class SolutionSection(Section):
    env: dict[str, str] = Field(default_factory=dict)


class StepSection(Section):
    name: str
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    min_reward: float | dict[str, float] | None = None
    healthcheck: HealthcheckSection | None = None
    artifacts: Artifacts = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _portable(cls, value: str) -> str:
        bad = not value.strip() or value in (".", "..") or value.endswith((".", " ")) or _STEP_NAME_BAD.search(value)
        if bad or len(value.encode()) > 255:
            raise ValueError(f"expected a portable directory name under steps/ (got {value!r})")
        return value


class TaskToml(BaseModel):
    """The whole file (the keys Harbor 0.25 knows; see ``parse`` for the others)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)

    version: str | None = None  # legacy name of schema_version
    schema_version: str | None = None
    task: PackageSection | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str | None = None
    artifacts: Artifacts = Field(default_factory=list)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepSection] | None = None
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)

    @field_validator("steps")
    @classmethod
    def _unique_steps(cls, steps: list[StepSection] | None) -> list[StepSection] | None:
        seen: set[str] = set()
        for step in steps or []:
            if step.name.casefold() in seen:
                raise ValueError(f"step names must be unique (ignoring case): {step.name!r}")
            seen.add(step.name.casefold())
        return steps


#: The shape of each top-level key's value: a misspelt key has its section's shape.
_SHAPES = {k: "table" for k in ("task", "metadata", "agent", "verifier", "environment", "solution")} | {
    k: "list" for k in ("artifacts", "steps")
}


def _shape(value: Any) -> str:
    return "table" if isinstance(value, dict) else "list" if isinstance(value, list) else "value"


def parse(data: dict[str, Any], file: Path) -> tuple[TaskToml, list[lenient.Unknown]]:
    """The validated file and the keys it has that Harbor 0.25 does not know (any table).

    Harbor ignores keys it does not know, and published tasks carry some of their own
    (``[[sources]]``, a top-level ``author_name``, ``[task] format``, ``[[steps]] id``): such a
    key is kept and named (``lenient.py``). One at the top level that looks like a misspelt
    section (``[verifer]``) is an error, since ignoring it would run the task on defaults its
    author did not mean.
    """
    unknown = sorted(set(data) - set(TOP_LEVEL))
    for key in unknown:  # a misspelling is close in name and of the same shape ([[sources]] is no 'source')
        close = difflib.get_close_matches(key, TOP_LEVEL, cutoff=0.8)
        near = [k for k in close if _SHAPES.get(k, "value") == _shape(data[key])]
        if near:
            raise TaskError(file, key, f"unknown section; did you mean {near[0]!r}?")
    spec: TaskToml = validate(TaskToml, data, file)
    return spec, lenient.unknown_keys(spec)


def megabytes(value: str | int | None, current: int | None, file: Path, key: str) -> int | None:
    """``memory_mb``/``storage_mb``, else the legacy ``memory = "1G"`` / ``storage`` in megabytes."""
    if current is not None or value is None:
        return current
    text = str(value).strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    try:
        number = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
        result = int(number)
    except (ValueError, OverflowError):
        result = 0
    if not 1 <= result <= MAX_MEGABYTES:
        raise TaskError(file, key, f"expected a size such as '1G' (got {value!r})")
    return result


def memory_mb(env: EnvironmentSection, file: Path, prefix: str = "environment") -> int | None:
    return megabytes(env.memory, env.memory_mb, file, f"{prefix}.memory")


def storage_mb(env: EnvironmentSection, file: Path, prefix: str = "environment") -> int | None:
    return megabytes(env.storage, env.storage_mb, file, f"{prefix}.storage")


#: Harbor's ``network_mode`` spellings in the kernel's vocabulary (``core.network``).
DECLARED: dict[str | None, DeclaredNetwork | None] = {
    None: None,
    "public": "public",
    "no-network": "none",
    "allowlist": "allowlist",
}


def network(mode: str | None, allow_internet: bool | None) -> DeclaredNetwork | None:
    """The declared network: public, none or allowlist (None when the section says nothing)."""
    if mode is None and allow_internet is not None:
        mode = "public" if allow_internet else "no-network"
    return DECLARED[mode]
