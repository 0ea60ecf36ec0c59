"""Run one process with a deadline, a whole-tree stop and capped output streamed to files.

Generic part of the local executor: how the process tree is signalled is delegated to a
``Stopper`` (a pid namespace for bwrap, a process group otherwise), so this module only
knows about deadlines, pipes and files.
"""

from __future__ import annotations

import os
import select
import selectors
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from ...core import cancel
from ...core.errors import InfraError
from ..base import ExecResult

_CHUNK = 64 * 1024
#: How long to wait for the output pipes to close once the process tree is gone.
_PIPE_CLOSE_SEC = 2.0


class Stopper(Protocol):
    """Knows how to find and signal every process a started command created."""

    def terminate(self) -> None:
        """Ask every process of the tree to stop (SIGTERM)."""
        ...

    def kill(self) -> None:
        """Force every process of the tree to stop (SIGKILL); returns once they are gone."""
        ...

    def reap(self) -> None:
        """After a normal exit: make sure nothing the command left behind survives."""
        ...

    def set_up(self) -> bool:
        """After a normal exit: whether the command ran (False: its sandbox could not be set up)."""
        ...


@dataclass
class _Sink:
    """One output stream: a pipe drained into a file up to a byte cap."""

    fd: int
    file: BinaryIO
    cap: int
    written: int = 0
    truncated: bool = False

    def feed(self, data: bytes) -> None:
        room = self.cap - self.written
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self.file.write(data)
            self.written += len(data)


