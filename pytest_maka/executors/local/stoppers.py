"""Stop what runs in a local sandbox: everything in a bwrap pid namespace (learnt from bwrap's
``--json-status-fd``, which also tells whether the command ran at all), or a process group
without a sandbox.

With ``--unshare-pid`` the sandbox's pid 1 is bwrap itself; when the command exits, pid 1 exits
and the kernel kills and reaps every other process of the namespace before the outer bwrap sees
the exit. Killing pid 1 has the same effect, immediately.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable

from .process import wait_for, wait_readable


def status_records(data: bytes) -> list[dict[str, object]]:
    """The complete JSON objects bwrap wrote to ``--json-status-fd`` so far, in order: first the
    sandbox's pid 1 and namespaces, then ``exit-code`` once the command ran and ended (never when
    the sandbox could not be set up)."""
    text, records, at = data.decode(errors="replace"), [], 0
    decoder = json.JSONDecoder()
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        try:
            record, at = decoder.raw_decode(text, at)
        except ValueError:
            return records  # the end, or not all written yet
        if isinstance(record, dict):
            records.append(record)


def parse_info(data: bytes) -> tuple[int, str] | None:
    """(host pid of the sandbox's pid 1, its pid namespace link text) from what bwrap wrote to
    ``--json-status-fd``; None while that is not all there yet."""
    with contextlib.suppress(ValueError, KeyError, TypeError, IndexError):
        info = status_records(data)[0]
        return int(info["child-pid"]), f"pid:[{int(info['pid-namespace'])}]"  # type: ignore[call-overload]
    return None


class NamespaceStopper:
    """Stops everything in a bwrap pid namespace; the namespace is learnt from ``--json-status-fd``."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        info_read_fd: int,
        info: tuple[int, str] | None = None,
        status: Callable[[], bytes | None] | None = None,
    ) -> None:
        """``info``: what bwrap reported, when the caller has read it already. ``status``: where
        its ``--json-status-fd`` output is read when another reader owns it (a TUN guard)."""
        self._status = status
        self._proc = proc
        self._info_fd = info_read_fd
        self._info: tuple[int, str] | None = info
        self._info_data = b""  # what bwrap wrote so far (it writes its report in several pieces)

    @property
    def pid1(self) -> int:
        """The host pid of the sandbox's pid 1 (0 while bwrap has not reported it)."""
        info = self._namespace()
        return info[0] if info else 0

    def pid1_alive(self) -> bool:
        """Whether the sandbox's pid 1 still runs (not a zombie)."""
        info = self._namespace()
        return info is not None and _alive_in(info[0], info[1])

    def _namespace(self) -> tuple[int, str] | None:
        """(host pid of the sandbox's pid 1, pid namespace link text), once bwrap reported it."""
        if self._info is None:
            self._read_status()
            self._info = parse_info(self._info_data)
        return self._info

    def _read_status(self) -> None:
        os.set_blocking(self._info_fd, False)
        with contextlib.suppress(OSError):
            while chunk := os.read(self._info_fd, 65536):
                self._info_data += chunk

    def set_up(self) -> bool:
        """After bwrap exited on its own: whether the command ran at all. bwrap reports its exit
        code only then; a sandbox it could not set up (a bind source gone, no namespaces left)
        ends with none: the host's failure, never the command's."""
        if self._status is not None:
            data = self._status()
            return data is None or any("exit-code" in record for record in status_records(data))
        self._read_status()
        return any("exit-code" in record for record in status_records(self._info_data))

    def _members(self) -> list[int]:
        info = self._namespace()
        return namespace_pids(info[1]) if info else []

    def terminate(self) -> None:
        info = self._namespace()
        if info is None:  # not set up yet: the outer bwrap takes the sandbox down with it
            _killpg(self._proc.pid, signal.SIGTERM)
            return
        for pid in self._members():
            if pid != info[0]:  # pid 1 (bwrap) would just die and skip the grace period
                _kill(pid, signal.SIGTERM)

    def kill(self) -> None:
        info = self._namespace()
        if info is not None and _pid_namespace(info[0]) == info[1]:
            _kill(info[0], signal.SIGKILL)  # pid 1 dies: the kernel kills the namespace
        if not wait_for(self._proc, 2.0):
            _killpg(self._proc.pid, signal.SIGKILL)  # --die-with-parent does the rest
            self._proc.wait()
        self.reap()

    def reap(self) -> None:
        """Wait (bounded) until no live process is left in the namespace.

        The outer bwrap exits as soon as it knows the command's exit code, possibly before
        the sandbox's pid 1 has finished killing the rest of the namespace. The kernel keeps
        pid 1 alive until every other member is gone, so pid 1 dead means the namespace is.
        """
        info = self._namespace()
        deadline = time.monotonic() + 5.0
        if info is not None and _wait_gone(info[0], info[1], 5.0):
            return
        while time.monotonic() < deadline:
            if info is not None and not _alive_in(info[0], info[1]):
                return
            if info is None and not self._members():
                return
            time.sleep(0.0005)


class GroupStopper:
    """Best effort for sandbox="none": signal the process group (setsid escapes it)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def terminate(self) -> None:
        _killpg(self._proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        _killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def reap(self) -> None:
        _killpg(self._proc.pid, signal.SIGKILL)

    def set_up(self) -> bool:
        """Nothing to set up without a sandbox."""
        return True


def namespace_pids(ns_link: str) -> list[int]:
    """Host pids of the live processes whose pid namespace is ``ns_link`` (``pid:[N]``)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _pid_namespace(int(name)) == ns_link and not _is_zombie(int(name)):
            pids.append(int(name))
    return pids


def _wait_gone(pid: int, ns_link: str, timeout: float) -> bool:
    """Wait (on a pidfd, no polling) until ``pid`` of namespace ``ns_link`` has exited; False when
    that cannot be waited for this way (no pidfd here) or it outlived ``timeout``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):
        return False
    try:
        # checked after opening: the descriptor is that process's
        return not _alive_in(pid, ns_link) or wait_readable(fd, timeout)
    finally:
        os.close(fd)


def _alive_in(pid: int, ns_link: str) -> bool:
    """``pid`` is a live (not zombie) process of the pid namespace ``ns_link``."""
    return _pid_namespace(pid) == ns_link and not _is_zombie(pid)


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
