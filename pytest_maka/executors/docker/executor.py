"""The Docker executor: one fresh container per attempt, on one engine or spread over several."""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import uuid
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import docker.errors
from pydantic import BaseModel

from ...core.errors import ExecutorUnavailable, InfraError
from ...core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, Task
from ..base import LeaseRequest
from . import labels as L
from .cleanup import sweep
from .engines import Engine, make_engines
from .images import ImageStore
from .leases import SlotPool, acquire
from .options import DEFAULT_CAPABILITIES, DockerOptions
from .sandbox import DockerSandbox
from .spares import Spare, Spares


class DockerExecutor:
    """Runs each attempt in a new container with limits, no network and dropped capabilities."""

    kind: ClassVar[str] = "docker"
    Options: ClassVar[type[BaseModel]] = DockerOptions

    def __init__(self, options: DockerOptions | None = None) -> None:
        self.options = options or DockerOptions()
        self.engines: list[Engine] = make_engines(self.options)
        state = self.options.resolved_state_dir()
        self.images = ImageStore(state, self.options.image_prefix, self.options.default_image)
        self.pools = {e.key: SlotPool(state / "slots" / e.key, e.slots) for e in self.engines}
        self._swept: set[str] = set()
        self._ncpu: dict[str, float] = {}
        self.spares = Spares(self._make_spare, lambda spare: self._dispose_spare(spare))

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
        self.spares.close()
        for engine in self.engines:
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
        try:
            choice = acquire(self._candidates, timeout_sec=self.options.lease_timeout_sec, on_empty=self._no_engine)
        except TimeoutError as exc:
            raise InfraError(f"docker executor: {exc}") from None
        engine, slot = choice.target, choice.slot
        try:
            if slot.stale_container:
                self._dispose(engine, slot.stale_container, keep=False)
                slot.clear()
            task = request.cell.task
            image_id = self.images.resolve(engine, task, request.attempt_dir / "build.log")
            key = self._env_key(engine, image_id, task)
            spare = self.spares.take(key) if self.options.prestart and not request.mounts else None
            if spare is None:
                cid, info = self._create(
                    key,
                    {
                        L.CELL: request.cell.id,
                        L.CELL_KEY: request.cell.key,
                        L.ATTEMPT: str(request.attempt),
                        L.TASK: task.id,
                    },
                    mounts=request.mounts,
                )
            else:
                cid, info = spare.container_id, spare.info
            slot.record(cid)
            failed = True
            try:
                sandbox = DockerSandbox(
                    engine,
                    cid,
                    workdir=task.workdir,
                    network=self.options.network,
                    kill_grace_sec=self.options.kill_grace_sec,
                    info=info,
                    baseline=lambda: self.images.baseline(engine, image_id, task),
                )
                if spare is None:
                    sandbox.start()
                else:
                    sandbox.adopt(spare.keepers, name=_container_name(request))
                if self.options.prestart:
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
                with _sigint_deferred():
                    if self._dispose(engine, cid, keep=failed and self.options.keep_on_failure):
                        slot.clear()
        finally:
            slot.release()

    def _env_key(self, engine: Engine, image_id: str, task: Task) -> EnvKey:
        cpus = task.cpus or self.options.cpus
        if cpus is not None:
            cpus = min(cpus, self._engine_cpus(engine))
        return EnvKey(engine.key, image_id, cpus, task.memory_mb or self.options.memory_mb, task.workdir)

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
        )
        try:
            sandbox.start()
        except BaseException:
            self._dispose(engine, cid, keep=False)
            raise
        return Spare(cid, info, sandbox.keepers)

    def _engine(self, engine_key: str) -> Engine:
        return next(e for e in self.engines if e.key == engine_key)

    def _create(
        self, key: EnvKey, cell_labels: dict[str, str], mounts: Mapping[str, Path] | None = None
    ) -> tuple[str, dict[str, Any]]:
        opts, engine = self.options, self._engine(key.engine)
        caps = sorted({*DEFAULT_CAPABILITIES, *opts.cap_add})
        net = "none" if opts.network == "none" else opts.network
        api = engine.api
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
                binds={str(src): {"bind": dest, "mode": "ro"} for dest, src in (mounts or {}).items()} or None,
            )
            labels = {**L.owner_labels(), L.RUN: L.run_id(), **cell_labels}
            cid = api.create_container(
                key.image_id,
                entrypoint=["sleep"],
                command=["infinity"],
                labels=labels,
                host_config=host_config,
                working_dir=key.workdir,
                hostname="sandbox",
            )["Id"]
            if net != "none":
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
            "limits": {"cpus": key.cpus, "memory_mb": key.memory_mb, "pids": opts.pids_limit},
            "kill": "every process in the container but its init (SIGTERM, grace, SIGKILL)",
            "filesystem": "container root (writable layer), removed after the attempt",
            "mounts": [f"{dest} (ro, {Path(src).name})" for dest, src in (mounts or {}).items()],
        }
        return cid, info

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


class EnvKey(NamedTuple):
    """What makes two containers interchangeable before their first command."""

    engine: str
    image_id: str
    cpus: float | None
    memory_mb: int | None
    workdir: str


def _container_name(request: LeaseRequest) -> str:
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", request.cell.key)
    return f"maka-{key}-a{request.attempt}-{uuid.uuid4().hex[:6]}"


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold a Ctrl-C that arrives during cleanup until the cleanup is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
