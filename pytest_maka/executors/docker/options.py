"""Options of ``executor: {kind: docker, ...}``: engines, capacity, limits, retention."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core.errors import MakaUserError
from ...core.hostpattern import check_egress_hosts

#: What agents need: file ownership and permissions, switching users, signalling their own
#: processes, binding low ports, chroot. Dropped from Docker's default set: NET_RAW (raw
#: sockets), MKNOD, SETFCAP, AUDIT_WRITE.
DEFAULT_CAPABILITIES = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
)
_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://", "npipe://")


class EngineOptions(BaseModel):
    """One Docker engine: its URL and, optionally, how many containers it may hold at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    slots: int | None = Field(default=None, ge=1, le=1024)

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not v.startswith(_SCHEMES):
            raise ValueError(f"engine URL must start with one of {', '.join(_SCHEMES)}: {v!r}")
        return v.rstrip("/") if not v.startswith("unix://") else v


class DockerOptions(BaseModel):
    """Every key is optional; the defaults are the safe ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Image for tasks with neither ``environment/Dockerfile`` nor ``docker_image``.
    default_image: str | None = "python:3.11-slim"
    #: How changes to protected paths are found before verification: "changes" (the engine's
    #: change list plus the container's writable layer, which holds every file written, even
    #: one whose size and mtime were kept; without a readable layer the content check is
    #: used) or "content" (every protected file compared with the image's by SHA-256: slow).
    protected_check: Literal["changes", "content"] = "changes"
    #: How an installed agent reaches the container: "layer" (an image built once per agent
    #: install and environment image, FROM the environment, reused) or "mount" (the cache
    #: directory bound read-only into every container).
    agent_install: Literal["layer", "mount"] = "layer"
    #: Seconds between SIGTERM and SIGKILL when a command times out.
    kill_grace_sec: float = Field(default=1.0, ge=0, le=60)
    #: Engine URLs (or ``{url, slots}``). Empty: ``$DOCKER_HOST`` or the local socket.
    engines: list[EngineOptions | str] = Field(default_factory=list)
    #: Containers per engine at once, across every run on this host (default: ``host_slots()``).
    slots_per_engine: int | None = Field(default=None, ge=1, le=1024)
    #: Limits used when the task gives none (None: unlimited).
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, ge=16)
    pids_limit: int = Field(default=4096, ge=16)
    cap_add: list[str] = Field(default_factory=list)
    #: Network a command joins when the policy allows it network access.
    network: str = "bridge"
    #: Network the egress proxy container reaches destinations through.
    egress_network: str = "bridge"
    #: Names the egress proxy resolves as given (name -> IP address or "host-gateway").
    egress_hosts: dict[str, str] = Field(default_factory=dict)
    #: Keep egress networks and proxy containers ready for the next attempts with an allowlist.
    egress_prestart: bool = True
    #: Attempts this process runs at once (the plugin sets it from ``--maka-concurrency`` / ini
    #: ``maka_concurrency`` when the spec leaves it out): that many egress proxies are kept ready
    #: from the first lease on (at most 4). None: learned as attempts run.
    concurrency: int | None = Field(default=None, ge=1, le=1024)
    no_new_privileges: bool = True
    #: Start the next container of an environment ahead of time (once it was leased twice).
    prestart: bool = True
    #: Keep the container (stopped) when the attempt ends with an exception.
    keep_on_failure: bool = False
    #: Seconds to wait for a free slot before the attempt fails as infra_failure.
    lease_timeout_sec: float = Field(default=3600.0, gt=0)
    #: Seconds an engine that stopped answering stays out of rotation before it is tried again.
    engine_retry_sec: float = Field(default=60.0, ge=0)
    #: Seconds a lease waits for some engine to answer again when every engine is down.
    engine_wait_sec: float = Field(default=300.0, ge=0)
    #: Host directory for slot locks, build locks and cached baselines (shared by workers).
    state_dir: Path | None = None
    #: Prefix of the tags of images built from task environments.
    image_prefix: str = Field(default="pytest-maka-env", pattern=r"^[a-z0-9][a-z0-9._/-]*$")

    @field_validator("network")
    @classmethod
    def _network(cls, v: str) -> str:
        if v == "host" or v.startswith("container:"):
            raise ValueError("host and container network modes cannot be joined per command; use a network name")
        return v

    @field_validator("egress_hosts")
    @classmethod
    def _egress_hosts(cls, v: dict[str, str]) -> dict[str, str]:
        return check_egress_hosts(v)

    @field_validator("cap_add")
    @classmethod
    def _caps(cls, v: list[str]) -> list[str]:
        out = []
        for cap in v:
            name = cap.upper().removeprefix("CAP_")
            if name in {"SYS_ADMIN", "ALL"}:
                raise ValueError(f"capability {cap!r} would undo the sandbox; refused")
            out.append(name)
        return out

    def engine_list(self) -> list[EngineOptions]:
        """The configured engines, or the one the environment points at."""
        raw = self.engines or [os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"]
        return [e if isinstance(e, EngineOptions) else EngineOptions(url=e) for e in raw]

    def default_slots(self) -> int:
        """``slots_per_engine``, else ``$MAKA_DOCKER_MAX_CONTAINERS``, else twice the host's CPUs (at least
        4): one size for every run on the host, since they share the slots."""
        if self.slots_per_engine is not None:
            return self.slots_per_engine
        return host_slots()

    def resolved_state_dir(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        return Path(tempfile.gettempdir()) / f"pytest-maka-{os.getuid()}" / "docker"


#: Containers per engine at once when the spec says nothing (every run on the host shares them).
MAX_CONTAINERS_ENV = "MAKA_DOCKER_MAX_CONTAINERS"
MIN_DEFAULT_SLOTS = 4


def host_slots() -> int:
    """``$MAKA_DOCKER_MAX_CONTAINERS``, else twice the host's CPUs with a minimum of 4.

    MakaUserError (one line) when the variable is not a whole number from 1 to 1024."""
    text = os.environ.get(MAX_CONTAINERS_ENV, "").strip()
    if text:
        if not text.isdigit() or not 1 <= int(text) <= 1024:
            raise MakaUserError(
                None, f"${MAX_CONTAINERS_ENV}", f"expected a whole number of containers from 1 to 1024 (got {text!r})"
            )
        return int(text)
    return max(MIN_DEFAULT_SLOTS, 2 * (os.cpu_count() or 1))
