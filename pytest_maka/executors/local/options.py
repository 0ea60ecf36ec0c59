"""The local executor's options (the spec's ``executor:`` for ``kind: local``)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core.hostpattern import check_egress_hosts

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024


class LocalOptions(BaseModel):
    """The spec's ``executor:`` options for ``kind: local``."""

    model_config = ConfigDict(extra="forbid")

    #: "none" is an explicit opt-out of isolation: host filesystem read-write, host network.
    sandbox: Literal["bwrap", "none"] = "bwrap"
    #: Extra host paths bound read-only at the same path (e.g. where an agent CLI is installed).
    ro_binds: list[str] = Field(default_factory=list)
    #: Seconds between SIGTERM and SIGKILL when a command times out.
    kill_grace_sec: float = Field(default=1.0, ge=0)
    #: Names the egress proxy resolves as given (name -> IP address), e.g. a local model gateway.
    egress_hosts: dict[str, str] = Field(default_factory=dict)

    @field_validator("egress_hosts")
    @classmethod
    def _ip_values(cls, hosts: dict[str, str]) -> dict[str, str]:
        return check_egress_hosts(hosts)

    #: Memory per sandbox when the task gives no ``memory_mb`` (None: unlimited).
    memory_mb: int | None = Field(default=None, ge=16)
    #: Processes (and threads) per sandbox at once.
    pids_limit: int = Field(default=4096, ge=16)
    #: Size of each of the sandbox's tmpfs (/ and /tmp), in MiB.
    tmpfs_mb: int = Field(default=1024, ge=1)
    #: Writable space (workdir, /logs, uploads) in MiB when the task gives no ``storage_mb`` (None: no cap).
    storage_mb: int | None = Field(default=None, ge=8)

    @field_validator("ro_binds")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/"):
                raise ValueError(f"ro_binds entries must be absolute paths, got {path!r}")
        return [os.path.normpath(p) for p in paths]
