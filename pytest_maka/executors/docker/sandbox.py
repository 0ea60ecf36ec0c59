"""One attempt's container: exec with real timeouts, tar put/get, and a description of its isolation."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import docker.errors

from ...core.errors import InfraError
from ...core.taint import Touched
from ...core.task import LOGS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR
from ...egress.log import EgressLog
from ...egress.plan import PhasePlan
from ..base import ExecResult
from ..content import write_via_put
from ..copyout import CopyReport
from .archive import Batch
from .commands import ContainerCommands
from .egress import DockerEgress
from .engines import Engine
from .files import ContainerFiles, check_path
from .full import LayerSpace, judged
from .image_env import ImageFacts
from .processes import ContainerProcesses
from .protect import Restorer
from .protect_paths import stat_path
from .spawn import DockerProcess, read_via_archive
from .verdict_sandbox import VerdictSandbox
from .watch import MECHANISM as WATCH_MECHANISM
from .watch import AccessWatch, outside_changes

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
#: Seconds the reward files are watched after the verifier ended, when processes still run.
VERDICT_SETTLE_SEC = 0.3
REWARD_FILES = (f"{VERIFIER_LOGS_DIR}/reward.txt", f"{VERIFIER_LOGS_DIR}/reward.json")


class DockerSandbox(VerdictSandbox, ContainerCommands, ContainerFiles, ContainerProcesses, ImageFacts):
    """A running container leased for one attempt (created and removed by the executor)."""

    watch_mechanism = WATCH_MECHANISM

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
        #: Processes the subject left that ran when the last verification's tests went in (None: unknown).
        self._witnesses: int | None = None
        #: Processes the subject left that were ended before the tests went in (None: could not be, remote engine).
        self._stopped: int | None = None
        #: Seconds the last exec spent stopping its command's tree (for the benchmark).
        self.last_stop_s = 0.0
        self._watch_helper: AccessWatch | None = None
        #: What the harness itself placed outside the workdir (uploads such as /solution).
        self.harness_paths: tuple[str, ...] = ()
        #: What the writable layer's disk had free when the lease began (``measure_space``).
        self.space = LayerSpace(capped=False, upper=None)

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
        self._dirty, self._fresh, self._witnesses_current = True, set(), False
        started = time.monotonic()
        proxied = self.egress.current if network and self.egress is not None else None
        target = proxied.network if proxied else self._network
        with self.engine.guard("running a command"):
            self._flush()
            if network:
                self._join(target, proxied is not None)
            try:
                env = {**env, **proxied.env} if proxied else env
                if self._verdict is not None:  # a command of the verification: its private channel
                    return self._exec_private(
                        command, env, timeout_sec, stdout_path, stderr_path, cwd, max_output_bytes, started
                    )
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

    def _restart(self, *, checked: bool = False) -> None:
        super()._restart(checked=checked)
        if self._proxied and self.egress is not None:  # a new namespace: a new logger and route
            self.egress.joined(self.id, self.restarts)

    @contextmanager
    def egress_phase(self, name: str, plan: PhasePlan, log: EgressLog) -> Iterator[None]:
        """Phase ``name`` of the network plan: an allowlist phase runs behind the attempt's proxy."""
        if self.egress is None:
            raise InfraError("this docker sandbox has no egress proxy")
        with self.egress.phase(name, plan, log, container=self.id, generation=self.restarts):
            yield

    def spawn(
        self, command: str, *, env: Mapping[str, str], cwd: str | None = None, network: bool = False
    ) -> DockerProcess:
        """Start ``sh -c command`` with stdin attached; returns at once (the container's end stops it).
        Refused while a private verdict channel is open."""
        self.verdict_spawn_refused()
        self._dirty, self._fresh = True, set()
        proxied = self.egress.current if network and self.egress is not None else None
        target = proxied.network if proxied else self._network
        with self.engine.guard("starting a process"):
            self._flush()
            if network:
                self._join(target, proxied is not None)
            env = {**env, **proxied.env} if proxied else env
            proc = self._spawn(command, env, cwd or self.workdir)
            if network:
                proc.on_end(lambda: self._leave(target))
            return proc

    def _spawn(self, command: str, env: Mapping[str, str], cwd: str) -> DockerProcess:
        """The process; where an earlier command ended the container's keeper (the engine refuses
        the exec, or drops it with the ending container), the container is started again first,
        as for ``exec``."""
        try:
            return DockerProcess(self, command, env=env, cwd=cwd)
        except docker.errors.APIError as exc:
            if exc.status_code not in (404, 409) or self._running():
                raise
        self._restart()
        return DockerProcess(self, command, env=env, cwd=cwd)

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out (``ContainerFiles.get``); from the open private verdict channel, its host directory."""
        private = self.verdict_get(check_path(sandbox_path), host_path, report)
        return private if private is not None else super().get(sandbox_path, host_path, report=report)

    def put(self, host_path: Path, sandbox_path: str) -> None:
        """``ContainerFiles.put``; into the open private verdict channel, its host directory."""
        channel = self.verdict_owns(check_path(sandbox_path))
        if channel is not None:
            return channel.put(host_path, check_path(sandbox_path))
        return super().put(host_path, sandbox_path)

    def remove(self, sandbox_path: str) -> None:
        """``ContainerFiles.remove``; in the open private verdict channel, its host directory."""
        channel = self.verdict_owns(check_path(sandbox_path))
        if channel is not None:
            return channel.remove(check_path(sandbox_path))
        return super().remove(sandbox_path)

    def read_file(self, sandbox_path: str, max_bytes: int) -> bytes:
        """At most ``max_bytes`` of a regular file, read through the engine (links are not followed);
        in the open private verdict channel, from its host directory."""
        path = check_path(sandbox_path)
        channel = self.verdict_owns(path)
        if channel is not None:
            return channel.read(path, max_bytes)
        with self.engine.guard(f"reading {path}"):
            self._flush(path)
            return read_via_archive(self.api, self.id, path, max_bytes)

    def write_file(self, sandbox_path: str, data: bytes) -> None:
        """Create or replace a regular file (through ``put``: planted links are replaced)."""
        write_via_put(self, sandbox_path, data)

    def restore_protected(self, scratch: Path) -> dict[str, Any]:
        """Put the system back as the image has it and end every process the subject left
        (SWE-bench: its harness verifies a fresh container), through the engine (docs/security.md)."""
        with judged(self.space, "restoring protected paths"), self.engine.guard("restoring protected paths"):
            self._flush()
            with self._restorer() as restorer:
                restorer.copy_back()
                # every process the subject left ends; the ENTRYPOINT it may have edited is back first
                self._restart(checked=True)
                restorer.delete()
            self._fresh = set()
        return {**restorer.report(), "restarted": True}

    def _restorer(self) -> Restorer:
        return Restorer(
            self.engine,
            self.id,
            self._info["image"],
            workdir=self.workdir,
            content=self._content_check,
            mounts=self._mounts,
            unlink=lambda paths: self._unlink(*paths),
        )

    # --- what the subject changed outside the workdir, and what the verifier used of it ----
    def outside_changes(self) -> list[tuple[str, int]]:
        """(path, kind) the subject changed outside the workdir, /logs and /tests (kind 0
        modified, 1 added, 2 deleted). ValueError: the engine cannot list them."""
        self._flush()
        own = [self.workdir, LOGS_DIR, TESTS_DIR, *self.harness_paths]
        return outside_changes(self.engine, self.id, own, self._mounts)

    def ensure_running(self) -> None:
        """Start the container again if the subject ended its main process (SubjectFault when the
        restart could run what it changed)."""
        with self.engine.guard("inspecting the container"):
            running = bool(self.api.inspect_container(self.id)["State"]["Running"])
        if not running:
            self._restart()

    def leftover_processes(self) -> tuple[int, int | None]:
        """(processes running besides the image's own, the container's process limit or None).

        Right after ``open_verdict`` (no command ran since) its count is the answer."""
        with self.engine.guard("counting the container's processes"):
            if self._witnesses_current and self._witnesses is not None:
                left, self._witnesses_current = self._witnesses, False
            else:
                try:
                    left = len(self._processes() - self._keepers)
                except docker.errors.APIError:  # stopped
                    return 0, None
            limit = (self.api.inspect_container(self.id).get("HostConfig") or {}).get("PidsLimit")
        return left, int(limit) if limit and int(limit) > 0 else None

    def verdict_rewritten(self) -> bool:
        """After a verification: whether a process still running rewrites the reward files
        (their engine-side stat changes within VERDICT_SETTLE_SEC). Nothing is watched when
        no process but the image's own runs, nor after a private verification (nothing in the
        container could reach its reward files)."""
        if self.verdict_private():
            return False
        with self.engine.guard("checking the reward files"):
            try:
                if not (self._processes() - self._keepers):
                    return False
            except docker.errors.APIError:  # stopped: nothing runs any more
                return False
            first = [stat_path(self.api, self.id, p) for p in REWARD_FILES]
            time.sleep(VERDICT_SETTLE_SEC)
            return [stat_path(self.api, self.id, p) for p in REWARD_FILES] != first

    def restart_risk(self) -> list[str]:
        """What a restart could run that the subject changed (anything outside the workdir)."""
        try:
            return [p for p, _kind in self.outside_changes()]
        except ValueError as exc:
            return [f"(the engine cannot list the changes: {exc})"]

    def watch_access(self, paths: Sequence[str]) -> list[Touched]:
        """Arm the access watch on ``paths`` (files the subject changed); returns those armed.
        RuntimeError or InfraError: it cannot run here."""
        self.close_watch()
        self._watch_helper = AccessWatch(self.engine, self.id, self._watch_images())
        return self._watch_helper.arm(list(paths))

    def accessed(self) -> list[Touched]:
        """The armed files read or executed since ``watch_access``; the watch ends."""
        if self._watch_helper is None:
            raise RuntimeError("the access watch was not armed")
        try:
            return self._watch_helper.read()
        finally:
            self.close_watch()

    def measure_space(self) -> None:
        """At the lease's start: what the writable layer's disk has free, to judge a full disk later."""
        capped = bool(((self._info.get("limits") or {}).get("storage") or {}).get("enforced"))
        with self.engine.guard("reading the container's writable layer"):
            self.space = LayerSpace.measure(self.api, self.id, capped=capped)

    def full_disk(self) -> str | None:
        """Why the container's disk counts as full now, when its writable layer filled it (the
        verifier could not write its reward), or None."""
        return self.space.full_now()

    def close_watch(self) -> None:
        if self._watch_helper is not None:
            self._watch_helper.close()
            self._watch_helper = None

    def _watch_images(self) -> list[str]:
        """The egress proxy's image where the engine has it (it has python3), then the task's."""
        from .egress import PROXY_TAG

        images = [self._info["image"]]
        with self.engine.guard("inspecting the egress proxy image"), suppress(docker.errors.ImageNotFound):
            images.insert(0, str(self.api.inspect_image(PROXY_TAG)["Id"]))
        return images

    def workspace_snapshot(self, dest: Path, *, report: CopyReport | None = None) -> Path:
        """A host copy of the workdir as it is now (capped like ``get``)."""
        if not self.get(self.workdir, dest, report=report):
            dest.mkdir(parents=True, exist_ok=True)
        return dest

    def baseline_workspace(self) -> Path | None:
        """The workdir as the attempt started (image content plus the task's workspace; the
        engine makes a container to read the image's: a disk the subject filled is its fault)."""
        with judged(self.space, "reading the image's workdir"):
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
