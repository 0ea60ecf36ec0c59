"""Running commands in a container: capped output capture and the in-container scripts.

Docker cannot kill an exec by id. Every exec starts its own session in the container
(its first process has no parent there), so a command's process tree is that session:
``FIND_EXEC`` finds it by a token in the command's environment, and ``SIGNAL_SESSION``
(``spawn``) stops its members. What the command detached into a session of its own
(``setsid``, a daemon) is not its tree and stays, as in the benchmark's own harness.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any, BinaryIO

from docker.utils.socket import STDERR, frames_iter

#: The variable every exec gets (its value: a token of that exec), by which its session is found.
EXEC_TOKEN = "MAKA_EXEC"
#: ``sh -c SCRIPT sh TOKEN``: prints the session id of the exec whose environment has
#: ``MAKA_EXEC=TOKEN`` (its first process: no parent in the container), or nothing.
FIND_EXEC = r"""
tok="MAKA_EXEC=$1"; me=$$
for d in /proc/[0-9]*; do
  p=${d#/proc/}; case $p in 1|"$me") continue;; esac
  read -r line < "$d/stat" 2>/dev/null || continue
  set -- ${line##*) }
  [ "$2" = 0 ] || continue
  grep -qsF -- "$tok" "$d/environ" && echo "$4" && exit 0
done
exit 0
"""


class Capture:
    """Drains an exec's raw multiplexed socket into two files, each capped; the rest is dropped."""

    def __init__(self, sock: Any, stdout_path: Path, stderr_path: Path, cap: int) -> None:
        self._sock = sock
        self._paths = (stdout_path, stderr_path)
        self._cap = cap
        self.written = [0, 0]
        self.truncated = [False, False]
        self.error: BaseException | None = None
        self.closed = False  # set by close(): an error after it is the expected end of the stream
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maka-docker-output", daemon=True)

    def start(self) -> None:
        for p in self._paths:
            p.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def _feed(self, i: int, data: bytes, f: BinaryIO) -> None:
        room = self._cap - self.written[i]
        if len(data) > room:
            self.truncated[i] = True
            data = data[: max(room, 0)]
        if data:
            f.write(data)
            self.written[i] += len(data)

    def _run(self) -> None:
        try:
            with open(self._paths[0], "wb") as out, open(self._paths[1], "wb") as err:
                for stream, data in frames_iter(self._sock, False):
                    if stream == STDERR:
                        self._feed(1, data, err)
                    else:
                        self._feed(0, data, out)
        except BaseException as exc:  # a closed socket after a stop ends up here too
            self.error = exc
        finally:
            self.done.set()

    def wait(self, timeout: float) -> bool:
        return self.done.wait(timeout)

    def surface_error(self) -> bool:
        """Note a reader failure (not one caused by close()) at the end of the stderr file.

        Returns True when the output is incomplete because of it.
        """
        if self.error is None or self.closed or _stream_closed(self.error):
            return False
        with open(self._paths[1], "ab") as err:
            err.write(
                f"\n[maka: reading this command's output failed: {type(self.error).__name__}: "
                f"{self.error}; the output above may be incomplete]\n".encode()
            )
        return True

    def close(self) -> None:
        """Drop the connection (ends the reader if the stream is still open)."""
        self.closed = True
        for obj in (self._sock, getattr(self._sock, "_sock", None)):
            try:
                if obj is not None:
                    obj.close()
            except Exception:
                pass


def _stream_closed(exc: BaseException) -> bool:
    """The stream was cut when its processes were stopped: the expected end, not a failure."""
    if isinstance(exc, (ConnectionError, ValueError)):
        return True
    return isinstance(exc, OSError) and exc.errno in (errno.EBADF, errno.ECONNRESET, errno.EPIPE)
