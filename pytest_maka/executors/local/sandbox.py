"""The local executor's lease: host directories bound into a new bubblewrap sandbox per command.

See ``executors.local`` for the executor and the isolation it gives.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from ...core.errors import InfraError
from ...core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, LOGS_DIR, VERIFIER_LOGS_DIR, Task
from ...egress.tunguard import TunGuard
from ..base import ExecResult
from ..content import write_via_put
from ..copyout import CopyReport
from ..hostfs import remove_path
from . import bwrap, disk, stoppers
from .ahead import AheadSlot
from .ahead_commands import AheadCommands
from .describe import describe_isolation
from .disk import CappedDisk
from .egress import LocalEgress
from .files import LeaseFiles, sandbox_parts
from .full import SpaceWatch
from .limits import MB, LimitSpec, open_limits
from .options import DEFAULT_MAX_OUTPUT, LocalOptions
from .process import run_process, run_started
from .spawn import LocalProcess, close_fd


class LocalSandbox(AheadCommands):
    """One attempt's environment: host directories bound into a new bwrap per command."""

    def __init__(
        self, task: Task, scratch: Path, options: LocalOptions, *, mounts: Mapping[str, Path] | None = None
    ) -> None:
        self.task = task
        #: Read-only host directories bound at sandbox paths (an installed agent).
        self._ro_mounts = dict(mounts or {})
        self.options = options
        self._scratch = scratch
        self._layout = bwrap.host_layout()
        self._workdir = os.path.normpath(task.workdir)
        self._closed = False
        self._check_workdir()
        scratch.mkdir(parents=True, exist_ok=True)
        storage_mb = int(task.storage_mb) if task.storage_mb else options.storage_mb
        self._disk, self.storage = self._open_disk(storage_mb)
        area = self._disk.mount_point if self._disk is not None else scratch
        #: The workdir, /logs and the upload tops on the host.
        self.files = LeaseFiles(self._workdir, area, self._layout)
        #: What was free at the start: a full disk at the harness's write is judged against it.
        self._space = SpaceWatch(area, capped=self._disk is not None)
        self._empty = scratch / "empty"  # bound over masked secret files
        self._spawned: list[LocalProcess] = []
        #: A command's sandbox set up ahead (``exec_ahead``: the verifier's, while the subject runs).
        self._ahead = AheadSlot()
        self._lay_out()
        self._prefix = bwrap.isolated_prefix(self._layout, self._empty, options.ro_binds, options.tmpfs_mb * MB)
        self.egress = LocalEgress(scratch, options.egress_hosts, isolated=options.sandbox == "bwrap")
        #: The network plan's phase context: ``egress_phase(name, plan, log)``.
        self.egress_phase = self.egress.phase
        self._limits = open_limits(
            LimitSpec(
                memory_mb=task.memory_mb or options.memory_mb,
                pids=options.pids_limit,
                file_mb=storage_mb,
            )
        )

    def _open_disk(self, storage_mb: int | None) -> tuple[CappedDisk | None, dict[str, Any]]:
        """A capped filesystem for the writable directories, where this host can make one."""
        if storage_mb is None:
            return None, {"storage_mb": None, "enforced": False, "note": "the task sets no storage_mb"}
        why = disk.unavailable()
        if why is None:
            try:
                capped = CappedDisk(self._scratch, storage_mb)
            except OSError as e:
                why = str(e)
            else:
                return capped, {"storage_mb": storage_mb, "enforced": True, "mechanism": "loop-mounted ext4"}
        return None, {"storage_mb": storage_mb, "enforced": False, "note": f"{why}; each file capped instead"}

    def _check_workdir(self) -> None:
        top = PurePosixPath(self._workdir).parts[1:2]
        if top and top[0] in self._layout.system_tops and not os.path.isdir(self._workdir):
            raise InfraError(
                f"the local executor cannot mount workdir {self._workdir}: it lies under the host's "
                "read-only system directories (use the docker executor for this task)"
            )

    def _lay_out(self) -> None:
        files = self.files
        for path in (files.workspace, files.logs, files.mounts):
            if os.path.lexists(path):
                remove_path(path)
        if self.task.workspace_dir is not None:
            shutil.copytree(self.task.workspace_dir, files.workspace, symlinks=True)
        else:
            files.workspace.mkdir()
        for sub in (AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR):
            (files.logs / PurePosixPath(sub).relative_to(LOGS_DIR)).mkdir(parents=True)
        files.mounts.mkdir()
        self._empty.touch()
        self._empty.chmod(0o444)

    # -- running commands ---------------------------------------------------------------

    def exec(
        self,
        command: str,
        *,
        env: Mapping[str, str],
        timeout_sec: float | None,
        stdout_path: Path,
        stderr_path: Path,
        network: bool = False,
        cwd: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    ) -> ExecResult:
        """Run ``sh -c command`` in a new sandbox; returns once every process it started is gone."""
        self._require_open()
        self.files.first_command()
        prepared = None if network else self._take_ahead(command, env, cwd)
        if prepared is not None and not prepared.hold(self._limits.enter):
            prepared.discard()  # its set-up failed: the command starts as usual
            prepared = None
        if prepared is not None:
            try:
                result = run_started(
                    prepared.proc,
                    prepared.release,
                    timeout_sec=timeout_sec,
                    stdout_path=stdout_path,
                    stderr_path=stderr_path,
                    max_output_bytes=max_output_bytes,
                    grace_sec=self.options.kill_grace_sec,
                    stopper=prepared.stopper,
                )
            finally:
                prepared.close()
            return replace(result, limits_hit=tuple(self._limits.exceeded()), set_up_ahead=True)
        argv, pass_fds, env_fd, guard, (read_fd, write_fd) = self._launch(command, env, network, cwd)
        try:
            result = run_process(
                argv,
                timeout_sec=timeout_sec,
                stdout_path=stdout_path,
                stderr_path=stderr_path,
                max_output_bytes=max_output_bytes,
                grace_sec=self.options.kill_grace_sec,
                make_stopper=self._stopper(read_fd, guard),
                pass_fds=pass_fds,
                hold=self._hold(guard),
            )
            hit = self._limits.exceeded()
            return replace(result, limits_hit=tuple(hit)) if hit else result
        finally:
            if guard is not None:
                guard.launched(ended=True)
            os.close(env_fd)
            os.close(read_fd)
            os.close(write_fd)

    def _launch(
        self, command: str, env: Mapping[str, str], network: bool, cwd: str | None
    ) -> tuple[list[str], tuple[int, ...], int, TunGuard | None, tuple[int, int]]:
        """The bwrap command line, the fds it inherits, the fd it reads the environment from, (with
        ``network`` through the phase's proxy) the command's TUN device, started: it waits for bwrap,
        and the info pipe (read, write)."""
        isolated = self.options.sandbox == "bwrap"
        proxied = self.egress.current if network and isolated else None
        env_fd = bwrap.env_file({**env, **proxied.env} if proxied else env)
        pipe = os.pipe()
        info_fd = pipe[1]
        guard = self.egress.guard() if proxied else None
        if guard is not None:
            guard.start()
        g = guard.args if guard else ()
        argv = self._argv(command, env_fd=env_fd, network=network, proxied=proxied, cwd=cwd, info_fd=info_fd, extra=g)
        return argv, (info_fd, env_fd, *(guard.fds if guard else ())) if isolated else (env_fd,), env_fd, guard, pipe

    def _argv(
        self,
        command: str,
        *,
        env_fd: int,
        network: bool,
        proxied: Any,
        cwd: str | None,
        info_fd: int,
        extra: Any = (),
        binds: dict[str, Path] | None = None,
        block_fd: int | None = None,
    ) -> list[str]:
        isolated = self.options.sandbox == "bwrap"
        prefix = self._prefix if isolated else self._open_prefix()
        for dest, src in self._ro_mounts.items():
            prefix = [*prefix, "--ro-bind", str(src), dest]
        return bwrap.command_argv(
            prefix,
            binds=self.files.binds() if binds is None else binds,
            network=network and proxied is None,
            isolated=isolated,
            resolv_target=self._layout.resolv_target,
            cwd=cwd or self._workdir,
            command=command,
            info_fd=info_fd if isolated else None,
            env_fd=env_fd,
            extra_args=(*proxied.extra_args, *extra) if proxied else (),
            wrapper=proxied.wrapper if proxied else None,
            block_fd=block_fd,
        )

    def _hold(self, guard: TunGuard | None) -> Callable[[int], None]:
        """What runs once the command's process exists, before it may start: its limits, and the
        TUN guard's pipe ends closed on this side (bwrap's end of its status then ends with it)."""

        def hold(pid: int) -> None:
            self._limits.enter(pid)
            if guard is not None:
                guard.launched()

        return hold

    def _stopper(self, read_fd: int, guard: TunGuard | None) -> Any:
        isolated = self.options.sandbox == "bwrap"
        status = guard.status if guard is not None else None

        def make(proc: Any) -> stoppers.NamespaceStopper | stoppers.GroupStopper:
            return stoppers.NamespaceStopper(proc, read_fd, status=status) if isolated else stoppers.GroupStopper(proc)

        return make

    def spawn(
        self, command: str, *, env: Mapping[str, str], cwd: str | None = None, network: bool = False
    ) -> LocalProcess:
        """Start ``sh -c command`` in a new sandbox over this lease's directories; returns at once.

        Like ``exec`` it runs inside the lease's limits and, with ``network``, behind the
        current egress phase's proxy.
        """
        self._require_open()
        argv, pass_fds, env_fd, guard, (read_fd, write_fd) = self._launch(command, env, network, cwd)
        try:
            proc = LocalProcess(
                argv,
                self._stopper(read_fd, guard),
                pass_fds=pass_fds,
                hold=self._limits.enter,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            if guard is not None:
                guard.launched()
            os.close(write_fd)
            os.close(env_fd)
        proc.on_end(close_fd(read_fd))
        self._spawned.append(proc)
        return proc

    def _open_prefix(self) -> list[str]:
        taken = {PurePosixPath(d).parts[1] for d in self.files.binds()}
        return bwrap.open_prefix(self._layout, taken, self.options.ro_binds)

    # -- moving files (executors/local/files.py) ---------------------------------------------

    def read_file(self, sandbox_path: str, max_bytes: int) -> bytes:
        """The content of a regular file, reached through real directories only."""
        self._require_open()
        return self.files.read_file(sandbox_path, max_bytes)

    def write_file(self, sandbox_path: str, data: bytes) -> None:
        """Create or replace a regular file (through ``put``: planted links are replaced)."""
        self._require_open()
        try:
            write_via_put(self, sandbox_path, data, self._scratch)
        except OSError as exc:
            fault = self._space.fault(exc, f"writing {sandbox_path}")
            if fault is None:
                raise
            raise fault from exc

    def put(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a file or directory to ``sandbox_path``, replacing whatever is there."""
        self._require_open()
        try:
            self.files.put(host_path, sandbox_path)
        except OSError as exc:  # a full disk: the subject's doing only on evidence it could not fake
            fault = self._space.fault(exc, f"copying {sandbox_path} in")
            if fault is None:
                raise
            raise fault from exc

    def full_disk(self) -> str | None:
        """Why the lease's own capped disk counts as full now (no block or no inode left for an
        unprivileged writer), or None: what kept a verifier from writing its reward."""
        return self._space.full_now()

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out by the rules of ``copyout`` (no link followed or kept, capped, noted in
        ``report``); False when nothing is at ``sandbox_path``."""
        self._require_open()
        return self.files.get(sandbox_path, host_path, report=report)

    def remove(self, sandbox_path: str) -> None:
        """Delete what is at ``sandbox_path`` (a symlink standing on the way is deleted instead)."""
        self._require_open()
        self.files.remove(sandbox_path)

    def open_verdict(self, tests: Path | None, scratch: Path) -> None:
        """/tests and /logs/verifier private to the verification: host directories bound only into
        the commands run from now on, over the lease's /logs (docs/security.md, "The verdict channel").

        No process of the subject can see them: each command is a pid namespace of its own whose
        processes all end with it, and none of the lease's other commands binds these directories.
        """
        self._require_open()
        self.files.open_verdict(tests)

    def close_verdict(self) -> None:
        self._require_open()
        self.files.close_verdict()

    def verdict_channel(self) -> str:
        if self.options.sandbox == "none":
            return "shared: sandbox none shares the host, where its host directories can be found"
        return "private: bound only into the verification's commands (bwrap)"

    @property
    def read_only_system(self) -> bool:
        """The host's system shows read-only here (bwrap): a task that must change it cannot pass."""
        return self.options.sandbox != "none"

    def restore_protected(self, scratch: Path) -> dict[str, Any]:
        """Copy in again every upload the subject changed; nothing else can have survived it.

        With bwrap the system directories are the host's, read-only, and the root and /tmp
        are new for every command: only the workdir, /logs and the upload mounts persist.
        """
        self.files.reopen_roots()
        changed, restored = self.files.restore_uploads()
        if self.options.sandbox == "none":
            mechanism = (
                "none: the host filesystem is shared read-write; changes outside the workdir are neither "
                "detected nor undone (uploads are compared and copied in again)"
            )
        else:
            mechanism = (
                "bwrap: host system directories read-only, root and /tmp new per command; "
                "uploads compared by inode and ctime and copied in again when changed"
            )
        return {"mechanism": mechanism, "changed": changed[:50], "changed_count": len(changed), "restored": restored}

    def workspace_snapshot(self, dest: Path, *, report: CopyReport | None = None) -> Path:
        """The live workspace directory on the host (no copy: ``report`` stays empty)."""
        return self.files.workspace

    def baseline_workspace(self) -> Path | None:
        return self.task.workspace_dir

    # -- description and teardown ------------------------------------------------------

    def isolation(self, *, agent_network: bool, verifier_network: bool) -> dict[str, Any]:
        """What this sandbox really provides, for the record."""
        return describe_isolation(self, agent_network=agent_network, verifier_network=verifier_network)

    def close(self) -> None:
        """Remove the scratch directory (also what the subject made read-only)."""
        if not self._closed:
            self._closed = True
            self._ahead.close()
            self._limits.close()
            if self._disk is not None:
                self._disk.close()
            for proc in self._spawned:  # no survivors after the lease
                proc.kill(self.options.kill_grace_sec)
            if os.path.lexists(self._scratch):
                remove_path(self._scratch)

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("this sandbox's lease has ended")


__all__ = ["LocalSandbox", "sandbox_parts"]
