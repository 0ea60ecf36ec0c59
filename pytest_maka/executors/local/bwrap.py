"""Build bubblewrap command lines (what runs inside them is stopped by ``stoppers``).

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

import os
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..hostfs import scan_tree

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
