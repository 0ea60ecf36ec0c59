"""Live processes in a local sandbox (``LocalSandbox.spawn``): pipes, wait, kill of the whole tree."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Sequence
from typing import IO, Any

from .process import Stopper, never_set_up, wait_for


class LocalProcess:
    """A process started in its own session; its tree is found and stopped by a ``Stopper``."""

    def __init__(
        self,
        argv: Sequence[str],
        make_stopper: Callable[[Any], Stopper],
        *,
        pass_fds: Sequence[int] = (),
        hold: Callable[[int], None] | None = None,
    ) -> None:
        if hold is not None:  # a host sh waits for one line on stdin until hold(pid) has run (see run_process)
            argv = ["/bin/sh", "-c", 'read _ && exec "$@"', "maka-gate", *argv]
        self._proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            env={},  # the sandbox's pid 1 keeps its own environ: it must hold no host secret
        )
        assert self._proc.stdin and self._proc.stdout and self._proc.stderr
        self.stdin: IO[bytes] = self._proc.stdin
        self.stdout: IO[bytes] = self._proc.stdout
        self.stderr: IO[bytes] = self._proc.stderr
        if hold is not None:
            try:
                hold(self._proc.pid)
            except BaseException:
                self._proc.kill()
                self._proc.wait()
                raise
            self.stdin.write(b"\n")
            self.stdin.flush()
        self._stopper = make_stopper(self._proc)
        self._on_end: list[Callable[[], None]] = []
        self._ended = False
        self._killed = False  # stopped by the harness: its sandbox may never have been set up
        self._set_up = True

    @property
    def pid(self) -> int:
        return self._proc.pid

    def on_end(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the tree is gone (e.g. close the info pipe)."""
        self._on_end.append(callback)

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None when still running after ``timeout``; leftovers are stopped on exit."""
        if not wait_for(self._proc, timeout):
            return None
        self._end(lambda: self._stopper.reap())
        if not self._set_up:
            raise never_set_up(self._proc.returncode, b"")
        return self._proc.returncode

    def kill(self, grace_sec: float = 1.0) -> None:
        """SIGTERM the tree, SIGKILL after ``grace_sec``; returns once nothing of it is left."""
        if self._proc.poll() is None:
            self._killed = True
            self._stopper.terminate()
            if not wait_for(self._proc, grace_sec):
                self._stopper.kill()
        self._end(lambda: self._stopper.reap())

    def _end(self, reap: Callable[[], None]) -> None:
        if self._ended:
            return
        self._ended = True
        self._set_up = self._killed or self._stopper.set_up()  # before the callbacks close bwrap's status
        reap()
        self._proc.wait()
        for callback in self._on_end:
            with contextlib.suppress(OSError):
                callback()
        with contextlib.suppress(OSError):
            self.stdin.close()


def close_fd(fd: int) -> Callable[[], None]:
    return lambda: os.close(fd)
