"""One attempt's container: exec with real timeouts, tar put/get, and a description of its isolation."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker.errors

from ...core.errors import InfraError, SubjectFault
from ...core.task import TESTS_DIR, VERIFIER_LOGS_DIR
from ...egress.log import EgressLog
from ...egress.plan import PhasePlan
from ..base import ExecResult
from ..content import write_via_put
from ..copyout import CopyReport
from .archive import Batch
from .egress import DockerEgress
from .engines import Engine, EngineDown
from .execs import Capture
from .files import ContainerFiles, check_path
from .image_env import ImageFacts
from .processes import ContainerProcesses
from .protect import Restorer
from .spawn import DockerProcess, read_via_archive

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024


class DockerSandbox(ContainerFiles, ContainerProcesses, ImageFacts):
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
        #: Processes the subject left that ran when the last verification's tests went in (None: unknown).
        self._witnesses: int | None = None
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
                if proxied is not None and self.egress is not None:
                    self.egress.settled.set()  # the next attempt's proxy may be made now

    def _join(self, target: str, proxied: bool) -> None:
        """Join ``target`` for a command; the egress proxy's network also gets the packet logger's route."""
        if self.egress is not None and proxied:  # its packet logger runs, its resolver is the proxy
            self.egress.ready(self.id, self.restarts)
        elif self.egress is not None:  # the container's own resolver back, if an allowlist phase set the proxy's
            self.egress.own_files(self.id)
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
        with self.egress.phase(name, plan, log, container=self.id, generation=self.restarts):
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
        path = check_path(sandbox_path)
        with self.engine.guard(f"reading {path}"):
            self._flush(path)
            return read_via_archive(self.api, self.id, path, max_bytes)

    def write_file(self, sandbox_path: str, data: bytes) -> None:
        """Create or replace a regular file (through ``put``: planted links are replaced)."""
        write_via_put(self, sandbox_path, data)

    # --- the verdict channel (docs/security.md, "The verdict channel") --------------------
    def open_verdict(self, tests: Path | None, scratch: Path) -> None:
        """The container's own /tests (fresh) and /logs/verifier (empty): not private; notes how
        many processes the subject left run now, when the tests go in (for ``verdict_channel``)."""
        empty = scratch / "empty-verifier-dir"
        empty.mkdir(exist_ok=True)
        self.put(empty, VERIFIER_LOGS_DIR)
        if tests is not None:
            self.put(tests, TESTS_DIR)
        else:
            self.remove(TESTS_DIR)
        try:
            with self.engine.guard("listing the processes the subject left"):
                self._witnesses = len(self._processes() - self._keepers)
        except EngineDown:
            raise
        except InfraError:  # e.g. the container stopped: the verifier's command restarts it
            self._witnesses = None

    def close_verdict(self) -> None:
        """Nothing to undo: the channel was the container's."""

    def verdict_channel(self) -> str:
        seen = self._witnesses
        if seen is None:
            ran = "whether a process of the subject's ran could not be told"
        elif seen == 0:
            ran = "no process of the subject's ran when the tests went in"
        else:
            ran = f"{seen} process{'es' if seen > 1 else ''} the subject left ran when the tests went in"
        return f"shared: the container's /tests and /logs/verifier; {ran}"

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
