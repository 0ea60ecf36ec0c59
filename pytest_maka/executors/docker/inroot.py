"""Read and rewrite an attempt container's resolver files as that container sees them, from the guard host.

The guard host (``guardhost``) shares the host's process table, so ``/proc/<pid>/root`` is
an attempt container's root. A plain path under it is not safe: a symbolic link the
subject left in its ``/etc`` would be followed from the guard host's own root (or, through
``/proc/1/root``, the host's). So this program first makes sure ``<pid>`` is still the
process whose network namespace it runs in (a reused process id is refused), then changes
its root to the container's (``chroot``: every link resolves inside the container, ``..``
stops at its root, and the container's ``/proc`` shows only the container's processes), and
only then opens the files, writing only regular ones.

This file is also the program, run by the packet logger's loop as
``python3 -I -S -c SOURCE PID read`` (prints resolv.conf in base64) or
``python3 -I -S -c SOURCE PID RESOLV HOSTS`` (``RESOLV``: ``resolv:`` and the new resolv.conf
in base64, so that an empty file is still a word of the logger's command line;
``HOSTS``: ``keep``, or ``strip:<base64>``, the marked lines of /etc/hosts replaced by those
given). Standard library only, no ``ctypes`` (its import alone costs more than the rest).
Exit codes: 0 done, 3 refused (the harness then uses an ``exec`` in the container).
"""

from __future__ import annotations

import binascii
import os
import stat
import sys

HOSTS_MARK = "# maka-sidecar"
REFUSED = 3


def enter_root(pid: int) -> None:
    """Make the sandbox's root this process's root (its network namespace must be ours)."""
    if os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino:
        raise OSError(f"process {pid} is no longer the sandbox's")
    os.chdir(f"/proc/{pid}/root")
    os.chroot(".")
    os.chdir("/")


def open_regular(path: str, mode: int = os.O_RDWR) -> int:
    """A descriptor of the regular file ``path`` (a pipe, device or directory is refused)."""
    fd = os.open(path, mode | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"not a regular file: {path}")
    return fd


def read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    return data


def replace(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    view = memoryview(data)
    while view:
        view = view[os.pwrite(fd, view, len(data) - len(view)) :]


def hosts_text(old: str, add: str) -> str:
    """/etc/hosts without the marked lines, with ``add`` after it."""
    kept = [line for line in old.splitlines() if HOSTS_MARK not in line]
    return "".join(f"{line}\n" for line in kept) + add


def rewrite(resolv: bytes, hosts: str) -> None:
    """Write resolv.conf and, unless ``hosts`` is ``keep``, /etc/hosts (in the root entered)."""
    fd = open_regular("/etc/resolv.conf")
    try:
        replace(fd, resolv)
    finally:
        os.close(fd)
    if hosts == "keep":
        return
    add = binascii.a2b_base64(hosts.partition(":")[2]).decode()
    fd = open_regular("/etc/hosts")
    try:
        replace(fd, hosts_text(read_all(fd).decode(errors="replace"), add).encode())
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    try:
        pid = int(argv[0])
        enter_root(pid)
        if argv[1] == "read":
            fd = open_regular("/etc/resolv.conf", os.O_RDONLY)
            print(binascii.b2a_base64(read_all(fd), newline=False).decode())
            return 0
        kind, _, resolv = argv[1].partition(":")
        if kind != "resolv":
            raise ValueError(f"expected read or resolv:<base64>, got {argv[1][:20]!r}")
        rewrite(binascii.a2b_base64(resolv), argv[2])
    except (OSError, ValueError, IndexError, binascii.Error) as exc:
        print(exc, file=sys.stderr)
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
