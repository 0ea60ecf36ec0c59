"""Run one verification command in a private copy of a container's mount namespace (a script).

Run by the harness on the engine's host, as root, with the harness's own interpreter
(``python -I verdict_ns.py SPEC_JSON``); it imports only the standard library and its sibling
``verdict_confine``, all of it before it enters the container, so no file of the container is
ever loaded into it. Steps:

1. open the container's namespaces (pid, net, ipc, uts, cgroup, mnt) by its main process,
   and a detached copy (``open_tree``) of each host directory of the verdict channel; read the
   confinement of a ``docker exec`` (``verdict_confine``: seccomp filters, ``no_new_privs``,
   resource limits);
2. enter the container's mount namespace and pin the channel's mount points there (each
   bound onto itself: a process of the container can then neither remove nor rename them,
   which would detach the private mounts below);
3. ``unshare`` a private copy of that namespace and attach the host directories at
   ``/tests`` and ``/logs/verifier`` in it: nothing in the container's own namespace sees them;
4. fork (the child is in the container's pid namespace), join the container's cgroups (and
   the verification's own, by which the harness ends its leftovers), take the container's
   capability bounding set plus one capability its processes lack (so none of them passes the
   kernel's ptrace access check for ``/proc/<pid>/root`` of the verification), become the
   user, change to the working directory, take the container's seccomp filters, limits,
   ``no_new_privs`` and AppArmor profile, and exec ``sh -c COMMAND`` with the given variables.

The exit status is the command's (128 + signal when killed; 126/127 when the container's
``sh`` cannot run, as a runtime says); 125 and a line on stderr when a step of the set-up
failed, 124 when that step failed because a mount point is not a directory (a link the
subject planted).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import warnings  # noqa: F401  (os.execvpe imports it on its first call: loaded here, never in the container)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the harness's own sibling module
from verdict_confine import (
    Traced,
    apparmor_exec,
    install_filters,
    limits,
    no_new_privileges,
    read_filters,
    set_limits,
    set_no_new_privileges,
)

CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE = 1, 0o2000000, 0x8000
AT_EMPTY_PATH, AT_FDCWD = 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same number on every architecture since 5.2
PR_SET_PDEATHSIG, SIGKILL = 1, 9
PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE = 8, 24, 47, 2
CAP_VERSION_3 = 0x20080522
SETUP_FAILED, SUBJECT_CHANGED = 125, 124
NAMESPACES = ("ipc", "uts", "net", "cgroup", "pid")
_libc = ctypes.CDLL(None, use_errno=True)


class NotADirectory(Exception):
    """A component of the channel's mount points is not a directory in the container."""


#: The host file the set-up reports to (opened before anything else, closed on exec: nothing the
#: command runs can write it): ``exec`` just before the command starts, else the failure.
_report = [2]


def _say(line: str) -> None:
    os.write(_report[0], (line + "\n").encode())


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _setns(fd: int, what: str) -> None:
    _check(_libc.setns(fd, 0), f"setns {what}")


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    _check(_libc.mount(src, target.encode(), None, ctypes.c_ulong(flags), None), f"mount {target}")


def _open_tree(path: str, dir_fd: int = AT_FDCWD, flags: int = 0) -> int:
    flags |= OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    return _check(_libc.syscall(SYS_OPEN_TREE, dir_fd, path.encode(), flags), f"open_tree {path}")


