"""Multi-container environments through the real Docker Compose v2 (the ``docker compose`` plugin).

The task's ``environment/docker-compose.yaml`` names a ``main`` service and sidecars. Each
attempt is its own compose project (``maka-<attempt id>``): the sidecars are started by
``docker compose up --wait`` (so ``depends_on: condition: service_healthy`` and the services'
healthchecks are Compose's own), on the project's networks, each made ``internal`` (no route
out) by an override file; the main container is the executor's usual one (limits, keepers,
restore), joined to the networks its service lists (``default`` when none) as ``main``. A
file Compose rejects is found before any cell (``check_definition``, ``definition_problem``:
the executor's ``TaskChecks``). A sidecar with a ``build`` is
tagged by the digest of its context, so it is built once per digest. The main service's own
keys (``compose_file.main_service``) become the main container's create options
(``main_options``), its named volumes are made here per project. The override labels every
container, the network and the volumes like the executor's own, so ``maka docker-cleanup``
finds what a killed run left; ``down`` removes the project, volumes included, with the lease.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
from filelock import FileLock

from ...core.compose_file import (
    MainNetwork,
    MainService,
    compose_variables,
    harbor_base,
    harbor_variables,
    main_service,
    needs_base,
    read,
    substitute,
)
from ...core.errors import InfraError, TaskError
from ...core.task import Task, digest_tree
from . import labels as L
from .compose_cli import MISSING_COMPOSE, compose_command
from .engines import Engine

MAIN = "main"


def sidecars(compose_file: Path, main: str = MAIN, *, require_main: bool = True) -> dict[str, dict[str, Any]]:
    """The services besides ``main`` (an InfraError names the file when it cannot be read).

    ``require_main=False``: Harbor's layout, whose base file gives ``main`` when the task's does not.
    """
    try:
        services = read(compose_file)["services"]
    except TaskError as exc:
        raise InfraError(str(exc), retryable=False) from None
    if require_main and main not in services:
        raise InfraError(
            f"{compose_file}: services: expected a '{main}' service (the environment of the subject)", retryable=False
        )
    return {name: spec or {} for name, spec in services.items() if name != main}


#: Compose's verdict on each project definition checked by this process (None: accepted).
_CHECKED: dict[str, str | None] = {}
_CHECKED_LOCK = threading.Lock()


@dataclass(frozen=True)
class MainOptions:
    """The main service's keys as the main container's create options."""

    binds: dict[str, dict[str, str]] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    extra_hosts: dict[str, str] = field(default_factory=dict)
    shm_size: str | int | None = None
    cap_add: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    #: The project's networks the main container joins (engine name, aliases, fixed address);
    #: the first is the one it is created on.
    networks: tuple[tuple[str, tuple[str, ...], str | None], ...] = ()
    dns: tuple[str, ...] = ()


class ComposeProject:
    """One attempt's sidecars: ``up`` before the main container is created, ``down`` with the lease."""

    def __init__(
        self, engine: Engine, task: Task, *, name: str, labels: dict[str, str], work_dir: Path, state_dir: Path
    ) -> None:
        assert task.compose_file is not None
        command = compose_command()
        if command is None:
            raise InfraError(MISSING_COMPOSE, retryable=False)
        self.engine, self.task, self.name, self.work_dir = engine, task, name, work_dir
        self.compose_file = task.compose_file
        self.main = task.compose_service
        self.harbor = task.format == "harbor"
        self.services = sidecars(self.compose_file, self.main, require_main=not self.harbor)
        self.labels = {**L.owner_labels(), L.RUN: L.run_id(), **labels}
        self.network = f"{name}_default"
        self.variables = compose_variables(name, self.main, work_dir / "sidecar-logs")
        if self.harbor:  # Harbor's own variables (its base file's and the task file's)
            self.variables |= harbor_variables(
                self.compose_file.parent,
                work_dir / "sidecar-logs",
                image=f"{name}-main",
                cpus=task.cpus,
                memory_mb=task.memory_mb,
                prebuilt=task.docker_image,
            )
        variables = self.variables
        try:
            self.main_spec: MainService = main_service(self.compose_file, self.main, variables)
            self.declared_volumes = read(self.compose_file).get("volumes") or {}
            self.declared_networks = read(self.compose_file).get("networks") or {}
        except TaskError as exc:
            raise InfraError(str(exc), retryable=False) from None
        self.volumes: list[str] = []  # the project's volumes made for the main container
        self.state_dir = state_dir
        self.images: dict[str, str] = {}  # sidecar service -> its image tag (by digest)
        self._subnet_locks: list[FileLock] = []  # held from ``up`` to ``down``: fixed subnets are host-wide
        self._argv = [*command, "--project-name", name, "-f", str(self.compose_file), "-f", str(self._override())]
        self.log = work_dir / "compose.log"

    def _override(self) -> Path:
        """Labels on everything, the project network internal, sidecar images tagged by digest."""
        services: dict[str, Any] = {}
        for service, spec in self.services.items():
            entry: dict[str, Any] = {"labels": dict(self.labels)}
            build = spec.get("build")
            if build is not None:
                context = substitute(
                    str(build if isinstance(build, str) else build.get("context", ".")), self.variables
                )
                root = (self.compose_file.parent / context).resolve()
                digest = digest_tree(root, extra=f"pytest-maka-sidecar/1 {json.dumps(build, sort_keys=True)}\0")
                entry["image"] = self.images[service] = f"pytest-maka-sidecar-{service.lower()}:{digest[:24]}"
            services[service] = entry
        if self.harbor and needs_base(self.compose_file, self.main):  # Harbor's base file under the task's
            base = harbor_base(self.compose_file.parent, self.task.docker_image, f"{self.name}-main")
            services[self.main] = {**base, "labels": dict(self.labels)}
        override = {
            "services": services,
            # every network internal (no route out) and the project's own (a fixed ``name:`` would be shared)
            "networks": {
                k: self._over(self.declared_networks.get(k), name=self.network_name(k), internal=True)
                for k in sorted({"default", *self.declared_networks})
            },
            # every volume of the project by the project's name (a fixed ``name:`` would be shared)
            "volumes": {k: self._over(v, name=self.volume_name(k)) for k, v in self.declared_volumes.items()},
        }
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = self.work_dir / "compose.override.json"
        path.write_text(json.dumps(override, indent=1))
        return path

    def _over(self, declared: Any, **ours: Any) -> dict[str, Any]:
        """A network's or volume's whole definition with ours laid over it: Compose may replace a
        definition an override names (v2.22 drops the task's ``ipam``, and with it a fixed address)."""
        entry = dict(declared) if isinstance(declared, dict) else {}
        labels = entry.get("labels") or {}
        if isinstance(labels, list):  # ["key=value", ...]
            labels = dict(str(item).partition("=")[::2] for item in labels)
        return {**entry, **ours, "labels": {**labels, **self.labels}}

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.variables}
        if "://" in self.engine.url:
            env["DOCKER_HOST"] = self.engine.url
        with self.log.open("a") as log:
            log.write(f"$ docker compose --project-name {self.name} {' '.join(args)}\n")
            log.flush()
            try:
                return subprocess.run(
                    [*self._argv, *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=env,
                    timeout=timeout,
                    check=False,
                    cwd=self.compose_file.parent,
                )
            except subprocess.TimeoutExpired:
                return subprocess.CompletedProcess(args, 124)

    def network_name(self, key: str) -> str:
        """The engine's name of the project's network ``key`` (as Compose names it)."""
        return f"{self.name}_{key}"

    def volume_name(self, key: str) -> str:
        """The engine's name of the project's volume ``key`` (as Compose names it)."""
        return f"{self.name}_{key}"

    def volume_labels(self, key: str) -> dict[str, str]:
        """The harness's labels (for ``maka docker-cleanup``) and Compose's (so it owns the volume too)."""
        return {**self.labels, "com.docker.compose.project": self.name, "com.docker.compose.volume": key}

    def main_options(self) -> MainOptions:
        """What the main container is created with, from the main service's own keys.

        A writable bind gets a copy of its source under the attempt (links kept as links),
        so nothing the subject writes reaches the task's directory or the next attempt.
        """
        spec = self.main_spec
        binds: dict[str, dict[str, str]] = {}
        for i, (host, target, read_only) in enumerate(spec.binds):
            if "://" in self.engine.url and not self.engine.url.startswith("unix://"):
                raise InfraError(f"{self.compose_file}: services.{self.main}.volumes: binds need a local engine")
            source = host
            if not read_only:
                source = self.work_dir / "compose-binds" / str(i) / host.name
                if host.is_dir():
                    shutil.copytree(host, source, symlinks=True, dirs_exist_ok=True)
                else:
                    source.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(host, source, follow_symlinks=False)
            binds[str(source)] = {"bind": target, "mode": "ro" if read_only else "rw"}
        for key, target, read_only in spec.volumes:
            binds[self.volume_name(key)] = {"bind": target, "mode": "ro" if read_only else "rw"}
        return MainOptions(
            binds=binds,
            environment=dict(spec.environment),
            extra_hosts=dict(spec.extra_hosts),
            shm_size=spec.shm_size,
            cap_add=spec.cap_add,
            cap_drop=spec.cap_drop,
            networks=self._main_networks(),
            dns=spec.dns,
        )

    def _main_networks(self) -> tuple[tuple[str, tuple[str, ...], str | None], ...]:
        """The networks main lists (none listed: ``default``), those the sidecars' ``up`` made:
        a network no sidecar is on has nothing for main to reach, so it is not made."""
        if not self.services:
            return ()
        with self.engine.guard("listing the compose project's networks"):
            found = self.engine.api.networks(filters={"label": f"com.docker.compose.project={self.name}"})
        made = {n["Name"] for n in found}
        listed = self.main_spec.networks or (MainNetwork("default"),)
        return tuple(
            (self.network_name(n.key), n.aliases, n.ipv4_address) for n in listed if self.network_name(n.key) in made
        )

    def up(self) -> None:
        """Make the main service's volumes, build (once per digest) and start the sidecars; waits
        until each is healthy or running."""
        for key, _, _ in self.main_spec.volumes:
            name = self.volume_name(key)
            if name not in self.volumes:
                with self.engine.guard("creating a volume of the compose project"):
                    self.engine.api.create_volume(name, labels=self.volume_labels(key))
                self.volumes.append(name)
        if not self.services:
            return
        timeout = self.task.build_timeout_sec + 120
        self._lock_subnets()
        if rejected := self.check_definition():
            raise InfraError(rejected, retryable=False)
        for service, tag in self.images.items():
            self._build_once(service, tag, timeout)
        done = self._run("up", "--detach", "--wait", "--no-build", *self.services, timeout=timeout)
        if done.returncode != 0:
            raise InfraError(f"the task's sidecars did not come up ({self._failure(done)})")

    def _lock_subnets(self) -> None:
        """Hold each fixed subnet the file declares (one project at a time per subnet on this host:
        the engine refuses a second network on it)."""
        subnets = sorted(
            str(pool["subnet"])
            for spec in self.declared_networks.values()
            if isinstance(spec, dict)
            for pool in ((spec.get("ipam") or {}).get("config") or [])
            if isinstance(pool, dict) and pool.get("subnet")
        )
        locks = self.state_dir / "subnets"
        locks.mkdir(parents=True, exist_ok=True)
        for subnet in subnets:
            lock = FileLock(str(locks / (subnet.replace("/", "_").replace(":", "-") + ".lock")))
            lock.acquire(timeout=self.task.build_timeout_sec + 3600)
            self._subnet_locks.append(lock)

    def addresses(self) -> dict[str, str]:
        """Each running sidecar's address on the project's network, by service name."""
        out: dict[str, str] = {}
        with self.engine.guard("reading the sidecars' addresses"):
            found = self.engine.api.containers(filters={"label": f"com.docker.compose.project={self.name}"})
        for c in found:
            service = (c.get("Labels") or {}).get("com.docker.compose.service")
            nets = (c.get("NetworkSettings") or {}).get("Networks") or {}
            ours = [nets[n] for n in (self.network, *map(self.network_name, self.declared_networks)) if n in nets]
            address = next((n["IPAddress"] for n in ours if n.get("IPAddress")), None)
            if service in self.services and address:
                out.setdefault(service, address)
        return out

    def check_definition(self) -> str | None:
        """``docker compose config`` over the task's file and the override, once per project
        definition per process: why Compose rejects it (one line naming the file and Compose's
        message), or None. Needs no engine: the executor asks it at collection (``TaskChecks``)."""
        key = digest_tree(self.compose_file.parent, extra=f"pytest-maka-compose/1 {self.task.format}\0")
        with _CHECKED_LOCK:
            if key in _CHECKED:
                return _CHECKED[key]
        env = {**os.environ, **self.variables}
        try:
            done = subprocess.run(
                [*self._argv, "config", "--quiet"],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
                cwd=self.compose_file.parent,
            )
        except subprocess.TimeoutExpired:
            raise InfraError("docker compose config timed out after 120 s") from None
        verdict = None
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            said = " | ".join(lines[-3:]) or f"exit {done.returncode}"
            verdict = f"{self.compose_file}: rejected by Docker Compose: {said}"
        with _CHECKED_LOCK:
            _CHECKED[key] = verdict
        return verdict

    def _build_once(self, service: str, tag: str, timeout: float) -> None:
        """Build a sidecar's image unless its digest's tag is there (one builder per tag at a time)."""
        locks = self.state_dir / "images"
        locks.mkdir(parents=True, exist_ok=True)
        with FileLock(str(locks / f"sidecar-{tag.replace(':', '-')}.lock")):
            with self.engine.guard("inspecting a sidecar image"):
                try:
                    self.engine.api.inspect_image(tag)
                    return
                except docker.errors.ImageNotFound:
                    pass
            done = self._run("build", service, timeout=timeout)
            if done.returncode != 0:
                raise InfraError(f"sidecar {service}: image build failed ({self._failure(done)})")

    def _failure(self, done: subprocess.CompletedProcess[str]) -> str:
        tail = " | ".join(self.log.read_text("utf-8", "replace").strip().splitlines()[-3:])
        return f"docker compose exit {done.returncode}: {tail} (log: {self.log})"

    def down(self) -> None:
        """Remove every container, network and volume of the project (after the main container).

        ``down --volumes`` removes what Compose made; then every volume labelled with the
        project (the main service's are there even without a sidecar) goes; a failure is
        noted in the log and the labels leave it to ``maka docker-cleanup``.
        """
        if self.services:
            self._run("down", "--volumes", "--remove-orphans", "--timeout", "0", timeout=120)
        for lock in self._subnet_locks:
            lock.release()
        self._subnet_locks.clear()
        with self.engine.guard("listing the compose project's volumes"):
            found = self.engine.api.volumes(filters={"label": f"com.docker.compose.project={self.name}"})
        for name in {*self.volumes, *(v["Name"] for v in found.get("Volumes") or [])}:
            try:
                with self.engine.guard(f"removing the volume {name}", refusals=False):
                    self.engine.api.remove_volume(name, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                with self.log.open("a") as log:
                    log.write(f"volume {name} not removed: {exc}\n")


def definition_problem(engine: Engine, task: Task, state_dir: Path) -> str | None:
    """Why the task's compose file cannot be used (Compose rejects it, or it has no ``main``), or None.

    Checked without starting anything: the project is only defined, under a scratch directory.
    """
    scratch = Path(tempfile.mkdtemp(prefix="maka-compose-check-"))
    try:
        project = ComposeProject(
            engine, task, name=f"maka-check-{uuid.uuid4().hex[:12]}", labels={}, work_dir=scratch, state_dir=state_dir
        )
        return project.check_definition()
    except InfraError as exc:
        return str(exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