class OutputPump:
    """A thread draining pipes into capped files; the rest is read and dropped, never buffered.

    The thread blocks until output, end-of-file or ``finish`` wakes it (a pipe of its own):
    it never polls, so hundreds of quiet commands in flight cost no CPU.
    """

    def __init__(self, sinks: Sequence[_Sink]) -> None:
        self._sinks = {s.fd: s for s in sinks}
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="maka-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with selectors.DefaultSelector() as sel:
            for fd in self._sinks:
                sel.register(fd, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            open_fds = set(self._sinks)
            while open_fds:
                for key, _ in sel.select():
                    if key.fd == self._wake_r:
                        return
                    data = os.read(key.fd, _CHUNK)
                    if data:
                        self._sinks[key.fd].feed(data)
                    else:
                        sel.unregister(key.fd)
                        open_fds.discard(key.fd)

    def finish(self, timeout: float) -> None:
        """Wait for end-of-file on every pipe (at most ``timeout``), then stop draining."""
        try:
            self._thread.join(timeout)
            if self._thread.is_alive():  # a survivor holds a pipe open: stop reading it
                os.write(self._wake_w, b"x")
            self._thread.join()
        finally:
            os.close(self._wake_r)
            os.close(self._wake_w)
        for sink in self._sinks.values():
            sink.file.flush()


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` exists (also one of another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_readable(fd: int, timeout: float) -> bool:
    """True once ``fd`` is readable (a pidfd: its process has ended), False after ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0.0) * 1000))


def wait_for(proc: subprocess.Popen[bytes], timeout: float | None) -> bool:
    """True if ``proc`` exited within ``timeout`` seconds (None: wait forever).

    Waits on a pidfd when the kernel has them: ``Popen.wait(timeout)`` polls with growing
    sleeps and would add milliseconds to every short command.
    """
    if timeout is None or proc.poll() is not None:
        proc.wait()
        return True
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        if not wait_readable(pidfd, timeout):
            return False
    finally:
        os.close(pidfd)
    proc.wait()
    return True


def run_process(
    argv: Sequence[str],
    *,
    timeout_sec: float | None,
    stdout_path: Path,
    stderr_path: Path,
    max_output_bytes: int,
    grace_sec: float,
    make_stopper: Callable[[subprocess.Popen[bytes]], Stopper],
    pass_fds: Sequence[int] = (),
    hold: Callable[[int], None] | None = None,
) -> ExecResult:
    """Run ``argv`` in its own session; on timeout or interrupt stop the whole tree.

    Returns only when the stopper reports every process gone and the output is flushed.
    With ``hold``, the process waits at a gate (a host ``sh`` reading a pipe) until
    ``hold(pid)`` has returned, e.g. after moving it into a cgroup, and only then execs
    ``argv``: nothing it starts can run outside what ``hold`` set up.
    """
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    gate: tuple[int, int] | None = os.pipe() if hold is not None else None
    if gate is not None:  # the gate is the shim's stdin (EOF: the harness died, never start)
        argv = ["/bin/sh", "-c", 'read _ && exec "$@" </dev/null', "maka-gate", *argv]
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=gate[0] if gate is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                env={},  # the sandbox's pid 1 keeps its own environ: it must hold no host secret
            )
        finally:
            if gate is not None:
                os.close(gate[0])
        if gate is not None and hold is not None:
            _open_gate(proc, gate[1], hold)
        return _supervise(proc, out, err, started, timeout_sec, max_output_bytes, grace_sec, make_stopper(proc))


def run_started(
    proc: subprocess.Popen[bytes],
    release: Callable[[], None],
    *,
    timeout_sec: float | None,
    stdout_path: Path,
    stderr_path: Path,
    max_output_bytes: int,
    grace_sec: float,
    stopper: Stopper,
) -> ExecResult:
    """``run_process`` for a process started ahead, already under its limits and held until
    ``release()`` lets it go: the deadline and the output count from the release."""
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        started = time.monotonic()
        try:
            release()
        except BaseException:
            stopper.kill()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            raise
        return _supervise(proc, out, err, started, timeout_sec, max_output_bytes, grace_sec, stopper)


def _supervise(
    proc: subprocess.Popen[bytes],
    out: BinaryIO,
    err: BinaryIO,
    started: float,
    timeout_sec: float | None,
    max_output_bytes: int,
    grace_sec: float,
    stopper: Stopper,
) -> ExecResult:
    """Drain the output into ``out`` and ``err`` until the tree is gone; stop it at the deadline."""
    assert proc.stdout is not None and proc.stderr is not None
    sinks = [_Sink(proc.stdout.fileno(), out, max_output_bytes), _Sink(proc.stderr.fileno(), err, max_output_bytes)]
    pump = OutputPump(sinks)
    pump.start()
    timed_out, ran = False, True
    try:
        with cancel.on_cancel(stopper.kill):  # a cell cancelled on a pool thread (Ctrl-C)
            finished = wait_for(proc, timeout_sec)
        if finished:
            ran = stopper.set_up()
            stopper.reap()
        else:
            timed_out = True
            _stop(proc, stopper, grace_sec)
    except BaseException:
        stopper.kill()
        raise
    finally:
        pump.finish(_PIPE_CLOSE_SEC)
        proc.stdout.close()
        proc.stderr.close()
    if not ran:
        err.flush()
        raise never_set_up(proc.returncode, Path(err.name).read_bytes()[-4096:])
    return ExecResult(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        stdout_truncated=sinks[0].truncated,
        stderr_truncated=sinks[1].truncated,
    )


def never_set_up(code: int | None, stderr: bytes) -> InfraError:
    """The error of a command whose sandbox could not be set up: the host's failure, with what
    bwrap said (the last ``bwrap:`` line of its output)."""
    said = [line for line in stderr.decode(errors="replace").splitlines() if line.startswith("bwrap:")]
    why = said[-1] if said else f"bwrap exited {code} before running it"
    return InfraError(f"the command's sandbox could not be set up: {why}")


def _open_gate(proc: subprocess.Popen[bytes], gate: int, hold: Callable[[int], None]) -> None:
    """Run ``hold(pid)`` while the process waits; kill it (never let it go) if that fails."""
    try:
        hold(proc.pid)
        os.write(gate, b"\n")  # the line opens the gate; EOF alone (the harness died) never does
    except BaseException:
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        raise
    finally:
        os.close(gate)


def _stop(proc: subprocess.Popen[bytes], stopper: Stopper, grace_sec: float) -> None:
    """SIGTERM the tree, give it ``grace_sec`` to exit, then SIGKILL whatever is left."""
    stopper.terminate()
    if not wait_for(proc, grace_sec):
        stopper.kill()
    stopper.reap()
