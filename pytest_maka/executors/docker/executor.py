"""The Docker executor: one fresh container per attempt, on one engine or spread over several."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import docker.errors
from pydantic import BaseModel

from ...core.errors import DeadlineReached, ExecutorUnavailable, InfraError
from ...core.interrupts import sigint_deferred
from ...core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, Task
from ..base import LeaseRequest
from . import labels as L
from .cleanup import is_local, reap_shims, sweep
from .compose import MAIN, ComposeProject, compose_command, sidecars
from .egress import DockerEgress
from .engines import Engine, make_engines
from .images import ImageStore
from .layers import layered_image
from .leases import SlotPool, acquire
from .options import DEFAULT_CAPABILITIES, DockerOptions
from .processes import KEEP_ALIVE
from .sandbox import DockerSandbox
from .spares import Spare, Spares
from .verifier_env import SEPARATE_FEATURES, SeparateVerifier


class DockerExecutor(SeparateVerifier):
    """Runs each attempt in a new container with limits, no network and dropped capabilities."""

    kind: ClassVar[str] = "docker"
    Options: ClassVar[type[BaseModel]] = DockerOptions
    #: Task features (``Task.features``) this executor runs ("compose" where Compose v2 is installed).
    features: frozenset[str]

    def __init__(self, options: DockerOptions | None = None) -> None:
        self.options = options or DockerOptions()
        self.engines: list[Engine] = make_engines(self.options)
        state = self.options.resolved_state_dir()
        self.images = ImageStore(state, self.options.image_prefix, self.options.default_image)
        self.pools = {e.key: SlotPool(state / "slots" / e.key, e.slots) for e in self.engines}
        self._swept: set[str] = set()
        self._orphans: list[tuple[Engine, str]] = []  # containers left while their engine was away
        self._ncpu: dict[str, float] = {}
        self._configs: dict[tuple[str, str], dict[str, Any]] = {}
        self._driver: dict[str, str | None] = {}  # engine key -> why storage_opt is unsupported
        self.spares = Spares(self._make_spare, lambda spare: self._dispose_spare(spare))
        self.features = frozenset(
            {"users", "healthcheck", "multi-step", *SEPARATE_FEATURES, *(["compose"] if compose_command() else [])}
        )

    @property
    def isolated(self) -> bool:
        return True

    def check(self) -> None:
        """Raise ExecutorUnavailable (one line) when no engine answers; take silent ones out."""
        reasons = {e.url: e.ping() for e in self.engines}
        if all(reasons.values()):
            causes = "; ".join(f"{url}: {why}" for url, why in reasons.items())
            raise ExecutorUnavailable(f"no Docker engine answers ({causes})")
        for engine in self.engines:
            if reasons[engine.url]:
                engine.mark_down(str(reasons[engine.url]))
            else:
                engine.mark_up()

    def prepare(self, tasks: list[Task]) -> None:
        """Remove containers of dead processes on every engine that answers (once per process)."""
        for engine in self.engines:
            if engine.key in self._swept or engine.down_reason() is not None:
                continue
            self._swept.add(engine.key)
            with contextlib.suppress(InfraError):  # the lease will report it
                sweep(engine)

    def close(self) -> None:
        """Remove spares, containers whose removal failed while their engine was away, and
        containers of dead processes (e.g. a killed xdist worker) on every engine that answers.
        On this host, the shims of containers left by a killed engine are killed too."""
        self.spares.close()
        orphans, self._orphans = self._orphans, []
        for engine in self.engines:
            mine = [cid for e, cid in orphans if e is engine]
            answers = engine.ping() is None
            if answers:
                for cid in mine:
                    self._dispose(engine, cid, keep=False)
                with contextlib.suppress(InfraError):
                    sweep(engine)
            else:
                self._orphans += [(engine, cid) for cid in mine]  # its next holder of the slot removes it
            if is_local(engine):
                reap_shims(mine)  # a killed engine's shims outlive it (and its containers' removal)
            engine.close()

    # --- leasing ----------------------------------------------------------------------
    def _candidates(self) -> list[tuple[Engine, SlotPool]]:
        return [(e, self.pools[e.key]) for e in self.engines if e.down_reason() is None]

    def _no_engine(self) -> InfraError:
        causes = "; ".join(f"{e.url}: {e.down_reason() or 'busy'}" for e in self.engines)
        return InfraError(f"no Docker engine answers ({causes})")

    @contextmanager
    def lease(self, request: LeaseRequest) -> Iterator[DockerSandbox]:
        """A fresh container for this attempt, removed when the block ends, whatever happens."""
        timeout = self.options.lease_timeout_sec
        bounded_by_deadline = request.deadline is not None and request.deadline - time.time() < timeout
        if request.deadline is not None:  # the whole-cell deadline bounds the wait for a slot
            timeout = max(0.0, min(timeout, request.deadline - time.time()))
        try:
            choice = acquire(
                self._candidates,
                timeout_sec=timeout,
                on_empty=self._no_engine,
                wait_for_target_sec=min(self.options.engine_wait_sec, timeout),
            )
        except TimeoutError as exc:
            if bounded_by_deadline:  # the cell's own budget ran out first: the cell's result, not a retry
                raise DeadlineReached(f"the deadline passed while waiting for a container slot ({exc})") from None
            raise InfraError(f"docker executor: {exc}") from None
        engine, slot = choice.target, choice.slot
        try:
            stack = contextlib.ExitStack()
            with stack:
                if slot.stale_container:
                    self._dispose(engine, slot.stale_container, keep=False)
                    slot.clear()
                task = request.cell.task
                image_id = self.images.resolve(engine, task, request.attempt_dir / "build.log", request.deadline)
                mounts, layers = dict(request.mounts or {}), {}
                if mounts and self.options.agent_install == "layer":
                    image_id = layered_image(engine, self.images.dir, self.options.image_prefix, image_id, mounts)
                    mounts, layers = {}, mounts
                key = self._env_key(engine, image_id, task)
                project = self._project(stack, engine, request)
                plain = project is None and not mounts
                spare = self.spares.take(key) if self.options.prestart and plain else None
                if spare is None:
                    cid, info = self._create(
                        key,
                        {
                            L.CELL: request.cell.id,
                            L.CELL_KEY: request.cell.key,
                            L.ATTEMPT: str(request.attempt),
                            L.TASK: task.id,
                        },
                        mounts=mounts,
                        network=project.network if project else None,
                    )
                else:
                    cid, info = spare.container_id, spare.info
                if layers:
                    info = {**info, "mounts": [f"{d} (image layer, {Path(src).name})" for d, src in layers.items()]}
                slot.record(cid)
                failed = True
                egress = self._egress(engine, request)
                try:
                    sandbox = DockerSandbox(
                        engine,
                        cid,
                        workdir=task.workdir,
                        network=self.options.network,
                        kill_grace_sec=self.options.kill_grace_sec,
                        info=info,
                        baseline=lambda: self.images.baseline(engine, image_id, task),
                        protected_check=self.options.protected_check,
                        image_config=self._image_config(engine, image_id),
                        mounts=tuple(mounts),
                    )
                    sandbox.egress = egress
                    if spare is None:
                        sandbox.start()
                        check_started(sandbox)
                    else:
                        sandbox.adopt(spare.keepers, name=_container_name(request))
                    if self.options.prestart and plain:
                        self.spares.refill(key)
                    entries: list[tuple[Path | None, str]] = [
                        (None, AGENT_LOGS_DIR),
                        (None, VERIFIER_LOGS_DIR),
                        (None, ARTIFACTS_DIR),
                    ]
                    if task.workspace_dir is not None:
                        entries.append((task.workspace_dir, task.workdir))
                    entries += [(Path(src), dest) for dest, src in request.uploads.items()]
                    sandbox.put_many(entries)
                    yield sandbox
                    failed = False
                finally:
                    with sigint_deferred():
                        if self._dispose(engine, cid, keep=failed and self.options.keep_on_failure):
                            slot.clear()
                        else:
                            self._orphans.append((engine, cid))
                        with contextlib.suppress(Exception):  # left behind, `maka docker-cleanup` removes it
                            egress.close()
        finally:
            slot.release()

    def _project(self, stack: contextlib.ExitStack, engine: Engine, request: LeaseRequest) -> ComposeProject | None:
        """The attempt's sidecars (a compose project, removed when ``stack`` closes), if the task has any."""
        task = request.cell.task
        if task.compose_file is None or not sidecars(task.compose_file, task.compose_service):
            return None
        project = ComposeProject(
            engine,
            task,
            name=f"maka-{uuid.uuid4().hex[:12]}",
            labels={
                L.CELL: request.cell.id,
                L.CELL_KEY: request.cell.key,
                L.ATTEMPT: str(request.attempt),
                L.TASK: task.id,
            },
            work_dir=request.attempt_dir,
            state_dir=self.options.resolved_state_dir(),
        )

        def down() -> None:
            with sigint_deferred(), contextlib.suppress(Exception):  # left behind: `maka docker-cleanup`
                project.down()

        stack.callback(down)
        project.up()
        return project

    def _egress(self, engine: Engine, request: LeaseRequest) -> DockerEgress:
        """The attempt's egress: nothing is created until a phase needs its allowlist."""
        return DockerEgress(
            engine,
            labels={L.CELL: request.cell.id, L.CELL_KEY: request.cell.key, L.ATTEMPT: str(request.attempt)},
            egress_network=self.options.egress_network,
            hosts=self.options.egress_hosts,
            state_dir=self.options.resolved_state_dir(),
            attempt_dir=request.attempt_dir,
        )

    def _env_key(self, engine: Engine, image_id: str, task: Task) -> EnvKey:
        cpus = task.cpus or self.options.cpus
        if cpus is not None:
            cpus = min(cpus, self._engine_cpus(engine))
        memory = task.memory_mb or self.options.memory_mb
        storage = int(task.storage_mb) if task.storage_mb else None
        return EnvKey(engine.key, image_id, cpus, memory, task.workdir, storage)

    def _make_spare(self, key: Hashable) -> Spare:
        assert isinstance(key, EnvKey)
        cid, info = self._create(key, {L.CELL: "spare", L.ROLE: "spare"})
        engine = self._engine(key.engine)
        sandbox = DockerSandbox(
            engine,
            cid,
            workdir=key.workdir,
            network=self.options.network,
            kill_grace_sec=0,
            info=info,
            baseline=lambda: None,
            image_config=self._image_config(engine, key.image_id),
        )
        try:
            sandbox.start()
            check_started(sandbox)
        except BaseException:
            self._dispose(engine, cid, keep=False)
            raise
        return Spare(cid, info, sandbox.keepers)

    def _image_config(self, engine: Engine, image_id: str) -> dict[str, Any]:
        """The image's ``Config`` (ENV, ENTRYPOINT, USER), read once per image."""
        key = (engine.key, image_id)
        if key not in self._configs:
            with engine.guard("inspecting the image"):
                self._configs[key] = engine.api.inspect_image(image_id).get("Config") or {}
        return self._configs[key]

    def _engine(self, engine_key: str) -> Engine:
        return next(e for e in self.engines if e.key == engine_key)

    def _create(
        self,
        key: EnvKey,
        cell_labels: dict[str, str],
        mounts: Mapping[str, Path] | None = None,
        network: str | None = None,
        service: str = MAIN,
    ) -> tuple[str, dict[str, Any]]:
        """``network``: a compose project's (internal) network, joined for good as ``service``."""
        opts, engine = self.options, self._engine(key.engine)
        caps = sorted({*DEFAULT_CAPABILITIES, *opts.cap_add})
        net = network or ("none" if opts.network == "none" else opts.network)
        api = engine.api
        storage, storage_opt = self._storage(engine, key.storage_mb)
        with engine.guard("creating the container"):
            host_config = api.create_host_config(
                init=True,
                network_mode=net,
                privileged=False,
                cap_drop=["ALL"],
                cap_add=caps,
                security_opt=["no-new-privileges:true"] if opts.no_new_privileges else None,
                pids_limit=opts.pids_limit,
                nano_cpus=int(key.cpus * 1e9) if key.cpus else None,
                mem_limit=f"{key.memory_mb}m" if key.memory_mb else None,
                memswap_limit=f"{key.memory_mb}m" if key.memory_mb else None,
                storage_opt=storage_opt,
                binds={str(src): {"bind": dest, "mode": "ro"} for dest, src in (mounts or {}).items()} or None,
            )
            labels = {**L.owner_labels(), L.RUN: L.run_id(), **cell_labels}
            cid = api.create_container(
                key.image_id,
                command=KEEP_ALIVE,  # the image's ENTRYPOINT runs it, as in Harbor
                labels=labels,
                host_config=host_config,
                working_dir=key.workdir,
                hostname="sandbox",
                networking_config=(
                    api.create_networking_config({network: api.create_endpoint_config(aliases=[service])})
                    if network
                    else None
                ),
            )["Id"]
            if net != "none" and network is None:
                api.disconnect_container_from_network(cid, net, force=True)
        info = {
            "executor": "docker",
            "sandbox": "container",
            "engine": engine.url,
            "image": key.image_id,
            "container": cid[:12],
            "env": "allowlist (plus the image's ENV)",
            "pid_namespace": True,
            "privileged": False,
            "capabilities": caps,
            "no_new_privileges": opts.no_new_privileges,
            "limits": {"cpus": key.cpus, "memory_mb": key.memory_mb, "pids": opts.pids_limit, "storage": storage},
            "kill": "every process in the container but its init (SIGTERM, grace, SIGKILL)",
            "filesystem": "container root (writable layer), removed after the attempt",
            "mounts": [f"{dest} (ro, {Path(src).name})" for dest, src in (mounts or {}).items()],
        }
        return cid, info

    def _storage(self, engine: Engine, storage_mb: int | None) -> tuple[dict[str, Any], dict[str, str] | None]:
        """The record's storage entry and the ``storage_opt`` to create with (None: not enforced)."""
        if storage_mb is None:
            return {"storage_mb": None, "enforced": False, "note": "the task sets no storage_mb"}, None
        if engine.key not in self._driver:
            with engine.guard("reading engine info"):
                self._driver[engine.key] = storage_support(engine.api.info())
        why = self._driver[engine.key]
        if why is not None:
            return {"storage_mb": storage_mb, "enforced": False, "note": why}, None
        return {"storage_mb": storage_mb, "enforced": True, "mechanism": "storage_opt size"}, {"size": f"{storage_mb}M"}

    def _engine_cpus(self, engine: Engine) -> float:
        if engine.key not in self._ncpu:
            with engine.guard("reading engine info"):
                self._ncpu[engine.key] = float(engine.api.info().get("NCPU") or 1)
        return self._ncpu[engine.key]

    def _dispose_spare(self, spare: Spare) -> None:
        url = spare.info["engine"]
        engine = next(e for e in self.engines if e.url == url)
        self._dispose(engine, spare.container_id, keep=False)

    def _dispose(self, engine: Engine, cid: str, *, keep: bool) -> bool:
        """Remove (or, when kept, stop) a container; False when the engine could not be reached."""
        try:
            api = engine.api
            if keep:
                api.kill(cid)
            else:
                api.remove_container(cid, force=True, v=True)
        except docker.errors.NotFound:
            return True
        except docker.errors.APIError as exc:
            return exc.status_code == 409 or keep  # removal already in progress / already stopped
        except Exception:
            return False  # engine gone: the next holder of this slot removes it
        return True


