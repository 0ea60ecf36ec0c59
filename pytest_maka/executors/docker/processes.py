"""Start, watch and stop the processes of a leased container (the base of DockerSandbox).

A command's own process tree ends with it (on its timeout); what it detached stays, as in
the benchmark's own harness. The container is restarted only when it stopped, and never
where the restart could run a program the subject changed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import docker.errors

from ...core.errors import InfraError, SubjectFault
from .engines import Engine
from .execs import FIND_EXEC

#: The keep-alive command given to the image's ENTRYPOINT (Harbor's), and how it shows in ``ps``.
KEEP_ALIVE = ["sh", "-c", "sleep infinity"]
KEEP_ALIVE_ARGS = "sleep infinity"
#: How long a container may take to start its processes, and how long an ENTRYPOINT that never
#: runs the keep-alive (it runs a service of its own) must leave its processes unchanged.
START_WAIT_SEC = 30.0
SETTLE_SEC = 1.0


@dataclass(frozen=True)
class Keepers:
    """The processes the container started by itself (host pids, as ``top`` lists them)."""

    host: frozenset[str] = frozenset()


class ContainerProcesses:
    """Knows the processes the container's image started and stops everything else."""

    engine: Engine
    id: str
    _keepers: set[str]
    _user: str | None
    restarts: int
    #: A subject's command ran here since the container started (a restart may run what it left).
    _dirty: bool

    @property
    def api(self) -> Any:
        return self.engine.api

    def exec_state(self, eid: str) -> dict[str, Any]:
        """``exec_inspect``, or a killed exec's state once the engine has forgotten it: a container
        whose keeper a command killed stops, and the engine drops its execs with it (CI saw
        "No such exec instance" reading the exit code of ``kill -9 -1``)."""
        try:
            return dict(self.api.exec_inspect(eid))
        except docker.errors.NotFound:
            return {"Running": False, "ExitCode": 128 + signal.SIGKILL}

    # --- start and stop ---------------------------------------------------------------
    def start(self) -> None:
        """Start the container and note the processes its image starts (docker-init, the
        image's ENTRYPOINT and what it runs, the keep-alive): those are never stopped."""
        with self.engine.guard("starting the container"):
            self.api.start(self.id)
            self._keepers = set()
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

    @property
    def keepers(self) -> Keepers:
        return Keepers(frozenset(self._keepers))

    def adopt(self, keepers: Keepers, *, name: str) -> None:
        """Take over a container started ahead of time (a spare) and name it after its cell."""
        self._keepers = set(keepers.host)
        with self.engine.guard("naming the container"):
            self.api.rename(self.id, name)

    def _table(self) -> dict[str, str]:
        """Host pid -> command line of the container's live (non-zombie) processes."""
        with self.engine.guard("listing the container's processes", refusals=False):
            top = self.api.top(self.id, ps_args="-o pid,stat,args")
        return {pid: args for pid, stat, args, *_ in top.get("Processes") or [] if not stat.startswith("Z")}

    def _processes(self) -> set[str]:
        """Host pids of the container's live (non-zombie) processes."""
        return set(self._table())

    def stop_leftovers(self, grace: float = 2.0) -> int | None:
        """End every process the subject left (all but the container's keepers), from the
        engine's host: the number stopped, or None where that cannot be done from here (the
        engine runs elsewhere). A pid is signalled only while it is still in the container's
        pid namespace, so a reused pid is never hit.

        Used where the verdict channel cannot be private (docs/security.md, "The verdict
        channel"): there a process the subject left could rewrite the tests or the reward
        while the verifier runs, so it is ended before the tests go in.
        """
        try:
            own = os.readlink(f"/proc/{int(self.api.inspect_container(self.id)['State']['Pid'])}/ns/pid")
        except (OSError, KeyError, TypeError, ValueError):
            return None
        stopped = 0
        deadline = time.monotonic() + grace
        while True:
            left = [pid for pid in self._processes() - self._keepers if pid.isdigit()]
            if not left:
                return stopped
            for pid in left:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/ns/pid") == own:
                        os.kill(int(pid), signal.SIGKILL)
                        stopped += 1
            if time.monotonic() > deadline:
                return stopped
            time.sleep(0.05)

    def _restart(self, *, checked: bool = False) -> None:
        """Kill the whole container (every process in it) and start it again.

        A restart runs the image's ENTRYPOINT and keeper: after a subject's command, only when
        the subject changed nothing outside the workdir and ``/logs`` (``checked``: the caller
        put the system back itself), else SubjectFault; it never runs a program the subject
        edited. A container that does not start again is the subject's doing after it ran.
        """
        if self._dirty and not checked:
            planted = self.restart_risk()
            if planted:
                raise SubjectFault(
                    "the container's main process ended and the container is not started again: a restart"
                    " would run its ENTRYPOINT, and the subject changed files outside the workdir",
                    planted,
                )
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
            if self._dirty:
                raise SubjectFault("the container no longer starts after the subject's changes")
            raise InfraError("the container stopped and does not start again")

    def restart_risk(self) -> list[str]:
        """What the subject changed that a restart could run (subclasses list it; none here)."""
        return []

    def stop_tree(self, token: str, grace: float = 0.0, *, eid: str | None = None) -> None:
        """Stop one exec's process tree (its session, found by ``token``); what it detached stays.

        ``eid``: the exec, for a timeout that came before its first process showed (an engine
        under load starts it late): it is looked for again while the engine reports it running.
        Run as the command's own user: the stopper can signal nothing the command could not.
        """
        from .spawn import SIGNAL_SESSION

        with self.engine.guard("stopping a command's processes"):
            try:
                sid = self._session_of(token, eid)
                if sid is None:
                    return  # its first process is gone: what is left was detached from it
                if grace > 0:
                    self._run(["sh", "-c", SIGNAL_SESSION, "sh", sid, "TERM"], user=self._user)
                    end = time.monotonic() + grace
                    while time.monotonic() < end:
                        code, _ = self._run(["sh", "-c", SIGNAL_SESSION, "sh", sid, "0"], user=self._user)
                        if code == 0:
                            return
                        time.sleep(0.05)
                self._run(["sh", "-c", SIGNAL_SESSION, "sh", sid, "KILL"], user=self._user)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: the container stopped, and everything in it
                    raise

    def _session_of(self, token: str, eid: str | None, wait: float = START_WAIT_SEC) -> str | None:
        """The session id of the exec carrying ``token``, or None once it is over."""
        deadline = time.monotonic() + wait
        while True:
            code, out = self._run(["sh", "-c", FIND_EXEC, "sh", token], user=self._user)
            sid = out.decode(errors="replace").strip()
            if code == 0 and sid.isdigit():
                return sid
            if eid is None or time.monotonic() > deadline or not self.exec_state(eid).get("Running"):
                return None
            time.sleep(0.05)

    def _run(self, argv: list[str], *, user: str | None = None) -> tuple[int | None, bytes]:
        """A short internal command (no caps, no timeout); restarts a stopped container once."""
        with self.engine.guard(f"running {argv[0]} in the container", refusals=False):
            for attempt in (1, 2):
                created = False
                try:
                    eid = self.api.exec_create(self.id, argv, stdout=True, stderr=True, user=user or "")["Id"]
                    created = True
                    out = self.api.exec_start(eid)
                    break
                except docker.errors.APIError as exc:  # 409: stopped; 404 on start: dropped with it
                    if attempt == 2 or exc.status_code not in ((409, 404) if created else (409,)):
                        raise
                    self._restart()
            # the output can end before the engine has the exit status (ExitCode None, Running
            # true): under load, reading it at once made a stop find "no session" and kill nothing
            deadline = time.monotonic() + 5.0
            while True:
                state = self.exec_state(eid)
                if not state.get("Running") or time.monotonic() > deadline:
                    return state.get("ExitCode"), out
                time.sleep(0.02)