def _attach(tree: int, target: int, what: str) -> None:
    """Attach the detached mount ``tree`` on the directory open as ``target`` (no path is resolved)."""
    flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
    _check(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", target, b"", flags), f"move_mount {what}")


def _walk(path: str) -> int:
    """An O_PATH descriptor of ``path``, every component a directory and none a link (else the
    mount would land where the link points)."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = ""
    for part in path.strip("/").split("/"):
        walked += "/" + part
        try:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except (NotADirectoryError, FileNotFoundError) as exc:
            raise NotADirectory(f"{walked} is not a directory (the subject replaced it): {exc.strerror}") from None
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _pin(targets: list[str], mounted: set[str]) -> None:
    """Bind each target and each of its parents onto itself in the container's namespace (walked
    without following links): its processes can then neither remove nor rename them."""
    for target in targets:
        parts = target.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:i])
            if path in mounted:
                continue
            fd = _walk(path)
            try:
                tree = _open_tree("", fd, AT_EMPTY_PATH)
                _attach(tree, fd, f"{path} onto itself")
                os.close(tree)
            finally:
                os.close(fd)
            mounted.add(path)


def _caps(bounding: int, keep: int, extra: int, uid: int) -> int:
    """Bounding set ``bounding`` plus ``extra``; root keeps ``keep``, another user only ``extra``."""
    wanted = bounding | (1 << extra)
    for cap in range(64):
        dropped = wanted >> cap & 1 or _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0
        if not dropped and ctypes.get_errno() != 22:  # EINVAL: the kernel has no such capability
            _check(-1, f"dropping capability {cap}")
    _check(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
    return (keep | (1 << extra)) if uid == 0 else 1 << extra


def _capset(mask: int) -> None:
    header = _CapHeader(CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    for i in (0, 1):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = data[i].inheritable = word
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _groups(uid: int, gid: int) -> list[int]:
    """The supplementary groups of ``uid`` by the container's /etc/passwd and /etc/group (as ``docker exec``)."""
    name = None
    try:
        with open("/etc/passwd", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if len(fields) >= 3 and fields[2] == str(uid):
                    name = fields[0]
                    break
        found = {gid}
        if name is not None:
            with open("/etc/group", encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.rstrip("\n").split(":")
                    if len(fields) >= 4 and name in fields[3].split(",") and fields[2].isdigit():
                        found.add(int(fields[2]))
        return sorted(found)
    except OSError:
        return [gid]


def _child(spec: dict, procs: list[int]) -> None:
    """In the container's pid namespace: cgroups, session, capabilities, user, then exec."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "parent-death signal")
    # the helper is outside this pid namespace (seen as 0); once it is gone (the harness ended it on
    # a timeout before the group held this child) the parent is the container's init
    if os.getppid() != 0:
        os._exit(SETUP_FAILED)
    for fd in procs:
        os.write(fd, b"0")
        os.close(fd)
    os.setsid()
    confine = spec["confine"]
    set_limits(confine["limits"])
    if not confine["no_new_privs"]:  # a privileged install: before the capabilities go (as runc does)
        install_filters(confine["filters"])
    uid, gid = int(spec["uid"]), int(spec["gid"])
    mask = _caps(int(spec["bounding"]), int(spec["keep"]), int(spec["extra"]), uid)
    os.setgroups(_groups(uid, gid))
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _capset(mask)
    if uid != 0:
        _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, int(spec["extra"]), 0, 0), "ambient capability")
    os.chdir(spec["cwd"])
    env = dict(spec["env"])
    if spec["apparmor"]:
        apparmor_exec(spec["apparmor"])
    if confine["no_new_privs"]:  # as late as can be, as runc does
        set_no_new_privileges()
        install_filters(confine["filters"])
    _say("exec")
    try:
        os.execvpe("sh", ["sh", "-c", spec["command"]], env)
    except OSError as exc:  # the container's shell cannot run (the subject may have broken it): as the runtime says
        os.write(2, f"maka: cannot run sh in the container: {exc}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _mount_points(pid: int) -> set[str]:
    """The mount points of the container's namespace (as its main process sees them)."""
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
        return {line.split(" ")[4] for line in f if line.count(" ") > 4}


def _no_more_imports() -> None:
    """From here on an import fails instead of loading a file: paths resolve in the container,
    whose files are the subject's, and this process is root on the host."""
    sys.path.clear()
    sys.path_importer_cache.clear()
    sys.path_hooks.clear()
    sys.meta_path.clear()


def main() -> int:
    spec = json.loads(sys.argv[1])
    _report[0] = os.open(spec["report"], os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    pid = int(spec["pid"])
    fds = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC) for ns in (*NAMESPACES, "mnt")}
    if os.readlink(f"/proc/{pid}/ns/pid") != spec["pid_ns"]:
        raise OSError("the container's main process changed")
    confine = {
        "filters": read_filters(pid),
        "no_new_privs": no_new_privileges(pid),
        "limits": limits(pid, spec["ulimits"]),
    }
    trees = {target: _open_tree(source) for target, source in spec["binds"].items()}
    pinned = _mount_points(pid)
    procs = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in spec["cgroup_procs"]]
    _no_more_imports()
    for ns in NAMESPACES:
        _setns(fds[ns], ns)
    _setns(fds["mnt"], "mnt")
    _pin(list(trees), pinned)  # once pinned, no component can be swapped for a link
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    for target, tree in trees.items():
        fd = _walk(target)
        _attach(tree, fd, target)
        os.close(fd)
        os.close(tree)
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        try:
            _child({**spec, "confine": confine}, procs)
        except BaseException as exc:  # the set-up failed: say why, never run the command
            _say(f"failed: {exc}")
        os._exit(SETUP_FAILED)
    for fd in procs:
        os.close(fd)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (NotADirectory, Traced) as exc:
        _say(f"subject: {exc}")
        sys.exit(SUBJECT_CHANGED)
    except (OSError, ValueError, KeyError) as exc:
        _say(f"failed: {exc}")
        sys.exit(SETUP_FAILED)
