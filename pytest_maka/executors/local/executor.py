"""The local executor: every command runs in a fresh bubblewrap sandbox on this machine.

A lease is a scratch directory on the host (workspace, logs, uploads); each ``exec`` is a
new bwrap invocation that binds those directories at the task's paths over a tmpfs root
with the host's system directories read-only, no network, no host environment, and a pid
namespace so that stopping the command stops everything it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel

from ...core.errors import ExecutorUnavailable
from ...core.hostreqs import Need
from ...core.task import Task
from ..base import ExecutorBase, ExecutorCapabilities, LeaseRequest
from . import disk, limits
from .sandbox import DEFAULT_MAX_OUTPUT, LocalOptions, LocalSandbox

MISSING_BWRAP = "the local executor needs bubblewrap (bwrap), which is not installed: apt-get install bubblewrap"


#: The check's probe is tried again when bwrap failed on a mount that changed under it:
#: binding a host tree recursively (sandbox="none") races with mounts made and removed
#: meanwhile, e.g. a Docker container's overlay under /var/lib/docker.
CHECK_TRIES = 3
TRANSIENT_MOUNT_ERROR = "Unable to apply mount flags: remount"


class LocalExecutor(ExecutorBase):
    """Runs attempts on this machine, each command in a new bwrap sandbox."""

    kind: ClassVar[str] = "local"
    Options: ClassVar[type[BaseModel]] = LocalOptions
    capabilities: ClassVar[ExecutorCapabilities] = ExecutorCapabilities(multi_step=True)

    def __init__(self, options: LocalOptions | None = None) -> None:
        self.options = options or LocalOptions()

    @property
    def isolated(self) -> bool:
        return self.options.sandbox == "bwrap"

    def host_needs(self, tasks: list[Task], egress_cells: int) -> list[Need]:
        """bubblewrap; with cells behind the egress proxy, tinyproxy and the forwarder too (``egress.host``)."""
        needs = [Need("bwrap", "the local executor")]
        if egress_cells:
            why = f"the egress proxy of {egress_cells} cell{'s' if egress_cells != 1 else ''}"
            needs += [Need("tinyproxy", why), Need("forwarder", why)]
        return needs

    def check(self) -> None:
        """Raise ExecutorUnavailable unless a trivial sandbox runs here."""
        if shutil.which("bwrap") is None:
            raise ExecutorUnavailable(MISSING_BWRAP)
        for path in self.options.ro_binds:
            if not os.path.exists(path):
                raise ExecutorUnavailable(f"local executor option ro_binds: {path} does not exist")
        cause = None
        for _ in range(CHECK_TRIES):
            cause = self._probe()
            if cause is None or TRANSIENT_MOUNT_ERROR not in cause:
                break
        if cause is not None:
            raise ExecutorUnavailable(f"bubblewrap (bwrap) cannot create a sandbox here: {cause}")

    def _probe(self) -> str | None:
        """Run ``true`` in a sandbox: None, or the first line bwrap printed when it failed."""
        with tempfile.TemporaryDirectory(prefix="maka-check-") as tmp:
            root = Path(tmp)
            task = Task(id="maka-check", path=root, instruction="", digest="")
            sandbox = LocalSandbox(task, root / "scratch", self.options)
            try:
                result = sandbox.exec(
                    "true", env={}, timeout_sec=30, stdout_path=root / "out", stderr_path=root / "err"
                )
            finally:
                sandbox.close()
            if result.exit_code == 0:
                return None
            lines = (root / "err").read_text(errors="replace").strip().splitlines()
            return lines[0] if lines else f"exit code {result.exit_code}"

    def prepare(self, tasks: list[Task]) -> None:
        """Nothing to build (the host is the image); remove what leases of dead processes left."""
        limits.sweep()
        disk.sweep()

    @contextmanager
    def lease(self, request: LeaseRequest) -> Iterator[LocalSandbox]:
        """A fresh sandbox in ``request.scratch_dir``, removed on exit whatever happens."""
        sandbox = LocalSandbox(request.cell.task, request.scratch_dir, self.options, mounts=request.mounts)
        try:
            for dest, src in request.uploads.items():
                sandbox.put(Path(src), dest)
            yield sandbox
        finally:
            sandbox.close()

    def close(self) -> None:
        """Nothing is held between leases."""


__all__ = ["DEFAULT_MAX_OUTPUT", "MISSING_BWRAP", "LocalExecutor", "LocalOptions", "LocalSandbox"]
