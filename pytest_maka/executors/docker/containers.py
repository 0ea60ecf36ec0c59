"""Making and removing the executor's containers: create options, engine facts, sandboxes.

``Containers`` is mixed into DockerExecutor (it uses its ``options`` and ``engines``); the
lease, the spares and separate verifier environments all create their containers here and
wrap them in a ``DockerSandbox`` through ``_sandbox``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import docker.errors

from ...core.errors import InfraError
from ...core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, Task
from ..base import LeaseRequest
from . import labels as L
from .compose import MAIN, MainOptions
from .engines import Engine
from .options import DEFAULT_CAPABILITIES, DockerOptions
from .processes import KEEP_ALIVE
from .sandbox import DockerSandbox
from .spares import Spare


def cell_labels(request: LeaseRequest, **extra: str) -> dict[str, str]:
    """The labels naming an attempt's cell on everything made for it (``extra``: e.g. a role)."""
    return {
        L.CELL: request.cell.id,
        L.CELL_KEY: request.cell.key,
        L.ATTEMPT: str(request.attempt),
        L.TASK: request.cell.task.id,
        **extra,
    }


def first_entries(task: Task) -> list[tuple[Path | None, str]]:
    """What every new container of a task gets before its first command: the harness's log
    directories and the task's workspace at its workdir."""
    entries: list[tuple[Path | None, str]] = [(None, d) for d in (AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR)]
    if task.workspace_dir is not None:
        entries.append((task.workspace_dir, task.workdir))
    return entries


class EnvKey(NamedTuple):
    """What makes two containers interchangeable before their first command."""

    engine: str
    image_id: str
    cpus: float | None
    memory_mb: int | None
    workdir: str
    storage_mb: int | None = None


class Containers:
    """Container construction and removal, with per-engine facts read once."""

    options: DockerOptions
    engines: list[Engine]
    _ncpu: dict[str, float]
    _configs: dict[tuple[str, str], dict[str, Any]]
    _driver: dict[str, str | None]

    def _sandbox(
        self, engine: Engine, cid: str, *, workdir: str, info: dict[str, Any], image_id: str | None, **extra: Any
    ) -> DockerSandbox:
        """The sandbox over container ``cid`` (``extra``: baseline, kill grace, mounts, ...); the
        image's ``Config`` (its ENV, ENTRYPOINT, USER) is read from ``image_id`` unless given."""
        extra.setdefault("kill_grace_sec", self.options.kill_grace_sec)
        extra.setdefault("baseline", lambda: None)
        if "image_config" not in extra:
            extra["image_config"] = self._image_config(engine, image_id) if image_id else {}
        return DockerSandbox(
            engine,
            cid,
            workdir=workdir,
            network=self.options.network,
            info=info,
            protected_check=self.options.protected_check,
            **extra,
        )

    def _env_key(self, engine: Engine, image_id: str, task: Task) -> EnvKey:
        cpus = task.cpus or self.options.cpus
        if cpus is not None:
            cpus = min(cpus, self._engine_cpus(engine))
        memory = task.memory_mb or self.options.memory_mb
        storage = int(task.storage_mb) if task.storage_mb else None
        return EnvKey(engine.key, image_id, cpus, memory, task.workdir, storage)

    def declared_limits(self, info: dict[str, Any], task: Task, key: EnvKey) -> dict[str, Any]:
        """``info`` with what the task declared beside what it was given, where they differ
        (``cpus = 4`` on a 2-CPU engine is clamped to 2: the record says both)."""
        if task.cpus is None or key.cpus is None or task.cpus == key.cpus:
            return info
        limits = {**info.get("limits", {}), "cpus_declared": task.cpus}
        limits["note"] = f"the task declares {task.cpus:g} CPUs; the engine has {key.cpus:g}: clamped"
        return {**info, "limits": limits}

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
        own_labels: dict[str, str],
        mounts: Mapping[str, Path] | None = None,
        service: str = MAIN,
        main: MainOptions | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """``main``: what the compose service's own keys add (binds, volumes, env, hosts, shm,
        capabilities, dns) and the project's (internal) networks, joined for good as ``service``."""
        opts, engine = self.options, self._engine(key.engine)
        main = main or MainOptions()
        caps = sorted({*DEFAULT_CAPABILITIES, *opts.cap_add, *main.cap_add} - set(main.cap_drop))
        binds = {str(src): {"bind": dest, "mode": "ro"} for dest, src in (mounts or {}).items()}
        binds.update(main.binds)
        joins = list(main.networks)
        first = joins[0][0] if joins else None  # created on it; the others are joined before the start
        net = first or ("none" if opts.network == "none" else opts.network)
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
                binds=binds or None,
                extra_hosts=main.extra_hosts or None,
                shm_size=main.shm_size,
                dns=list(main.dns) or None,
            )
            labels = {**L.owner_labels(), L.RUN: L.run_id(), **own_labels}
            cid = api.create_container(
                key.image_id,
                command=KEEP_ALIVE,  # the image's ENTRYPOINT runs it, as in Harbor
                labels=labels,
                host_config=host_config,
                working_dir=key.workdir,
                hostname="sandbox",
                environment=main.environment or None,
                networking_config=(
                    api.create_networking_config({first: _endpoint(api, service, *joins[0][1:])}) if first else None
                ),
            )["Id"]
            if net != "none" and first is None:
                api.disconnect_container_from_network(cid, net, force=True)
            for name, aliases, address in joins[1:]:
                api.connect_container_to_network(cid, name, aliases=[service, *aliases], ipv4_address=address)
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
            "mounts": [f"{dest} (ro, {Path(src).name})" for dest, src in (mounts or {}).items()]
            + [f"{b['bind']} ({b['mode']}, {Path(src).name})" for src, b in main.binds.items()],
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
            with engine.guard("stopping the container" if keep else "removing the container", refusals=False):
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


def _endpoint(api: Any, service: str, aliases: tuple[str, ...], address: str | None) -> Any:
    """The main container's endpoint on a project network: its service name (and the file's aliases)."""
    return api.create_endpoint_config(aliases=[service, *aliases], ipv4_address=address)
