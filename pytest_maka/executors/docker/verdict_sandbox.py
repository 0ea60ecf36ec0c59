"""The verdict channel of a leased container (a base of DockerSandbox; docs/security.md, "The verdict channel").

On a local engine it is private (``verdict``): the verification's ``/tests`` and
``/logs/verifier`` are host directories only its own commands see, and the processes the
subject left keep running, as in Harbor. Where that cannot be built, the channel is the
container's own and those processes are ended before the tests go in.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import InfraError
from ...core.task import TESTS_DIR, VERIFIER_LOGS_DIR
from ..base import ExecResult
from ..copyout import CopyReport
from ..hostfs import copy_out, remove_path
from .engines import EngineDown
from .execs import EXEC_TOKEN
from .full import LayerSpace, judged
from .spawn import read_via_archive
from .verdict import Container, PrivateVerdict, confined, probe

MAX_GROUP_BYTES = 1024 * 1024


class VerdictSandbox:
    """``open_verdict`` / ``close_verdict`` / ``verdict_channel`` and the private command path."""

    engine: Any
    id: str
    api: Any
    workdir: str
    restarts: int
    last_stop_s: float
    _grace: float
    _keepers: set[str]
    _user: str | None
    _witnesses: int | None
    #: ``_witnesses`` was counted by the last ``open_verdict`` and no command ran since (``leftover_processes``
    #: takes it instead of listing the processes again: one engine call less per verification).
    _witnesses_current: bool = False
    _stopped: int | None
    #: The open private channel (None: none open, or the channel is the container's own).
    _verdict: PrivateVerdict | None = None
    #: Why the last verification's channel was not private (None: it was).
    _shared_why: str | None = "no channel was opened"

    # provided by the other bases of DockerSandbox
    put: Callable[[Path, str], None]
    remove: Callable[[str], None]
    stop_leftovers: Callable[[], int | None]
    _processes: Callable[[], set[str]]
    _restart: Callable[[], None]
    _flush: Callable[[], None]
    resolve_user: Callable[[str | int, str], tuple[int, int, str]]
    removed_with_rm: str | None
    space: LayerSpace

    def _container(self) -> Container | str:
        with self.engine.guard("inspecting the container"):
            info = self.api.inspect_container(self.id)
        state = info["State"]
        found = probe(int(state.get("Pid") or 0) if state.get("Running") else None, self.id)
        return found if isinstance(found, str) else confined(found, info)

    def open_verdict(self, tests: Path | None, scratch: Path) -> None:
        """Private where the container allows it (``verdict``): empty ``/tests`` and
        ``/logs/verifier`` in the container (the mount points), the real ones on the host.
        Else the container's own, after the processes the subject left were ended."""
        self.close_verdict()
        self._witnesses_current = False
        found = self._container()
        empty = scratch / "empty-verifier-dir"
        channel = None
        with judged(self.space, "laying out the verification's host directories", scratch):
            empty.mkdir(exist_ok=True)
            if isinstance(found, Container):  # the container's own: only the mount points, empty
                self._shared_why, self._stopped = None, 0
                channel = PrivateVerdict(scratch / f"verdict-{secrets.token_hex(4)}", tests)
        if isinstance(found, Container):
            shown = empty if tests is not None else None
        else:
            self._shared_why, shown = found, tests
            with self.engine.guard("stopping the processes the subject left"):
                self._stopped = self.stop_leftovers()
        try:
            self.put(empty, VERIFIER_LOGS_DIR)
            if shown is not None:
                self.put(shown, TESTS_DIR)
            else:
                self.remove(TESTS_DIR)
            self._flush()
        except BaseException:
            if channel is not None:
                channel.close()
            raise
        self._verdict = channel  # from now on the channel's paths are its host directories
        try:
            with self.engine.guard("listing the processes the subject left"):
                self._witnesses = len(self._processes() - self._keepers)
            self._witnesses_current = True
        except EngineDown:
            raise
        except InfraError:  # e.g. the container stopped: the verifier's command restarts it
            self._witnesses = None

    def close_verdict(self) -> None:
        """The private channel's host directories go (its reward was copied out)."""
        if self._verdict is not None:
            self._verdict.close()
            self._verdict = None

    def verdict_channel(self) -> str:
        seen = self._witnesses
        if seen is None:
            ran = "whether a process of the subject's ran could not be told"
        elif seen == 0:
            ran = "no process of the subject's ran when the tests went in"
        else:
            ran = f"{seen} process{'es' if seen > 1 else ''} the subject left ran when the tests went in"
        if self.removed_with_rm is not None:
            ran += f"; a removal ran the container's rm ({self.removed_with_rm})"
        if self._shared_why is None:
            return (
                "private: /tests and /logs/verifier were host directories mounted only in the"
                " verification's own copy of the container's mount namespace; its processes"
                " carried a capability the container's lack and ended with it; the processes the"
                f" subject left kept running; {ran}"
            )
        stopped = (
            "processes the subject left could not be ended from here (engine on another host)"
            if self._stopped is None
            else f"{self._stopped} process(es) the subject left ended before the tests went in"
        )
        return f"shared: the container's /tests and /logs/verifier ({self._shared_why}); {stopped}; {ran}"

    def verdict_private(self) -> bool:
        """The last verification's channel was private (what runs in the container could not reach it)."""
        return self._shared_why is None

    def verdict_owns(self, sandbox_path: str) -> PrivateVerdict | None:
        """The open private channel when ``sandbox_path`` is its (``put``, ``remove``,
        ``read_file`` and ``write_file`` of it reach its host directories, not the mount points)."""
        channel = self._verdict
        return channel if channel is not None and channel.owns(sandbox_path) else None

    def verdict_spawn_refused(self) -> None:
        """A process cannot be started while the private channel is open: it would see only
        the container's empty mount points and outlive the verification's cgroup."""
        if self._verdict is not None:
            raise InfraError(
                "spawn is refused while the verification's private verdict channel is open"
                " (/tests and /logs/verifier are only in its commands): run it with exec"
            )

    def verdict_get(self, sandbox_path: str, host_path: Path, report: CopyReport | None) -> bool | None:
        """``get`` of a path in the open private channel (None: the path is not the channel's)."""
        channel = self.verdict_owns(sandbox_path)
        if channel is None:
            return None
        source = channel.host_path(sandbox_path)
        if source is None or (not source.exists() and not source.is_symlink()):
            return False  # a link on the way, or /tests of a verification without tests
        if host_path.is_symlink() or host_path.exists():
            remove_path(host_path)
        host_path.parent.mkdir(parents=True, exist_ok=True)
        return copy_out(source, host_path, report, name=Path(sandbox_path).name)

    # --- a command of the verification -----------------------------------------------
    def _exec_private(
        self,
        command: str,
        env: Mapping[str, str],
        timeout_sec: float | None,
        stdout_path: Path,
        stderr_path: Path,
        cwd: str | None,
        cap: int,
        started: float,
    ) -> ExecResult:
        assert self._verdict is not None
        found = self._container()
        if not isinstance(found, Container):  # its main process ended: start it again (as the shared path does)
            self._restart()
            found = self._container()
            if not isinstance(found, Container):
                raise InfraError(f"the private verdict channel is gone: {found}")
        uid, gid = self._ids()
        environment = {k: v for k, v in env.items() if k != EXEC_TOKEN}
        environment[EXEC_TOKEN] = secrets.token_hex(12)
        outcome = self._verdict.run(
            found,
            command=command,
            env=environment,
            cwd=cwd or self.workdir,
            uid=uid,
            gid=gid,
            timeout_sec=timeout_sec,
            grace=self._grace,
            stdout_path=stdout_path,
            stderr_path=stderr_path,
            cap=cap,
            started=started,
        )
        self.last_stop_s = outcome.stop_s
        return ExecResult(
            exit_code=outcome.exit_code,
            timed_out=outcome.timed_out,
            duration_s=time.monotonic() - started,
            stdout_truncated=outcome.truncated[0],
            stderr_truncated=outcome.truncated[1],
        )

    def _ids(self) -> tuple[int, int]:
        """(uid, gid) the command runs as: the phase's user, else the container's (as ``docker exec``)."""
        user = self._user
        if not user:
            with self.engine.guard("inspecting the container"):
                user = str((self.api.inspect_container(self.id).get("Config") or {}).get("User") or "")
        name, _, group = (user or "0").partition(":")
        if name in ("0", "root") and not group:
            return 0, 0
        if name.isdigit() and group.isdigit():
            return int(name), int(group)
        uid, gid, _home = self.resolve_user(name or "0", "verifier")
        if group.isdigit():
            gid = int(group)
        elif group:
            gid = self._group_id(group)
        return uid, gid

    def _group_id(self, group: str) -> int:
        with self.engine.guard("reading the image's /etc/group", refusals=False):
            text = read_via_archive(self.api, self.id, "/etc/group", MAX_GROUP_BYTES).decode("utf-8", "replace")
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) >= 3 and fields[0] == group and fields[2].isdigit():
                return int(fields[2])
        raise InfraError(f"[verifier] group {group!r} does not exist in the environment's /etc/group")
