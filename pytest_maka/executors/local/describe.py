"""What a local sandbox provides, as the record's ``isolation`` says it (``LocalSandbox.isolation``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.task import LOGS_DIR

if TYPE_CHECKING:
    from .sandbox import LocalSandbox


def describe_isolation(self: LocalSandbox, *, agent_network: bool, verifier_network: bool) -> dict[str, Any]:
    """What this sandbox really provides, for the record."""
    if self.options.sandbox == "none":
        return {
            "executor": "local",
            "sandbox": "none",
            "network": {"agent": "host", "verifier": "host"},
            "env": "allowlist",
            "pid_namespace": False,
            "kill": "process group, best effort (a process that calls setsid survives)",
            "filesystem": "host filesystem read-write; task paths mapped from a scratch directory",
            "mounts": _mount_list(self),
            "limits": {**self._limits.describe(), "storage": self.storage},
        }
    net = {True: "host", False: "none"}
    return {
        "executor": "local",
        "sandbox": "bwrap",
        "network": {"agent": net[agent_network], "verifier": net[verifier_network]},
        "env": "allowlist",
        "pid_namespace": True,
        "capabilities": "all dropped",
        "kill": "whole pid namespace",
        "filesystem": "tmpfs root; host /usr /bin /lib* /etc read-only; workdir and /logs writable",
        "masked": [*self._layout.masked_files, *self._layout.masked_dirs],
        "mounts": _mount_list(self),
        "limits": {**self._limits.describe(), "tmpfs_mb": self.options.tmpfs_mb, "storage": self.storage},
    }


def _mount_list(self: LocalSandbox) -> list[str]:
    if self.options.sandbox == "bwrap":
        mounts = [f"/ (tmpfs, {self.options.tmpfs_mb} MiB)"]
        mounts += [f"{p} -> {t}" if t else f"{p} (host, ro)" for p, t in self._layout.system]
        mounts += ["/proc (pid namespace)", "/dev (minimal)", f"/tmp (tmpfs, {self.options.tmpfs_mb} MiB)"]
    else:
        mounts = ["/ (host top-level directories, rw)"]
    mounts += [f"{p} (host, ro)" for p in self.options.ro_binds]
    mounts += [f"{dest} (ro, {src.name})" for dest, src in self._ro_mounts.items()]
    labels = {self._workdir: "workspace", LOGS_DIR: "logs"}
    return mounts + [f"{dest} (rw, {labels.get(dest, 'upload')})" for dest in self.files.binds()]
