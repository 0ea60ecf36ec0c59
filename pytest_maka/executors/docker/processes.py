"""Start, watch and stop the processes of a leased container (the base of DockerSandbox)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import docker.errors

from ...core.errors import InfraError
from .engines import Engine
from .execs import SIGNAL_ALL

#: The keep-alive command given to the image's ENTRYPOINT (Harbor's), and how it shows in ``ps``.
KEEP_ALIVE = ["sh", "-c", "sleep infinity"]
KEEP_ALIVE_ARGS = "sleep infinity"
#: How long a container may take to start its processes, and how long an ENTRYPOINT that never
#: runs the keep-alive (it runs a service of its own) must leave its processes unchanged.
START_WAIT_SEC = 30.0
SETTLE_SEC = 1.0
#: Lists the container's pids (its own excepted).
LIST_PIDS = 'for d in /proc/[0-9]*; do [ "${d#/proc/}" = $$ ] || echo "${d#/proc/}"; done'


@dataclass(frozen=True)
class Keepers:
    """The processes the container started by itself: host pids (for ``top``) and the
    container's own pids (for the in-container signalling script)."""

    host: frozenset[str] = frozenset()
    inner: tuple[str, ...] = ()


class ContainerProcesses:
    """Knows the processes the container's image started and stops everything else."""

    engine: Engine
    id: str
    _keepers: set[str]
    _inner: tuple[str, ...]
    restarts: int

    @property
    def api(self) -> Any:
        return self.engine.api

    # --- start and stop ---------------------------------------------------------------
    def start(self) -> None:
        """Start the container and note the processes its image starts (docker-init, the
        image's ENTRYPOINT and what it runs, the keep-alive): those are never stopped."""
        with self.engine.guard("starting the container"):
            self.api.start(self.id)
            self._keepers, self._inner = set(), ()
            deadline = time.monotonic() + START_WAIT_SEC
            seen: dict[str, str] | None = None
            stable_since = time.monotonic()
            while True:
                try:
                    table = self._table()
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:
                        raise
                    return  # it stopped at once: its keeper does not run
                now = time.monotonic()
                if seen is None or set(table) != set(seen):
                    seen, stable_since = table, now
                elif len(table) >= 2 and (KEEP_ALIVE_ARGS in table.values() or now - stable_since >= SETTLE_SEC):
                    break  # the keep-alive runs (or the ENTRYPOINT runs its own service) and nothing changes
                if now > deadline:
                    break
                time.sleep(0.01)
            self._keepers = set(table)
            self._inner = self._inner_pids()

    @property
    def keepers(self) -> Keepers:
        return Keepers(frozenset(self._keepers), self._inner)

    def adopt(self, keepers: Keepers, *, name: str) -> None:
        """Take over a container started ahead of time (a spare) and name it after its cell."""
        self._keepers, self._inner = set(keepers.host), keepers.inner
        with self.engine.guard("naming the container"):
            self.api.rename(self.id, name)

    def _table(self) -> dict[str, str]:
        """Host pid -> command line of the container's live (non-zombie) processes."""
        with self.engine.guard("listing the container's processes", refusals=False):
            top = self.api.top(self.id, ps_args="-o pid,stat,args")
        return {pid: args for pid, stat, args, *_ in top.get("Processes") or [] if not stat.startswith("Z")}

    def _inner_pids(self) -> tuple[str, ...]:
        """The keepers' pids as the container sees them (the signalling script spares them)."""
        try:  # not through _run: a container that stopped is the caller's to handle
            with self.engine.guard("listing the container's own pids", refusals=False):
                eid = self.api.exec_create(self.id, ["sh", "-c", LIST_PIDS], stdout=True, stderr=False)["Id"]
                out = self.api.exec_start(eid)
                code = self.api.exec_inspect(eid).get("ExitCode")
        except docker.errors.APIError:
            return ()
        if code != 0:
            return ()
        return tuple(p for p in out.decode(errors="replace").split() if p.isdigit() and p != "1")

    def _processes(self) -> set[str]:
        """Host pids of the container's live (non-zombie) processes."""
        return set(self._table())

    def _restart(self) -> None:
        """Kill the whole container (every process in it) and start it again.

        A container whose keeper no longer runs (the subject broke ``sleep``) is repaired first.
        """
        self.restarts += 1
        with self.engine.guard("restarting the container", refusals=False):
            with contextlib.suppress(docker.errors.APIError):  # already stopped
                self.api.kill(self.id)
            self.api.wait(self.id, timeout=30)
        try:
            self.start()
        except InfraError:
            # a keeper the subject broke (a replaced /bin/sh) can exit while the engine still
            # starts it, which the engine reports as its own failure ("ttrpc: closed"): repair
            # as below; a dead engine fails the repair's start as well and stays infra
            self._keepers = set()
        if len(self._keepers) < 2:
            with self.engine.guard("repairing the container", refusals=False):
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
                    self._run(["sh", "-c", SIGNAL_ALL, "sh", "TERM", *self._inner])
                    end = time.monotonic() + grace
                    while time.monotonic() < end and self._processes() - self._keepers:
                        time.sleep(0.05)
                self._run(["sh", "-c", SIGNAL_ALL, "sh", "KILL", *self._inner])
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
        with self.engine.guard(f"running {argv[0]} in the container", refusals=False):
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
