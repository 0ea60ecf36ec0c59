"""The Docker executor: one fresh container per attempt, on one engine or spread over several."""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from ...core import progress
from ...core.errors import DeadlineReached, ExecutorUnavailable, InfraError
from ...core.hostreqs import Need
from ...core.interrupts import sigint_deferred
from ...core.progress import SLOT_WAIT_PHASE
from ...core.task import Task
from ..base import ExecutorCapabilities, LeaseRequest
from . import labels as L
from .cleanup import is_local, reap_shims, sweep
from .compose import ComposeProject, compose_command, definition_problem
from .containers import Containers, EnvKey, cell_labels, check_started, first_entries
from .containers import storage_support as storage_support  # re-exported
from .egress import DockerEgress
from .engines import Engine, make_engines
from .images import ImageStore
from .layers import layered_image
from .leases import SlotPool, acquire
from .options import DockerOptions
from .proxies import ProxyPool
from .sandbox import DockerSandbox
from .spares import Spare, Spares
from .verifier_env import SeparateVerifier


class DockerExecutor(SeparateVerifier, Containers):
    """Runs each attempt in a new container with limits, no network and dropped capabilities."""

    kind: ClassVar[str] = "docker"
    Options: ClassVar[type[BaseModel]] = DockerOptions
    #: Separate verifier environments come from ``SeparateVerifier``; compose needs Compose v2
    #: (hostcheck stops a run that needs it where it is absent).
    capabilities: ClassVar[ExecutorCapabilities] = ExecutorCapabilities(
        multi_step=True, separate_verifier=True, compose=True, users=True, healthcheck=True, image=True
    )

    def __init__(self, options: DockerOptions | None = None) -> None:
        self.options = options or DockerOptions()
        self.engines: list[Engine] = make_engines(self.options)
        state = self.options.resolved_state_dir()
        self.images = ImageStore(state, self.options.image_prefix, self.options.default_image)
        self.pools = {e.key: SlotPool(state / "slots" / e.key, e.slots) for e in self.engines}
        #: Where waiters for these engines' slots queue, every process on the host (leases.Ticket).
        self.queue = state / "slots" / ("queue-" + "-".join(sorted(self.pools))[:120])
        self._swept: set[str] = set()
        self._orphans: list[tuple[Engine, str]] = []  # containers left while their engine was away
        self._ncpu: dict[str, float] = {}
        self._configs: dict[tuple[str, str], dict[str, Any]] = {}
        self._driver: dict[str, str | None] = {}  # engine key -> why storage_opt is unsupported
        self.spares = Spares(self._make_spare, lambda spare: self._dispose_spare(spare))
        #: Egress networks and proxy containers made ahead (per key as many ready as attempts run
        #: at once, from the first lease on when ``concurrency`` says it; see proxies.py).
        self.proxies = ProxyPool(ready=self.options.concurrency or 1)

    @property
    def isolated(self) -> bool:
        return True

    def host_needs(self, tasks: list[Task], egress_cells: int) -> list[Need]:
        """This host's engine when no other is named (a remote one is ``check``'s), Compose v2 for tasks
        with sidecars."""
        needs = []
        if not self.options.engines and not os.environ.get("DOCKER_HOST"):
            needs.append(Need("docker-engine", "the docker executor"))
        compose = [t.id for t in tasks if "compose" in t.features]
        if compose:
            more = f" and {len(compose) - 1} more" if len(compose) > 1 else ""
            needs.append(Need("compose", f"the multi-container task {compose[0]}{more}"))
        return needs

    def task_problem(self, task: Task) -> str | None:
        """``TaskChecks``: a compose file Docker Compose rejects, checked once per task before any
        cell runs (no engine needed); where Compose is absent, ``host_needs`` says so instead."""
        if task.compose_file is None or compose_command() is None:
            return None
        return definition_problem(self.engines[0], task, self.options.resolved_state_dir())

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
        self.proxies.close()
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
    def shared_capacity(self) -> dict[str, int]:
        """``SharedCapacity``: slots per engine URL, shared by every run on this host."""
        return {e.url: e.slots for e in self.engines}

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
        waited = time.monotonic()
        try:
            choice = acquire(
                self._candidates,
                timeout_sec=timeout,
                on_empty=self._no_engine,
                wait_for_target_sec=min(self.options.engine_wait_sec, timeout),
                queue=self.queue,
                on_wait=lambda: progress.phase(SLOT_WAIT_PHASE, f"{len(self.engines)} engine(s) full"),
            )
        except TimeoutError as exc:
            request.slot_wait = time.monotonic() - waited
            if bounded_by_deadline:  # the cell's own budget ran out first: the cell's result, not a retry
                raise DeadlineReached(f"the deadline passed while waiting for a container slot ({exc})") from None
            raise InfraError(f"docker executor: {exc}") from None
        engine, slot = choice.target, choice.slot
        if choice.queued:
            request.slot_wait = choice.waited_s
            progress.phase("setup")
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
                main = project.main_options() if project else None
                if spare is None:
                    cid, info = self._create(
                        key,
                        cell_labels(request),
                        mounts=mounts,
                        main=main,
                    )
                else:
                    cid, info = spare.container_id, spare.info
                if layers:
                    info = {**info, "mounts": [f"{d} (image layer, {Path(src).name})" for d, src in layers.items()]}
                info = self.declared_limits(info, task, key)
                slot.record(cid)
                failed = True
                sandbox: DockerSandbox | None = None
                egress = self._egress(engine, request, project.addresses() if project and project.services else {})
                try:
                    config = self._image_config(engine, image_id)
                    if main and main.environment:  # the service's environment over the image's ENV
                        added = [f"{k}={v}" for k, v in main.environment.items()]
                        config = {**config, "Env": [*(config.get("Env") or []), *added]}
                    sandbox = self._sandbox(
                        engine,
                        cid,
                        workdir=task.workdir,
                        info=info,
                        image_id=image_id,
                        baseline=lambda: self.images.baseline(engine, image_id, task),
                        image_config=config,
                        mounts=tuple(mounts),
                    )
                    sandbox.egress = egress
                    sandbox.harness_paths = tuple(request.uploads)
                    if spare is None:
                        sandbox.start()
                        check_started(sandbox)
                    else:
                        sandbox.adopt(spare.keepers, name=_container_name(request))
                    sandbox.measure_space()
                    if request.egress:  # the proxy and packet logger get ready while the lease goes on
                        egress.prepare(cid)
                    if self.options.prestart and plain:
                        self.spares.refill(key)
                    entries = first_entries(task) + [(Path(src), dest) for dest, src in request.uploads.items()]
                    sandbox.put_many(entries)
                    yield sandbox
                    failed = False
                finally:
                    with sigint_deferred():
                        if sandbox is not None:
                            sandbox.close_watch()
                        if self._dispose(engine, cid, keep=failed and self.options.keep_on_failure):
                            slot.clear()
                        else:
                            self._orphans.append((engine, cid))
                        with contextlib.suppress(Exception):  # left behind, `maka docker-cleanup` removes it
                            egress.close()
        finally:
            slot.release()

    def _project(self, stack: contextlib.ExitStack, engine: Engine, request: LeaseRequest) -> ComposeProject | None:
        """The attempt's compose project (sidecars, volumes; removed when ``stack`` closes), if the task has one."""
        task = request.cell.task
        if task.compose_file is None:
            return None
        project = ComposeProject(
            engine,
            task,
            name=f"maka-{uuid.uuid4().hex[:12]}",
            labels=cell_labels(request),
            work_dir=request.attempt_dir,
            state_dir=self.options.resolved_state_dir(),
        )

        def down() -> None:
            with sigint_deferred(), contextlib.suppress(Exception):  # left behind: `maka docker-cleanup`
                project.down()

        stack.callback(down)
        project.up()
        return project

    def _egress(self, engine: Engine, request: LeaseRequest, services: dict[str, str]) -> DockerEgress:
        """The attempt's egress: nothing is created until a phase needs its allowlist;
        ``services`` (the sidecars, reached directly) go in NO_PROXY."""
        return DockerEgress(
            engine,
            labels=cell_labels(request),
            direct=services,
            egress_network=self.options.egress_network,
            hosts=self.options.egress_hosts,
            state_dir=self.options.resolved_state_dir(),
            attempt_dir=request.attempt_dir,
            pool=self.proxies,
            spares=self.options.egress_prestart,
        )

    def _make_spare(self, key: Hashable) -> Spare:
        assert isinstance(key, EnvKey)
        cid, info = self._create(key, {L.CELL: "spare", L.ROLE: "spare"})
        engine = self._engine(key.engine)
        sandbox = self._sandbox(engine, cid, workdir=key.workdir, info=info, image_id=key.image_id, kill_grace_sec=0)
        try:
            sandbox.start()
            check_started(sandbox)
        except BaseException:
            self._dispose(engine, cid, keep=False)
            raise
        return Spare(cid, info, sandbox.keepers)


def _container_name(request: LeaseRequest) -> str:
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", request.cell.key)
    return f"maka-{key}-a{request.attempt}-{uuid.uuid4().hex[:6]}"
