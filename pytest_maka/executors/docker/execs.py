"""Running commands in a container: capped output capture and the in-container scripts.

Docker cannot kill an exec by id, so stopping works on the container's pid namespace:
every process except pid 1 (docker-init) and the keeper it started (``sleep infinity``,
the oldest child of pid 1) is frozen with SIGSTOP and then killed with SIGKILL, until
none is left. Pid 1 cannot be signalled from inside its namespace, so no command can
take the container down; if the keeper itself is killed the container stops and is
started again, which also kills everything in it.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path
from typing import Any, BinaryIO

from docker.utils.socket import STDERR, frames_iter

#: ``sh -c SCRIPT sh SIGNAL [PID...]``: signal every process but pid 1, the PIDs given (the
#: processes the image started; without any: the oldest child of pid 1) and itself.
#: With KILL it stops (SIGSTOP) everything first so nothing can fork away, then kills,
#: and repeats until a pass finds nothing but zombies. Exit 0 when nothing is left.
SIGNAL_ALL = r"""
sig=$1; shift; me=$$; keep=" $* "
if [ $# = 0 ]; then
  best=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = 1 ] && continue; [ "$p" = "$me" ] && continue
    read -r line < "$d/stat" 2>/dev/null || continue
    set -- ${line##*) }
    [ "$2" = 1 ] || continue
    eval "st=\${20}"
    if [ -z "$best" ] || [ "$st" -lt "$best" ]; then best=$st; keep=" $p "; fi
  done
fi
if [ "$sig" != KILL ]; then
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; case $p in 1|"$me") continue;; esac; case $keep in *" $p "*) continue;; esac
    kill -"$sig" "$p" 2>/dev/null
  done
  exit 0
fi
i=0
while [ $i -lt 100 ]; do
  i=$((i+1)); live=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; case $p in 1|"$me") continue;; esac; case $keep in *" $p "*) continue;; esac
    kill -STOP "$p" 2>/dev/null
  done
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; case $p in 1|"$me") continue;; esac; case $keep in *" $p "*) continue;; esac
    read -r line < "$d/stat" 2>/dev/null || continue
    set -- ${line##*) }
    [ "$1" = Z ] && continue
    kill -KILL "$p" 2>/dev/null && live=1
  done
  [ $live = 0 ] && exit 0
done
exit 1
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
