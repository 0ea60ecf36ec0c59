"""Build bubblewrap command lines and stop what runs inside them.

Facts this module relies on (checked on Linux 6.x, bwrap 0.8):
- bwrap cannot create mount points under a read-only bind of ``/``, so the root is a tmpfs
  and the host's system directories are bound read-only into it.
- With ``--unshare-pid`` the sandbox's pid 1 is bwrap itself; when the command exits, pid 1
  exits and the kernel kills and reaps every other process of the namespace before the
  outer bwrap sees the exit. Killing pid 1 has the same effect, immediately.
- When bwrap runs as root it keeps every capability unless told otherwise, and uid 0 can
  write most of ``/proc/sys`` by plain file permissions: hence ``--cap-drop ALL`` and a
  read-only ``/proc/sys``.
- uid 0 without capabilities still reads what its owner bits allow (a 0600 file of root's,
  e.g. the Docker engine's key under /etc/docker): every entry of the bound system directories
  that an unprivileged user could not read (a file without the "other" read bit, a directory
  without "other" read and search) is hidden, so the sandbox shows only world-readable host
  files. The scan runs once per process (about a second for 150,000 entries).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..hostfs import scan_tree
from .process import wait_for, wait_readable

#: Host system directories bound read-only into the sandbox (symlinked when the host's are links).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Secrets under /etc hidden from the sandbox (files become empty, directories empty tmpfs).
MASKED_PATTERNS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
)
#: Root-writable /proc entries covered read-only (uid 0 may write them without capabilities).
PROC_COVERED = ("/proc/sys", "/proc/sysrq-trigger")
#: Sandbox paths that belong to the sandbox's own plumbing, never to uploads.
RESERVED_TOPS = frozenset({"proc", "dev", "sys", "tmp"})

NAMESPACE_FLAGS = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--new-session",
    "--cap-drop",
    "ALL",
)


@dataclass(frozen=True)
class HostLayout:
    """What of the host gets bound, computed once per process (the hot path only reads it)."""

    #: (path, symlink target or None) for each existing system directory.
    system: tuple[tuple[str, str | None], ...]
    masked_files: tuple[str, ...]
    masked_dirs: tuple[str, ...]
    proc_covered: tuple[str, ...]
    #: Top-level host entries for sandbox="none": (path, symlink target or None, is_dir).
    top_level: tuple[tuple[str, str | None, bool], ...]
    #: Where /etc/resolv.conf really points when that is outside the bound directories.
    resolv_target: str | None

    @property
    def system_tops(self) -> frozenset[str]:
        return frozenset(p.lstrip("/") for p, _ in self.system)


@cache
def host_layout() -> HostLayout:
    """Inspect the host once: which system directories exist and which are symlinks."""
    system = tuple((p, _link(p)) for p in SYSTEM_DIRS if os.path.lexists(p))
    masked = [p for p in MASKED_PATTERNS if os.path.lexists(p) and not os.path.islink(p)]
    for path, target in system:
        if target is None:
            masked += [p for p in not_world_readable(path) if not _under_any(p, masked)]
    top = []
    with os.scandir("/") as it:
        for entry in sorted(it, key=lambda e: e.name):
            if entry.name not in {"proc", "dev"}:
                top.append((entry.path, _link(entry.path), entry.is_dir(follow_symlinks=False)))
    resolv = os.path.realpath("/etc/resolv.conf") if os.path.islink("/etc/resolv.conf") else None
    if resolv and (not os.path.exists(resolv) or _under_any(resolv, [p for p, _ in system])):
        resolv = None
    return HostLayout(
        system=system,
        masked_files=tuple(p for p in masked if not os.path.isdir(p)),
        masked_dirs=tuple(p for p in masked if os.path.isdir(p)),
        proc_covered=tuple(p for p in PROC_COVERED if os.path.exists(p)),
        top_level=tuple(top),
        resolv_target=resolv,
    )


def not_world_readable(root: str) -> list[str]:
    """Entries under ``root`` an unprivileged user could not read: files without the "other" read
    bit, directories without "other" read and search (their content is not walked). Links are
    left alone: what they point to is checked where it lies, if it is bound at all."""
    found: list[str] = []
    for path, st in scan_tree(root, lambda _, st: st.st_mode & 0o005 == 0o005):
        if stat.S_ISDIR(st.st_mode):
            if st.st_mode & 0o005 != 0o005:
                found.append(path)
        elif not stat.S_ISLNK(st.st_mode) and not st.st_mode & 0o004:
            found.append(path)
    return sorted(found)


@cache
def executable() -> str:
    """bwrap's absolute path, found once: the gate's sh then execs it without a PATH search
    (a failed execve per PATH entry before it, for every command of every sandbox)."""
    return shutil.which("bwrap") or "bwrap"


def _link(path: str) -> str | None:
    return os.readlink(path) if os.path.islink(path) else None


def _under_any(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def isolated_prefix(layout: HostLayout, empty_file: Path, ro_binds: Iterable[str], tmpfs_bytes: int) -> list[str]:
    """The static part of a sandbox="bwrap" command line: namespaces and the read-only host.

    The root and /tmp are tmpfs of at most ``tmpfs_bytes`` each (their pages also count
    against the sandbox's memory limit).
    """
    size = ["--size", str(tmpfs_bytes)]
    argv = [executable(), "--die-with-parent", *NAMESPACE_FLAGS, *size, "--tmpfs", "/"]
    for path, target in layout.system:
        argv += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
    for path in layout.masked_files:
        argv += ["--ro-bind", str(empty_file), path]
    for path in layout.masked_dirs:
        argv += ["--tmpfs", path, "--remount-ro", path]
    argv += ["--proc", "/proc"]
    for path in layout.proc_covered:
        argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", *size, "--tmpfs", "/tmp"]
    for path in ro_binds:
        argv += ["--ro-bind", path, path]
    return argv


def open_prefix(layout: HostLayout, taken: Iterable[str], ro_binds: Iterable[str]) -> list[str]:
    """The static part of a sandbox="none" command line: the host's directories read-write.

    ``taken`` are the top-level names the task's own paths occupy (e.g. ``app``, ``logs``).
    """
    taken = set(taken)
    argv = [executable(), "--die-with-parent", "--tmpfs", "/"]
    for path, target, is_dir in layout.top_level:
        if path.lstrip("/") in taken:
            continue
        if target is not None:
            argv += ["--symlink", target, path]
        elif is_dir or os.path.isfile(path):
            argv += ["--bind", path, path]
    argv += ["--dev-bind", "/dev", "/dev", "--bind", "/proc", "/proc"]
    for path in ro_binds:
        argv += ["--ro-bind", path, path]
    return argv


def command_argv(
    prefix: list[str],
    *,
    binds: Mapping[str, Path],
    network: bool,
    isolated: bool,
    resolv_target: str | None,
    cwd: str,
    command: str,
    info_fd: int | None,
    env_fd: int,
    extra_args: Iterable[str] = (),
    wrapper: str | None = None,
    block_fd: int | None = None,
) -> list[str]:
    """The per-exec part: network, task binds (in order), working directory, environment.

    The environment is read by bwrap from ``env_fd`` (see ``env_file``), never put on the
    command line, where any user of the host could read it (``ps``, /proc/PID/cmdline).
    ``wrapper`` is a shell script run instead of the command, which it gets as ``$1``.
    ``block_fd``: bwrap sets the sandbox up, then waits for a byte on it before the command.
    """
    argv, extra_args = list(prefix), tuple(extra_args)
    if isolated and not network:
        argv.append("--unshare-net")
    if isolated and network and resolv_target:
        argv += ["--ro-bind", resolv_target, resolv_target]
    for dest, src in binds.items():
        argv += ["--bind", str(src), dest]
    argv += extra_args
    if info_fd is not None:  # the sandbox's pid 1 and namespace, then the exit code if the command ran
        guarded = "--json-status-fd" in extra_args  # a TUN guard reads it: the pid 1 and namespace only
        argv += ["--info-fd" if guarded else "--json-status-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    argv += ["--chdir", cwd, "--clearenv", "--args", str(env_fd)]
    argv += ["--", "/bin/sh", "-c", command] if wrapper is None else ["--", "/bin/sh", "-c", wrapper, "maka", command]
    return argv


def env_file(env: Mapping[str, str]) -> int:
    """A sealed-off, unlinked in-memory file holding ``--setenv K V`` for bwrap's ``--args``.

    Returns a file descriptor positioned at the start; the caller passes it to bwrap and
    closes it. Only processes that hold the descriptor (bwrap) can read it.
    """
    payload = bytearray()
    for key, value in env.items():
        if "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"environment variable {key!r} cannot be passed (NUL or '=' in it)")
        payload += b"--setenv\0" + key.encode() + b"\0" + value.encode("utf-8", "surrogateescape") + b"\0"
    fd = os.memfd_create("maka-env", os.MFD_CLOEXEC)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


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
