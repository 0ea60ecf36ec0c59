"""The confinement a ``docker exec`` gets, given to a private verification command (used by ``verdict_ns``).

Standard library only, imported by the helper before it enters the container:

- the container's seccomp filters, copied from its main process with
  ``PTRACE_SECCOMP_GET_FILTER`` (a short ptrace stop of that process) and installed as they
  are, the oldest first;
- its ``no_new_privs`` flag (as its main process has it: the runtime sets it from the
  container's ``no-new-privileges``);
- its resource limits: the runtime's (the parent of the main process, which a ``docker exec``
  inherits) with the container's ``HostConfig.Ulimits`` over them;
- its AppArmor profile, asked for at exec (``/proc/thread-self/attr/exec``) where the host has
  AppArmor.
"""

from __future__ import annotations

import ctypes
import os
import resource

PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_SECCOMP_GET_FILTER = 17, 0x4206, 0x4207, 0x420C
PTRACE_EVENT_STOP = 128
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SIGTRAP = 5
#: Docker's ulimit names (``docker run --ulimit``) and the Linux limits they set (the generic
#: numbers of x86 and arm; Python's ``resource`` names only some of them).
ULIMITS = {
    "cpu": 0,
    "fsize": 1,
    "data": 2,
    "stack": 3,
    "core": 4,
    "rss": 5,
    "nproc": 6,
    "nofile": 7,
    "memlock": 8,
    "as": 9,
    "locks": 10,
    "sigpending": 11,
    "msgqueue": 12,
    "nice": 13,
    "rtprio": 14,
    "rttime": 15,
}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


class Traced(Exception):
    """The container's main process is traced by another process (none of the harness's)."""


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _status(pid: int, key: str) -> str:
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()
    raise KeyError(key)


def read_filters(pid: int) -> list[bytes]:
    """The seccomp filters of process ``pid`` (the host's number), the newest first."""
    if _status(pid, "Seccomp") != "2":
        return []
    if _libc.ptrace(PTRACE_SEIZE, pid, None, None) < 0:
        err = _fail("ptrace the container's main process")
        if _status(pid, "TracerPid") != "0":
            raise Traced("the container's main process is traced by one of its processes") from err
        raise err
    resent = 0
    try:
        if _libc.ptrace(PTRACE_INTERRUPT, pid, None, None) < 0:
            raise _fail("interrupting the container's main process")
        _, status = os.waitpid(pid, 0)
        if os.WIFSTOPPED(status) and status >> 16 != PTRACE_EVENT_STOP:
            resent = os.WSTOPSIG(status)  # a signal was on its way to it: it gets it at the detach
        filters: list[bytes] = []
        while True:
            count = _libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, len(filters), None)
            if count < 0:
                if ctypes.get_errno() == 2:  # ENOENT: no filter at that index
                    return filters
                raise _fail("reading the container's seccomp filter")
            program = ctypes.create_string_buffer(count * 8)
            if _libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, len(filters), program) != count:
                raise _fail("reading the container's seccomp filter")
            filters.append(program.raw)
    finally:
        _libc.ptrace(PTRACE_DETACH, pid, None, ctypes.c_void_p(resent))


def install_filters(filters: list[bytes]) -> None:
    """Install ``filters`` (the newest first, as read) on this thread, the oldest first."""
    for program in reversed(filters):
        buffer = ctypes.create_string_buffer(program, len(program))
        prog = _Filter(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) < 0:
            raise _fail("installing the container's seccomp filter")


def no_new_privileges(pid: int) -> bool:
    """Whether process ``pid`` (the container's main one) has ``no_new_privs``."""
    return _status(pid, "NoNewPrivs") == "1"


def set_no_new_privileges() -> None:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0:
        raise _fail("no_new_privs")


def limits(pid: int, ulimits: dict[str, list[int]]) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) of a ``docker exec`` into the container whose main process is
    ``pid``: its runtime's (that process's parent), ``ulimits`` over them."""
    runtime = int(_status(pid, "PPid"))
    found = {res: resource.prlimit(runtime, res) for res in ULIMITS.values()}
    for name, (soft, hard) in ulimits.items():
        found[ULIMITS[name]] = (soft, hard)
    return [(res, *pair) for res, pair in sorted(found.items())]


def set_limits(wanted: list[tuple[int, int, int]]) -> None:
    for res, soft, hard in wanted:
        resource.setrlimit(res, (soft, hard))


def apparmor_exec(profile: str) -> None:
    """Ask for AppArmor ``profile`` at the next exec (only where the host has AppArmor; untested here)."""
    for path in ("/proc/thread-self/attr/apparmor/exec", "/proc/thread-self/attr/exec"):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            os.write(fd, f"exec {profile}".encode())
        finally:
            os.close(fd)
        return
    raise OSError(f"AppArmor profile {profile!r}: the kernel has no /proc/thread-self/attr/exec")
