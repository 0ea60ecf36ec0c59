"""Live processes in a container (``DockerSandbox.spawn``) and file content by the engine's archive API.

A spawned command is a ``docker exec`` with stdin attached. Every exec starts its own session
in the container, so the process's tree is its session: ``kill`` signals every member of it
(SIGTERM, a grace period, then SIGSTOP and SIGKILL until none is left) and leaves the rest
of the container alone. Whatever escaped with ``setsid`` ends with the lease's container.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import IO, Any

import docker.errors
from docker.utils.socket import STDERR, frames_iter

from .manifest import Chunks

#: ``sh -c SCRIPT sh SID SIGNAL``: signal the live members of session SID (KILL: until none is left).
SIGNAL_SESSION = r"""
sid=$1; sig=$2; me=$$
members() {
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = "$me" ] && continue
    read -r line < "$d/stat" 2>/dev/null || continue
    set -- ${line##*) }
    [ "$4" = "$sid" ] && [ "$1" != Z ] && echo "$p"
  done
}
if [ "$sig" != KILL ]; then
  for p in $(members); do kill -"$sig" "$p" 2>/dev/null; done
  [ -n "$(members)" ] && exit 3
  exit 0
fi
i=0
while [ $i -lt 100 ]; do
  i=$((i+1)); live=$(members)
  [ -z "$live" ] && exit 0
  for p in $live; do kill -STOP "$p" 2>/dev/null; done
  for p in $live; do kill -KILL "$p" 2>/dev/null; done
done
exit 1
"""
#: Prints the command's pid (its session id) on the first stdout line, then becomes the command.
_WRAPPER = 'echo "$$"; exec sh -c "$1"'


class _SocketStdin(io.RawIOBase):
    """The exec's stdin: writes go to the hijacked socket; close half-closes it (end-of-file)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._sock.sendall(view)
        return len(view)

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_WR)
        super().close()


class DockerProcess:
    """One spawned exec: stdout/stderr demultiplexed into pipes, wait by polling, kill by session."""

    def __init__(self, sandbox: Any, command: str, *, env: Mapping[str, str], cwd: str) -> None:
        self._sandbox = sandbox
        self._engine = sandbox.engine
        api = sandbox.api
        environment = [f"{k}={v}" for k, v in env.items()]
        with self._engine.guard("starting the process", refusals=False):
            self._eid = api.exec_create(
                sandbox.id,
                ["sh", "-c", _WRAPPER, "sh", command],
                environment=environment,
                workdir=cwd,
                stdin=True,
                stdout=True,
                stderr=True,
                user=getattr(sandbox, "_user", None) or "",
            )["Id"]
            self._conn = api.exec_start(self._eid, socket=True)
            api._disable_socket_timeout(self._conn)
        raw = getattr(self._conn, "_sock", self._conn)
        out_r, self._out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        self.stdout: IO[bytes] = os.fdopen(out_r, "rb", buffering=0)
        self.stderr: IO[bytes] = os.fdopen(err_r, "rb", buffering=0)
        self.stdin: IO[bytes] = io.BufferedWriter(_SocketStdin(raw))
        self.session: str | None = None
        self._on_end: list[Any] = []
        self._ended = False
        self._started = threading.Event()
        self._returncode: int | None = None
        self._pump = threading.Thread(target=self._demux, name="maka-docker-spawn", daemon=True)
        self._pump.start()
        self._started.wait(30)

    def _demux(self) -> None:
        head = b""
        try:
            for stream, data in frames_iter(self._conn, False):
                if stream == STDERR:
                    os.write(self._err_w, data)
                    continue
                if self.session is None:
                    head += data
                    if b"\n" not in head:
                        continue
                    first, _, data = head.partition(b"\n")
                    self.session = first.decode(errors="replace").strip()
                    self._started.set()
                if data:
                    os.write(self._out_w, data)
        except OSError as exc:  # the reader went away, or the socket was closed by kill() ...
            if not self._ended and not isinstance(exc, BrokenPipeError):  # ... or the engine's end of it
                with contextlib.suppress(OSError):  # never blocks on a pipe nobody reads
                    os.set_blocking(self._err_w, False)
                    note = f"\n[maka: reading this process's output failed: {type(exc).__name__}: {exc}]\n"
                    os.write(self._err_w, note.encode())
        finally:
            self._started.set()
            for fd in (self._out_w, self._err_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None when the command still runs after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = 0.01
        while True:
            try:
                with self._engine.guard("waiting for the process", refusals=False):
                    info = self._sandbox.api.exec_inspect(self._eid)
            except docker.errors.NotFound:  # the container is gone, and everything in it
                info = {"Running": False, "ExitCode": self._returncode if self._ended else 137}
            if not info["Running"]:
                self._returncode = info.get("ExitCode")
                self._end()
                return self._returncode
            if deadline is not None and time.monotonic() >= deadline:
                return None
            left = interval if deadline is None else min(interval, max(0.0, deadline - time.monotonic()))
            time.sleep(left)
            interval = min(interval * 2, 0.2)

    def kill(self, grace_sec: float = 1.0) -> None:
        """SIGTERM the session, SIGKILL what is left after ``grace_sec``; returns when none is left."""
        if self.session and self.session.isdigit():
            with contextlib.suppress(docker.errors.APIError):
                if grace_sec > 0:
                    self._signal("TERM")
                    end = time.monotonic() + grace_sec
                    while time.monotonic() < end and self._signal("0") != 0:
                        time.sleep(0.05)
                self._signal("KILL")
        self.wait(10)
        self._end()

    def _signal(self, sig: str) -> int | None:
        assert self.session is not None
        code, _ = self._sandbox._run(["sh", "-c", SIGNAL_SESSION, "sh", self.session, sig])
        return code

    def on_end(self, callback: Any) -> None:
        """Run ``callback`` once, when the process is over (e.g. take its network away)."""
        self._on_end.append(callback)

    def _end(self) -> None:
        """Once the exec is over: give the pump a moment to drain, then drop the connection."""
        if self._ended:
            return
        self._ended = True
        for callback in self._on_end:
            with contextlib.suppress(Exception):
                callback()
        self._pump.join(2.0)
        with contextlib.suppress(Exception):
            self.stdin.close()
        if self._pump.is_alive():  # a daemon of the session still holds the output open
            with contextlib.suppress(Exception):
                self._conn.close()


def read_via_archive(api: Any, container_id: str, path: str, max_bytes: int) -> bytes:
    """At most ``max_bytes`` of the regular file at ``path``; a link or special file is refused.

    The engine resolves the path's directories inside the container's root and archives the
    last component itself, so nothing outside the container is ever read.
    """
    try:
        chunks, _stat = api.get_archive(container_id, path)
    except docker.errors.NotFound:
        raise FileNotFoundError(f"no such file in the sandbox: {path}") from None
    name = PurePosixPath(path).name
    with tarfile.open(fileobj=Chunks(chunks), mode="r|") as tar:
        for member in tar:
            if member.name != name:
                break
            if not member.isfile():
                raise FileNotFoundError(f"not a regular file in the sandbox: {path}")
            src = tar.extractfile(member)
            assert src is not None
            with src:
                return src.read(max(0, max_bytes))
    raise FileNotFoundError(f"no such file in the sandbox: {path}")
