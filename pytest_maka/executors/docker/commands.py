"""Running one command in a leased container (the base of DockerSandbox): start it as a
``docker exec`` whose output drains into capped files, watch it to its end or its timeout, stop
its own process tree on a timeout, and start the container again when the runtime refused the
command because an earlier one ended the container's keeper.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from pathlib import Path

import docker.errors

from ..base import ExecResult
from .execs import EXEC_TOKEN, Capture
from .processes import ContainerProcesses

#: Seconds a finished command's output may still drain while a process it detached holds it open.
DRAIN_SEC = 0.5
#: Restarts when the runtime refuses a command because the container was stopping (the engine
#: may still report it running for a moment after the refusal).
RESTARTS_ON_REFUSAL = 3


class ContainerCommands(ContainerProcesses):
    """``_exec``: one command, returning once every process it started is gone (also on timeout)."""

    workdir: str
    _grace: float
    last_stop_s: float

    def _exec(
        self,
        command: str,
        env: Mapping[str, str],
        timeout_sec: float | None,
        stdout_path: Path,
        stderr_path: Path,
        cwd: str | None,
        cap: int,
        started: float,
        refused: int = 0,
    ) -> ExecResult:
        argv = ["sh", "-c", command]
        token = secrets.token_hex(12)
        environment = [f"{k}={v}" for k, v in env.items() if k != EXEC_TOKEN] + [f"{EXEC_TOKEN}={token}"]
        eid, capture = self._start_exec(argv, environment, cwd, stdout_path, stderr_path, cap)
        deadline = None if timeout_sec is None else started + timeout_sec
        timed_out, exit_code = False, None
        try:
            exit_code, timed_out = self._watch(eid, capture, deadline)
        except BaseException:
            capture.close()
            raise
        if exit_code == 126 and refused < RESTARTS_ON_REFUSAL and self._keeper_gone():
            # the runtime refused the command (exit 126, its message as output: "cannot exec in
            # a stopped state", "ttrpc: closed", ...) because an earlier command ended the
            # container's keeper: judged by the container's state, never by that message. Start
            # it again (unless that would run what the subject changed) and rerun.
            capture.close()
            capture.wait(10)
            self._restart()
            return self._exec(command, env, timeout_sec, stdout_path, stderr_path, cwd, cap, started, refused + 1)
        stop_started = time.monotonic()
        if timed_out:  # the command's own tree ends with it; what it detached stays
            self.stop_tree(token, grace=self._grace, eid=eid)
        self.last_stop_s = time.monotonic() - stop_started
        if timed_out or (exit_code or 0) >= 128:  # killed: it may have taken the container's keeper along
            self._settle_state()
        if not capture.wait(DRAIN_SEC if not timed_out else 10):
            capture.close()  # a process it detached holds the output open: what came so far is kept
            capture.wait(10)
        reader_failed = capture.surface_error()
        return ExecResult(
            exit_code=None if timed_out else exit_code,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            stdout_truncated=capture.truncated[0] or reader_failed,
            stderr_truncated=capture.truncated[1] or reader_failed,
        )

    def _running(self) -> bool:
        with self.engine.guard("inspecting the container"):
            return bool(self.api.inspect_container(self.id)["State"]["Running"])

    def _keeper_gone(self, within: float = 5.0) -> bool:
        """Whether the container's keeper is gone (the container stops, or stopped): then it
        shows as stopped within ``within`` seconds. A container whose keepers all run is healthy
        and the 126 was the command's own."""
        try:
            if self._keepers and self._keepers <= self._processes():
                return False
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # not running
                return True
            # the runtime could not list them (CI saw 500 "container does not exist" while the
            # container was ending): judged by its state below, as everywhere else here
        deadline = time.monotonic() + within
        while self._running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _settle_state(self) -> None:
        """Wait (briefly) until a container whose keeper a command killed shows as stopped, so
        that the next command restarts it instead of racing its end."""
        for _ in range(10):
            with self.engine.guard("inspecting the container"):
                if not self.api.inspect_container(self.id)["State"]["Running"]:
                    return
            try:
                alive = self._processes()
            except docker.errors.APIError:  # stopped meanwhile
                return
            if self._keepers <= alive:
                return  # every keeper still runs: the container stays
            time.sleep(0.05)

    def _start_exec(
        self, argv: list[str], environment: list[str], cwd: str | None, stdout_path: Path, stderr_path: Path, cap: int
    ) -> tuple[str, Capture]:
        """Create and start the exec; its output drains into the two files from now on."""
        with self.engine.guard("starting the command", refusals=False):
            for attempt in (1, 2):
                created = False
                try:
                    eid = self.api.exec_create(
                        self.id,
                        argv,
                        environment=environment,
                        workdir=cwd or self.workdir,
                        stdout=True,
                        stderr=True,
                        user=self._user or "",
                    )["Id"]
                    created = True
                    sock = self.api.exec_start(eid, socket=True)
                    break
                except docker.errors.APIError as exc:
                    # 404 on start: the exec was made while the container was ending, and the
                    # engine dropped it with the container's other execs (CI: "No such exec instance")
                    forgotten = created and exc.status_code == 404
                    stopped = forgotten or exc.status_code == 409 or "is not running" in str(exc.explanation or "")
                    if attempt == 2 or not stopped:
                        raise
                    self._restart()  # the previous command killed the keeper: start over
            self.api._disable_socket_timeout(sock)
            capture = Capture(sock, stdout_path, stderr_path, cap)
            capture.start()
            return eid, capture

    def _watch(self, eid: str, capture: Capture, deadline: float | None) -> tuple[int | None, bool]:
        """Wait for the command's end (or the deadline): (exit code, timed out)."""
        with self.engine.guard("streaming the command's output", refusals=False):
            interval = 0.02
            while True:
                wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
                if capture.wait(wait):
                    return self._exit_code(eid), False
                if deadline is not None and time.monotonic() >= deadline:
                    return None, True
                info = self.exec_state(eid)
                if not info["Running"]:  # background processes still hold the output open
                    return info.get("ExitCode"), False
                interval = min(interval * 2, 0.5)

    def _exit_code(self, eid: str) -> int | None:
        with self.engine.guard("reading the command's exit code", refusals=False):
            for _ in range(200):
                info = self.exec_state(eid)
                if not info["Running"]:
                    return info.get("ExitCode")
                time.sleep(0.005)
        return None
