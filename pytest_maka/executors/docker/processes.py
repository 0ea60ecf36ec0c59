"""Start, watch and stop the processes of a leased container (the base of DockerSandbox)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import docker.errors

from ...core.errors import InfraError
from .engines import Engine
from .execs import SIGNAL_ALL


class ContainerProcesses:
    """Knows the container's own two processes and stops everything else."""

    engine: Engine
    id: str
    _keepers: set[str]
    restarts: int

    @property
    def api(self) -> Any:
        return self.engine.api

    # --- start and stop ---------------------------------------------------------------
    def start(self) -> None:
        """Start the container and note its two own processes (docker-init and the keeper)."""
        with self.engine.guard("starting the container"):
            self.api.start(self.id)
            deadline = time.monotonic() + 10
            while True:
                try:
                    self._keepers = self._processes()
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:
                        raise
                    self._keepers = set()  # it stopped at once: its keeper does not run
                    break
                if len(self._keepers) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)

    @property
    def keepers(self) -> set[str]:
        return set(self._keepers)

    def adopt(self, keepers: set[str], *, name: str) -> None:
        """Take over a container started ahead of time (a spare) and name it after its cell."""
        self._keepers = set(keepers)
        with self.engine.guard("naming the container"):
            self.api.rename(self.id, name)

    def _processes(self) -> set[str]:
        """Host pids of the container's live (non-zombie) processes."""
        top = self.api.top(self.id, ps_args="-o pid,stat")
        return {pid for pid, stat, *_ in top.get("Processes") or [] if not stat.startswith("Z")}

    def _restart(self) -> None:
        """Kill the whole container (every process in it) and start it again.

        A container whose keeper no longer runs (the subject broke ``sleep``) is repaired first.
        """
        self.restarts += 1
        with contextlib.suppress(docker.errors.APIError):  # already stopped
            self.api.kill(self.id)
        self.api.wait(self.id, timeout=30)
        self.start()
        if len(self._keepers) < 2:
            with contextlib.suppress(docker.errors.APIError):
                self.api.kill(self.id)
            self.api.wait(self.id, timeout=30)
            self._repair()

    def _repair(self) -> None:
        """Make a container that no longer starts start again (subclasses know its image)."""
        raise InfraError("the container stopped and does not start again")

    def stop_all(self, grace: float = 0.0) -> None:
        """Stop every process a command started; returns only when none is left."""
        with self.engine.guard("stopping processes"):
            try:
                if not (self._processes() - self._keepers):
                    return
                if grace > 0:
                    self._run(["sh", "-c", SIGNAL_ALL, "sh", "TERM"])
                    end = time.monotonic() + grace
                    while time.monotonic() < end and self._processes() - self._keepers:
                        time.sleep(0.05)
                self._run(["sh", "-c", SIGNAL_ALL, "sh", "KILL"])
                if not (self._processes() - self._keepers):
                    return
            except docker.errors.APIError as exc:
                # 409: the container stopped (its keeper was killed); otherwise the container's
                # sh may be broken: the engine's kill and a restart stop everything all the same
                if exc.status_code not in (409, 500):
                    raise
            self._restart()

    def _run(self, argv: list[str]) -> tuple[int | None, bytes]:
        """A short internal command (no caps, no timeout); restarts a stopped container once."""
        for attempt in (1, 2):
            try:
                eid = self.api.exec_create(self.id, argv, stdout=True, stderr=True)["Id"]
                break
            except docker.errors.APIError as exc:
                if attempt == 2 or exc.status_code != 409:
                    raise
                self._restart()
        out = self.api.exec_start(eid)
        return self.api.exec_inspect(eid).get("ExitCode"), out
