"""Multi-container environments through the real Docker Compose v2 (the ``docker compose`` plugin).

The task's ``environment/docker-compose.yaml`` names a ``main`` service and sidecars. Each
attempt is its own compose project (``maka-<attempt id>``): the sidecars are started by
``docker compose up --wait`` (so ``depends_on: condition: service_healthy`` and the services'
healthchecks are Compose's own), on the project's network, made ``internal`` (no route out)
by an override file; the main container is the executor's usual one (limits, keepers,
restore), created on that network with the alias ``main``. A sidecar with a ``build`` is
tagged by the digest of its context, so it is built once per digest. The override labels
every container and the network like the executor's own, so ``maka docker-cleanup`` finds
what a killed run left; ``down`` removes the project with the lease.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import docker.errors
import yaml
from filelock import FileLock

from ...core.errors import InfraError
from ...core.task import Task, digest_tree
from . import labels as L
from .engines import Engine

MAIN = "main"
#: Where the compose plugin is looked for when ``docker`` is on PATH without it.
PLUGIN_DIRS = ("/usr/libexec/docker/cli-plugins", "/usr/local/lib/docker/cli-plugins", "~/.docker/cli-plugins")


def compose_command() -> list[str] | None:
    """The argv prefix that runs Compose v2, or None when it is not installed."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0 and "version v2" in probe.stdout.lower().replace("version 2", "version v2"):
            return [docker, "compose"]
    for d in PLUGIN_DIRS:
        plugin = Path(os.path.expanduser(d)) / "docker-compose"
        if plugin.is_file() and os.access(plugin, os.X_OK):
            return [str(plugin)]
    return None


def sidecars(compose_file: Path, main: str = MAIN) -> dict[str, dict[str, Any]]:
    """The services besides ``main`` (an InfraError names the file when it cannot be read)."""
    try:
        data = yaml.safe_load(compose_file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InfraError(f"{compose_file}: not a readable compose file: {exc}") from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or main not in services:
        raise InfraError(f"{compose_file}: services: expected a '{main}' service (the environment of the subject)")
    return {name: spec or {} for name, spec in services.items() if name != main}


def compose_variables(project: str, main: str, logs: Path) -> dict[str, str]:
    """Variables the compose files of Terminal-Bench use (Harbor's use none): names made per
    project, log paths on the host under the attempt (``logs``), paths in the container."""
    return {
        "T_BENCH_TASK_DOCKER_NAME_PREFIX": project,
        "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": f"{project}-{main}",
        "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": f"{project}-{main}",
        "T_BENCH_TASK_LOGS_PATH": str(logs),
        "T_BENCH_TASK_AGENT_LOGS_PATH": str(logs / "agent"),
        "T_BENCH_TEST_DIR": "/tests",
        "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
        "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
    }


class ComposeProject:
    """One attempt's sidecars: ``up`` before the main container is created, ``down`` with the lease."""

    def __init__(
        self, engine: Engine, task: Task, *, name: str, labels: dict[str, str], work_dir: Path, state_dir: Path
    ) -> None:
        assert task.compose_file is not None
        command = compose_command()
        if command is None:
            raise InfraError("multi-container environment: Docker Compose v2 (the 'docker compose' plugin) is absent")
        self.engine, self.task, self.name, self.work_dir = engine, task, name, work_dir
        self.compose_file = task.compose_file
        self.main = task.compose_service
        self.services = sidecars(self.compose_file, self.main)
        self.labels = {**L.owner_labels(), L.RUN: L.run_id(), **labels}
        self.network = f"{name}_default"
        self.state_dir = state_dir
        self.images: dict[str, str] = {}  # sidecar service -> its image tag (by digest)
        self._argv = [*command, "--project-name", name, "-f", str(self.compose_file), "-f", str(self._override())]
        self.log = work_dir / "compose.log"

    def _override(self) -> Path:
        """Labels on everything, the project network internal, sidecar images tagged by digest."""
        services: dict[str, Any] = {}
        for service, spec in self.services.items():
            entry: dict[str, Any] = {"labels": dict(self.labels)}
            build = spec.get("build")
            if build is not None:
                context = build if isinstance(build, str) else build.get("context", ".")
                root = (self.compose_file.parent / context).resolve()
                digest = digest_tree(root, extra=f"pytest-maka-sidecar/1 {json.dumps(build, sort_keys=True)}\0")
                entry["image"] = self.images[service] = f"pytest-maka-sidecar-{service.lower()}:{digest[:24]}"
            services[service] = entry
        override = {
            "services": services,
            "networks": {"default": {"internal": True, "labels": dict(self.labels)}},
        }
        self.work_dir.mkdir(parents=True, exist_ok=True)
        path = self.work_dir / "compose.override.json"
        path.write_text(json.dumps(override, indent=1))
        return path

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **compose_variables(self.name, self.main, self.work_dir / "sidecar-logs")}
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

    def up(self) -> None:
        """Build (once per digest) and start the sidecars; waits until each is healthy or running."""
        timeout = self.task.build_timeout_sec + 120
        for service, tag in self.images.items():
            self._build_once(service, tag, timeout)
        done = self._run("up", "--detach", "--wait", "--no-build", *self.services, timeout=timeout)
        if done.returncode != 0:
            raise InfraError(f"the task's sidecars did not come up ({self._failure(done)})")

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
        """Remove every container, network and volume of the project (errors noted in the log)."""
        self._run("down", "--volumes", "--remove-orphans", "--timeout", "0", timeout=120)
