"""Sandboxes set up ahead of their command: the local executor's ``exec_ahead``.

Setting up a bubblewrap sandbox (namespaces, a dozen mounts) costs a few milliseconds of
CPU, most of it in the kernel. A cell's verifier command is known before its subject ends:
its command line, environment and directories do not depend on what the subject does. So
while the subject runs, and only while every attempt of the process waits on its subject
(``progress.all_waiting``: no cell is doing harness work that this would slow down), one
thread of the process starts that sandbox's bwrap with ``--block-fd``: bwrap sets up the
sandbox and stops right before starting the command.

When the command's turn comes, ``LocalSandbox.exec`` uses the prepared sandbox only if the
command line it would build now is the same and every bound directory is still the same
directory (device and inode); it then puts bwrap and the sandbox's pid 1 under the lease's
limits and lets it go, so every process of the command starts inside them. Otherwise the
prepared sandbox is killed and the command starts as usual. A prepared sandbox runs
nothing unless released: it is killed when it is not used, when its lease ends, and with
the process (``--die-with-parent``, tied to the worker thread, which never ends).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence

from ...core import progress
from .process import wait_readable
from .stoppers import NamespaceStopper, parse_info

#: How long the worker waits before looking again while some attempt is doing harness work.
IDLE_POLL_SEC = 0.01
#: How long bwrap may take to set a sandbox up and report it (``--json-status-fd``).
SETUP_TIMEOUT_SEC = 10.0


class Prepared:
    """One command's bwrap, its sandbox set up and the command not yet started."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        block_fd: int,
        info: tuple[int, str],
        info_fd: int,
        signature: tuple[str, ...],
        sources: Mapping[str, int],
    ) -> None:
        self.proc = proc
        self._block_fd = block_fd
        self._info_fd = info_fd
        #: The command line it was started with, its descriptors' numbers left out.
        self.signature = signature
        #: Bound host directory -> a descriptor of it held since before the set-up: while it is
        #: open, a directory made at that path later can never have its inode number.
        self.sources = dict(sources)
        self.stopper = NamespaceStopper(proc, info_fd, info=info)

    def usable(self, signature: Sequence[str]) -> bool:
        """Still set up (its bwrap and its pid 1 waiting: bwrap reports before it sets up, which may
        still fail), for the same command line and the same directories."""
        if self.proc.poll() is not None or not self.stopper.pid1_alive() or tuple(signature) != self.signature:
            return False
        return all(_identity(path) == _held(fd) for path, fd in self.sources.items())

    def hold(self, hold: Callable[[int], None]) -> bool:
        """Put bwrap and the sandbox's pid 1 under ``hold`` (limits); False when the sandbox ended
        since ``usable``."""
        try:
            hold(self.proc.pid)
            hold(self.stopper.pid1)
        except ProcessLookupError:
            return False
        return True

    def release(self) -> None:
        """Let the command start (once ``hold`` put it under its limits). bwrap's status stays
        readable (``stopper.set_up``) until ``close``."""
        os.write(self._block_fd, b"x")
        info_fd, self._info_fd = self._info_fd, -1
        self._close_fds()
        self._info_fd = info_fd

    def close(self) -> None:
        """Once its command ended: close what it still holds."""
        self._close_fds()

    def discard(self) -> None:
        """Kill it (its command never started) and close everything it holds."""
        if not self.stopper.pid1:  # never reported its sandbox: bwrap's own group goes
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.stopper.kill()
        self._close_fds()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def _close_fds(self) -> None:
        for fd in (self._block_fd, self._info_fd, *self.sources.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._block_fd = self._info_fd = -1
        self.sources = {}


def start_prepared(
    argv: Sequence[str],
    signature: Sequence[str],
    *,
    block_read: int,
    block_write: int,
    info_read: int,
    info_write: int,
    env_fd: int,
    sources: Sequence[str],
) -> Prepared | None:
    """Start bwrap (``argv`` holds ``--block-fd block_read`` and ``--json-status-fd info_write``) and wait
    until the sandbox is set up; None (nothing left running) when bwrap fails or takes too long.

    Takes ownership of the five descriptors."""
    held = _hold_all(sources)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(block_read, info_write, env_fd),
            env={},  # the sandbox's pid 1 keeps its own environ: it must hold no host secret
        )
    except OSError:
        for fd in (block_read, block_write, info_read, info_write, env_fd, *(held or {}).values()):
            os.close(fd)
        return None
    for fd in (block_read, info_write, env_fd):
        os.close(fd)
    info = _read_info(info_read)
    prepared = Prepared(proc, block_write, info or (0, ""), info_read, tuple(signature), held or {})
    if info is None or held is None:
        prepared.discard()
        return None
    return prepared