def check_started(sandbox: DockerSandbox) -> None:
    """InfraError when the container did not come up: its ENTRYPOINT exited (named, with its output)."""
    if len(sandbox.keepers.host) >= 2:
        return
    api = sandbox.api
    with sandbox.engine.guard("reading why the container stopped"):
        state = api.inspect_container(sandbox.id).get("State") or {}
        logs = api.logs(sandbox.id, tail=5).decode("utf-8", "replace").strip()
    entry = sandbox.entrypoint() or ["(none)"]
    last = " | ".join(line for line in logs.splitlines()[-3:] if line.strip()) or "no output"
    raise InfraError(
        f"the container did not start: the image's ENTRYPOINT {entry} with the keep-alive {KEEP_ALIVE} "
        f"exited (code {state.get('ExitCode')}): {last}"
    )


class EnvKey(NamedTuple):
    """What makes two containers interchangeable before their first command."""

    engine: str
    image_id: str
    cpus: float | None
    memory_mb: int | None
    workdir: str
    storage_mb: int | None = None


def storage_support(info: dict[str, Any]) -> str | None:
    """Why this engine cannot cap a container's writable layer, or None when it can.

    overlay2 needs a backing xfs mounted with ``pquota`` (the engine says "xfs" and then
    refuses at create time without pquota: that refusal is reported as an infra failure
    naming the cause); btrfs, zfs and devicemapper take a size as well.
    """
    driver = info.get("Driver") or "unknown"
    status = dict(info.get("DriverStatus") or [])
    if driver == "overlay2":
        backing = status.get("Backing Filesystem", "unknown")
        return None if backing == "xfs" else f"storage driver overlay2 on {backing} (needs xfs with pquota)"
    if driver in ("btrfs", "zfs", "devicemapper"):
        return None
    return f"storage driver {driver} cannot cap a container's size"


def _container_name(request: LeaseRequest) -> str:
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", request.cell.key)
    return f"maka-{key}-a{request.attempt}-{uuid.uuid4().hex[:6]}"
