"""One attempt's container: exec with real timeouts, tar put/get, and a description of its isolation."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import docker.errors

from ...core.errors import InfraError, SubjectFault
from ...egress.log import EgressLog
from ...egress.plan import PhasePlan
from ..base import ExecResult
from ..content import write_via_put
from ..copyout import CopyReport
from ..hostfs import remove_path
from .archive import Batch, extract_archive
from .egress import DockerEgress
from .engines import Engine
from .execs import Capture
from .image_env import ImageFacts
from .processes import ContainerProcesses
from .protect import Restorer
from .protect_paths import GO_MODE_DIR, PROTECTED_ROOTS, find_rm, stat_path
from .spawn import DockerProcess, read_via_archive

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024


def _check_path(path: str) -> str:
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or str(p) == "/":
        raise ValueError(f"sandbox paths must be absolute, without '..', and not /: {path!r}")
    return str(p)


class DockerSandbox(ContainerProcesses, ImageFacts):
    """A running container leased for one attempt (created and removed by the executor)."""

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        *,
        workdir: str,
        network: str,
        kill_grace_sec: float,
        baseline: Callable[[], Path | None],
        info: dict[str, Any],
        protected_check: str = "changes",
        mounts: tuple[str, ...] = (),
        image_config: dict[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.id = container_id
        self.workdir = workdir
        self._network = network
        self._grace = kill_grace_sec
        self._baseline = baseline
        self._info = info
        self._content_check = protected_check == "content"
        self._mounts = mounts
        self._keepers: set[str] = set()
        self._inner: tuple[str, ...] = ()
        self._image_config = image_config or {}
        self._fresh: set[str] = set()  # paths cleared since the last exec: put needs no clearing
        self._batch = Batch()  # puts waiting to be sent as one archive
        self._dirty = False  # an exec ran: the subject may have planted links
        self.networks_used: set[str] = set()
        #: The attempt's egress (internal network + proxy), set by the executor's lease.
        self.egress: DockerEgress | None = None
        self._proxied = False  # joined to the egress proxy's network right now
        self.restarts = 0
        #: Protected paths put back to make a container the subject broke start again.
        self._repaired: list[str] = []
        #: Seconds the last exec spent stopping what its command left (for the benchmark).
        self.last_stop_s = 0.0

    # --- exec -------------------------------------------------------------------------
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
        """``sh -c command``; returns once every process it started is gone (also on timeout)."""
        self._dirty, self._fresh = True, set()
        started = time.monotonic()
        proxied = self.egress.current if network and self.egress is not None else None
        target = proxied.network if proxied else self._network
        with self.engine.guard("running a command"):
            self._flush()
            if network:
                self._join(target, proxied is not None)
            try:
                env = {**env, **proxied.env} if proxied else env
                return self._exec(command, env, timeout_sec, stdout_path, stderr_path, cwd, max_output_bytes, started)
            finally:
                if network:
                    self._leave(target)

    def _join(self, target: str, proxied: bool) -> None:
        """Join ``target`` for a command; the egress proxy's network also gets the packet logger's route."""
        with self.engine.guard(f"connecting the container to the network {target}", refusals=False):
            self.api.connect_container_to_network(self.id, target)
        self.networks_used.add("egress-internal" if proxied else target)
        if proxied and self.egress is not None:
            self._proxied = True
            self.egress.joined(self.id, self.restarts)

    def _leave(self, target: str) -> None:
        self._proxied = False
        with self.engine.guard(f"disconnecting the container from the network {target}", refusals=False):
            self.api.disconnect_container_from_network(self.id, target, force=True)

    def _restart(self) -> None:
        super()._restart()
        if self._proxied and self.egress is not None:  # a new namespace: a new logger and route
            self.egress.joined(self.id, self.restarts)

    @contextmanager
    def egress_phase(self, name: str, plan: PhasePlan, log: EgressLog) -> Iterator[None]:
        """Phase ``name`` of the network plan: an allowlist phase runs behind the attempt's proxy."""
        if self.egress is None:
            raise InfraError("this docker sandbox has no egress proxy")
        with self.egress.phase(name, plan, log, container=self.id):
            yield

    def _exec(
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
        argv = ["sh", "-c", command]
        environment = [f"{k}={v}" for k, v in env.items()]
        eid, capture = self._start_exec(argv, environment, cwd, stdout_path, stderr_path, cap)
        deadline = None if timeout_sec is None else started + timeout_sec
        timed_out, exit_code = False, None
        try:
            exit_code, timed_out = self._watch(eid, capture, deadline)
        except BaseException:
            capture.close()
            raise
        stop_started = time.monotonic()
        self.stop_all(grace=self._grace if timed_out else 0.0)
        self.last_stop_s = time.monotonic() - stop_started
        if not capture.wait(10):
            capture.close()
        reader_failed = capture.surface_error()
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout_truncated=capture.truncated[0] or reader_failed,
            stderr_truncated=capture.truncated[1] or reader_failed,
        )

    def _start_exec(
        self, argv: list[str], environment: list[str], cwd: str | None, stdout_path: Path, stderr_path: Path, cap: int
    ) -> tuple[str, Capture]:
        """Create and start the exec; its output drains into the two files from now on."""
        with self.engine.guard("starting the command", refusals=False):
            for attempt in (1, 2):
                try:
                    eid = self.api.exec_create(
                        self.id,
                        argv,
                        environment=environment,
                        workdir=cwd or self.workdir,
                        stdout=True,
                        stderr=True,
                        user=self._user or "",
                    )["Id"]
                    break
                except docker.errors.APIError as exc:
                    if attempt == 2 or exc.status_code != 409:
                        raise
                    self._restart()  # the previous command killed the keeper: start over
            sock = self.api.exec_start(eid, socket=True)
            self.api._disable_socket_timeout(sock)
            capture = Capture(sock, stdout_path, stderr_path, cap)
            capture.start()
            return eid, capture

    def _watch(self, eid: str, capture: Capture, deadline: float | None) -> tuple[int | None, bool]:
        """Wait for the command's end (or the deadline): (exit code, timed out)."""
        with self.engine.guard("streaming the command's output", refusals=False):
            interval = 0.02
            while True:
                wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
                if capture.wait(wait):
                    return self._exit_code(eid), False
                if deadline is not None and time.monotonic() >= deadline:
                    return None, True
                info = self.api.exec_inspect(eid)
                if not info["Running"]:  # background processes still hold the output open
                    return info.get("ExitCode"), False
                interval = min(interval * 2, 0.5)

    def _exit_code(self, eid: str) -> int | None:
        with self.engine.guard("reading the command's exit code", refusals=False):
            for _ in range(200):
                info = self.api.exec_inspect(eid)
                if not info["Running"]:
                    return info.get("ExitCode")
                time.sleep(0.005)
        return None

    def spawn(
        self, command: str, *, env: Mapping[str, str], cwd: str | None = None, network: bool = False
    ) -> DockerProcess:
        """Start ``sh -c command`` with stdin attached; returns at once (the container's end stops it)."""
        self._dirty, self._fresh = True, set()
        proxied = self.egress.current if network and self.egress is not None else None
        target = proxied.network if proxied else self._network
        with self.engine.guard("starting a process"):
            self._flush()
            if network:
                self._join(target, proxied is not None)
            env = {**env, **proxied.env} if proxied else env
            proc = DockerProcess(self, command, env=env, cwd=cwd or self.workdir)
            if network:
                proc.on_end(lambda: self._leave(target))
            return proc

    def read_file(self, sandbox_path: str, max_bytes: int) -> bytes:
        """At most ``max_bytes`` of a regular file, read through the engine (links are not followed)."""
        path = _check_path(sandbox_path)
        with self.engine.guard(f"reading {path}"):
            self._flush(path)
            return read_via_archive(self.api, self.id, path, max_bytes)

    def write_file(self, sandbox_path: str, data: bytes) -> None:
        """Create or replace a regular file (through ``put``: planted links are replaced)."""
        write_via_put(self, sandbox_path, data)

    # --- files ------------------------------------------------------------------------
    def _stat(self, path: str) -> dict[str, Any] | None:
        with self.engine.guard(f"reading what is at {path}", refusals=False):
            return stat_path(self.api, self.id, path)

    def _exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def _clear_way(self, path: str) -> None:
        """Queue directories over every symlink or file standing where a parent of ``path``
        should be a directory (the image's own top-level links such as /bin are kept)."""
        parts = PurePosixPath(path).parts[1:-1]
        for depth in range(1, len(parts) + 1):
            ancestor = "/" + "/".join(parts[:depth])
            st = self._stat(ancestor)
            if st is None:
                return  # the engine creates the rest
            if st["mode"] & GO_MODE_DIR and not st.get("linkTarget"):
                continue
            if depth == 1 and ancestor in PROTECTED_ROOTS:
                continue
            self._batch.replace_marker(ancestor, directory=True)

    def _flush(self, touching: str | None = None) -> None:
        """Send the waiting puts (all, or only if one of them touches ``touching``)."""
        if touching is not None and not self._batch.overlaps(touching):
            return
        tar = self._batch.take()
        if tar is not None:
            with tar, self.engine.guard("sending the queued files into the container", refusals=False):
                self.api.put_archive(self.id, "/", tar)

    def put(self, host_path: Path, sandbox_path: str) -> None:
        """Copy a host file or directory to ``sandbox_path``, replacing whatever is there.

        The copy is taken now and sent with the next operation that needs it (puts in a row
        travel as one archive).
        """
        path = _check_path(sandbox_path)
        with self.engine.guard(f"copying {path} into the container"):
            if path not in self._fresh:
                self._flush(path)
                if self._dirty:
                    self._clear_way(path)
                self._batch.replace_marker(path)  # whatever stands there goes, engine-side
            self._batch.add(host_path, path)
            self._fresh.discard(path)

    def put_many(self, entries: list[tuple[Path | None, str]]) -> None:
        """Queue several host paths (None: an empty directory) for a fresh container."""
        for host_path, path in entries:
            self._batch.add(host_path, _check_path(path))

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out by the rules of ``copyout`` (streamed, capped, no link kept; noted in
        ``report``); False when nothing is at ``sandbox_path``."""
        path = _check_path(sandbox_path)
        with self.engine.guard(f"copying {path} out of the container"):
            self._flush(path)
            url = self.api._url("/containers/{0}/archive", self.id)
            res = self.api._get(url, params={"path": path}, stream=True)
            try:
                if res.status_code == 404:
                    return False
                if res.status_code >= 400 and "not a directory" in res.text:  # a parent is a file: nothing there
                    return False
                self.api._raise_for_status(res)
                if host_path.is_symlink() or host_path.is_file():
                    host_path.unlink()
                elif host_path.exists():
                    remove_path(host_path)
                host_path.parent.mkdir(parents=True, exist_ok=True)
                extract_archive(res.iter_content(1024 * 1024, False), host_path, report)
            finally:
                res.close()  # an archive cut short at the cap: drop the connection, unread
        return True

    def remove(self, sandbox_path: str) -> None:
        """Delete what is at ``sandbox_path`` (a symlink on the way is deleted, never followed)."""
        path = _check_path(sandbox_path)
        with self.engine.guard(f"removing {path}"):
            self._flush(path)
            if self._exists(path):  # a dangling link counts: the engine does not follow the last part
                self._remove(path)
            self._fresh.add(path)

    def _remove(self, path: str) -> None:
        """The engine replaces the tree by an empty file; the container's rm deletes that file.

        Whatever the subject left at ``path`` is gone even when rm was replaced; then the
        empty file stays and SubjectFault says so.
        """
        if self._dirty:
            self._clear_way(path)
        self._batch.replace_marker(path)
        self._flush()
        rm = find_rm(self._stat)
        if rm is not None:
            self._run([rm, "-f", "--", path])
        if self._exists(path):
            raise SubjectFault(f"could not remove {path}: the container's rm does not work (was it replaced?)", [path])

    def restore_protected(self, scratch: Path) -> dict[str, Any]:
        """Undo the subject's changes to protected paths through the engine (docs/security.md)."""
        with self.engine.guard("restoring protected paths"):
            self._flush()
            with self._restorer() as restorer:
                restorer.copy_back()
                if restorer.touched or self.restarts:
                    # the keeper may be a program the subject planted: only a restart after the
                    # copy-back makes every process in the container one the image started
                    self._restart()
                restorer.delete()
            self._fresh = set()
        report = restorer.report()
        if self._repaired:  # put back earlier, when the broken container had to be restarted
            report["restored"] = sorted({*self._repaired, *report["restored"]})[:50]
            report["restored_count"] += len(self._repaired)
        return {**report, "restarted": bool(restorer.touched or self.restarts)}

    def _restorer(self) -> Restorer:
        return Restorer(
            self.engine,
            self.id,
            self._info["image"],
            workdir=self.workdir,
            content=self._content_check,
            mounts=self._mounts,
        )

    def _repair(self) -> None:
        """The container no longer starts: put its protected paths back (engine-side) and retry."""
        with self.engine.guard("restoring protected paths", refusals=False), self._restorer() as restorer:
            restorer.copy_back()
        self._repaired += restorer.units + restorer.added
        self.start()
        if len(self._keepers) < 2:
            raise SubjectFault("the container no longer starts, even with its system directories restored")

    def workspace_snapshot(self, dest: Path, *, report: CopyReport | None = None) -> Path:
        """A host copy of the workdir as it is now (capped like ``get``)."""
        if not self.get(self.workdir, dest, report=report):
            dest.mkdir(parents=True, exist_ok=True)
        return dest

    def baseline_workspace(self) -> Path | None:
        """The workdir as the attempt started (image content plus the task's workspace)."""
        return self._baseline()

    def isolation(self, *, agent_network: bool, verifier_network: bool) -> dict[str, Any]:
        """What this container really provides, for the record."""
        net = {True: self._network, False: "none"}
        return {
            **self._info,
            "network": {"agent": net[agent_network], "verifier": net[verifier_network]},
            "networks_joined": sorted(self.networks_used),
            "container_restarts": self.restarts,
        }