def _read_info(fd: int) -> tuple[int, str] | None:
    """(host pid of the sandbox's pid 1, its pid namespace) from bwrap's ``--json-status-fd``, once all of
    it is written (bwrap writes it in several pieces); None if bwrap ends or stalls first."""
    deadline = time.monotonic() + SETUP_TIMEOUT_SEC
    data = b""
    while (left := deadline - time.monotonic()) > 0 and wait_readable(fd, left):
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
        if (info := parse_info(data)) is not None:
            return info
    return None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _held(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _hold_all(paths: Sequence[str]) -> dict[str, int] | None:
    """A descriptor (``O_PATH``) of each path; None (nothing left open) if one is missing."""
    held: dict[str, int] = {}
    try:
        for path in paths:
            held[path] = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        for fd in held.values():
            os.close(fd)
        return None
    return held


class AheadRequest:
    """One command to prepare for one sandbox: pending, then ready or failed, or cancelled."""

    def __init__(self, key: Hashable, make: Callable[[], Prepared | None]) -> None:
        self.key = key
        self._make = make
        self._lock = threading.Lock()
        self.state = "pending"
        self._prepared: Prepared | None = None

    def run(self) -> None:
        """On the worker: prepare it, unless its cell no longer wants it."""
        with self._lock:
            if self.state != "pending":
                return
            try:
                self._prepared = self._make()
            except Exception:  # preparing is an optimisation: the command then starts as usual
                self._prepared = None
            self.state = "ready" if self._prepared is not None else "failed"

    def take(self) -> Prepared | None:
        """On the cell's thread: the prepared sandbox, if any (a pending request is cancelled)."""
        with self._lock:
            prepared, self._prepared = self._prepared, None
            self.state = "taken"
            return prepared


class AheadWorker:
    """One thread per process running requests in order, each only once ``idle()`` holds."""

    def __init__(self, idle: Callable[[], bool] = progress.all_waiting) -> None:
        self._idle = idle
        self._cond = threading.Condition()
        self._pending: deque[AheadRequest] = deque()
        self._thread: threading.Thread | None = None

    def submit(self, request: AheadRequest) -> None:
        with self._cond:
            self._pending.append(request)
            if self._thread is None:
                # never ends: a prepared sandbox's bwrap dies with the thread that started it
                self._thread = threading.Thread(target=self._serve, name="maka-ahead", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                request = self._pending[0]
            if request.state != "pending":  # taken or cancelled meanwhile
                self._drop(request)
                continue
            if not self._idle():
                time.sleep(IDLE_POLL_SEC)
                continue
            self._drop(request)
            request.run()

    def _drop(self, request: AheadRequest) -> None:
        with self._cond:
            if self._pending and self._pending[0] is request:
                self._pending.popleft()


#: The process's worker (its thread starts with the first request).
WORKER = AheadWorker()


class AheadSlot:
    """A sandbox's command set up ahead (one at a time), matched by its ``key`` when it runs."""

    def __init__(self, worker: AheadWorker = WORKER) -> None:
        self._worker = worker
        self._request: AheadRequest | None = None

    def request(self, key: Hashable, make: Callable[[], Prepared | None]) -> None:
        """Have ``make()`` run on the worker when the process is idle (a request already made stands)."""
        if self._request is None:
            self._request = AheadRequest(key, make)
            self._worker.submit(self._request)

    @property
    def state(self) -> str | None:
        """The request's state (pending, ready, failed), None when there is none."""
        return self._request.state if self._request is not None else None

    def take(self, key: Hashable, signature: Callable[[], Sequence[str]]) -> Prepared | None:
        """The prepared sandbox for the command ``key``, if it is usable for the command line
        ``signature()`` would build now; one that is not is discarded. Other keys: None, and the
        request stands."""
        request = self._request
        if request is None or request.key != key:
            return None
        self._request = None
        prepared = request.take()
        if prepared is None:
            return None
        if prepared.usable(signature()):
            return prepared
        prepared.discard()
        return None

    def close(self) -> None:
        """Cancel the request, or kill what it prepared."""
        request, self._request = self._request, None
        prepared = request.take() if request is not None else None
        if prepared is not None:
            prepared.discard()
