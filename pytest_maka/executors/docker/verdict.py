"""The private verdict channel of a container on a local engine (docs/security.md, "The verdict channel").

The verification's ``/tests`` and ``/logs/verifier`` are host directories of the harness,
attached only in a private copy of the container's mount namespace that each verification
command gets (``verdict_ns``, run on the engine's host as root). The command runs in the
container's other namespaces, cgroups, capability bounding set and user, plus one capability
the container's processes lack: none of them may open ``/proc/<pid>/root`` of the
verification. Its process tree is a cgroup of its own under the container's: every process of
it ends when the command does (or on its timeout), before the reward is read.

Where this cannot be built (the engine on another host, the harness not root, a container
with ``SYS_ADMIN`` or ``SYS_PTRACE``, no free capability, no freezer), ``probe`` says why and
the sandbox keeps the shared channel.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ...core.errors import InfraError, SubjectFault
from ...core.task import TESTS_DIR, VERIFIER_LOGS_DIR
from ..content import read_regular
from ..hostfs import remove_path
from .verdict_cgroup import cgroup_mounts, end_group, new_group_name
from .verdict_confine import ULIMITS

HELPER = Path(__file__).with_name("verdict_ns.py")
CAP_SYS_PTRACE, CAP_SYS_ADMIN = 19, 21
#: Capabilities that give nothing but an alarm timer, a wakelock or audit reading: one the
#: container lacks marks the verification's processes (``/proc/<pid>/root`` needs a superset).
MARKS = {35: "CAP_WAKE_ALARM", 36: "CAP_BLOCK_SUSPEND", 37: "CAP_AUDIT_READ"}


@dataclass(frozen=True)
class Container:
    """What the private channel needs of a running container, read on the engine's host."""

    pid: int
    pid_ns: str
    bounding: int
    effective: int
    mark: int
    #: The cgroup.procs file of each hierarchy the container is in (the freezer's excepted).
    procs: tuple[str, ...]
    #: The container's cgroup whose child holds one verification (v1: the freezer's; v2: its own).
    parent: str
    v2: bool
    #: ``HostConfig.Ulimits`` (name -> [soft, hard]) and ``AppArmorProfile`` of the container.
    ulimits: tuple[tuple[str, int, int], ...] = ()
    apparmor: str = ""


def _status_caps(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["CapBnd"], 16), int(fields["CapEff"], 16)


def probe(pid: int | None, container_id: str) -> Container | str:
    """The container's facts, or why its verifications cannot have a private channel here.

    ``pid`` is the engine's word for the container's main process: it is taken only when that
    process is on this host and in the container's cgroup (a remote engine's pid may name
    another process here)."""
    if pid is None or pid <= 0:
        return "the container's main process is not known (not running)"
    if os.geteuid() != 0:
        return "the harness is not root on the engine's host"
    try:
        pid_ns = os.readlink(f"/proc/{pid}/ns/pid")
        bounding, effective = _status_caps(pid)
        if pid_ns == os.readlink("/proc/self/ns/pid"):
            return "the engine's containers share the harness's process table (engine on another host?)"
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (OSError, KeyError, ValueError):
        return "the engine runs on another host (its containers' processes are not visible here)"
    if not any(container_id in line for line in lines):
        return "the engine runs on another host (its container's main process is not one of this host's)"
    if bounding >> CAP_SYS_ADMIN & 1 or bounding >> CAP_SYS_PTRACE & 1:
        return "the container's processes hold SYS_ADMIN or SYS_PTRACE (they could reach any mount namespace)"
    own_bounding, _ = _status_caps(os.getpid())
    free = [cap for cap in MARKS if not bounding >> cap & 1 and own_bounding >> cap & 1]
    if not free:
        return "no capability is left that the container's processes lack"
    v1, v2 = cgroup_mounts()
    procs: list[str] = []
    parent = None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if not ctrls:
            continue
        point = next((p for opts, p in v1 if set(ctrls.split(",")) <= opts), None)
        if point is None:
            continue
        if "freezer" in ctrls.split(","):
            parent = f"{point}{path}"
        else:
            procs.append(f"{point}{path}/cgroup.procs")
    unified = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if parent is None and not procs and v2 is not None and unified is not None:
        return Container(pid, pid_ns, bounding, effective, free[0], (), f"{v2}{unified}", True)
    if parent is None:
        return "the container has no freezer cgroup to end a verification's processes with"
    if v2 is not None and unified is not None and unified != "/":  # a hybrid host: its v2 cgroup too, as runc's exec
        procs.append(f"{v2}{unified}/cgroup.procs")
    return Container(pid, pid_ns, bounding, effective, free[0], tuple(procs), parent, False)


def confined(container: Container, inspected: Mapping[str, Any]) -> Container:
    """``container`` with the limits and AppArmor profile the engine's inspection gives it."""
    host = inspected.get("HostConfig") or {}
    ulimits = tuple(
        (str(u["Name"]), int(u["Soft"]), int(u["Hard"])) for u in host.get("Ulimits") or () if u.get("Name") in ULIMITS
    )
    return replace(container, ulimits=ulimits, apparmor=str(inspected.get("AppArmorProfile") or ""))


class _Pipe(threading.Thread):
    """Drains one pipe into a file, keeping at most ``cap`` bytes."""

    def __init__(self, stream: IO[bytes] | None, path: Path, cap: int) -> None:
        super().__init__(name="maka-verdict-output", daemon=True)
        self._stream = stream
        self._path = path
        self._cap = cap
        self.truncated = False

    def run(self) -> None:
        written = 0
        assert self._stream is not None
        with open(self._path, "wb") as out:
            while True:
                data = os.read(self._stream.fileno(), 65536)
                if not data:
                    return
                room = self._cap - written
                if len(data) > room:
                    self.truncated = True
                    data = data[: max(room, 0)]
                out.write(data)
                written += len(data)


@dataclass(frozen=True)
class Outcome:
    """One private command's end."""

    exit_code: int | None
    timed_out: bool
    truncated: tuple[bool, bool]
    stop_s: float


class PrivateVerdict:
    """One verification's channel: its host directories and how its commands run."""

    def __init__(self, root: Path, tests: Path | None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.verifier = root / "verifier"
        self.verifier.mkdir(mode=0o755)
        os.chmod(self.verifier, 0o755)
        self.tests: Path | None = None
        if tests is not None:
            self.tests = root / "tests"
            shutil.copytree(tests, self.tests, symlinks=True)
        self.commands = 0

    def owns(self, sandbox_path: str) -> bool:
        """``sandbox_path`` is the channel's (at or below ``/tests`` or ``/logs/verifier``)."""
        return any(sandbox_path == d or sandbox_path.startswith(d + "/") for d in (VERIFIER_LOGS_DIR, TESTS_DIR))

    def host_path(self, sandbox_path: str, *, clear: bool = False) -> Path | None:
        """The host path that stands for ``sandbox_path`` in the verification (None: not the
        channel's, or /tests of a verification without tests). No link is followed: a parent
        that is not a directory (a link the verification left) makes it None, or with ``clear``
        is replaced by an empty directory. Nothing else writes these directories between the
        verification's commands (its processes end with each), so what is checked stays so."""
        for inside, host in ((VERIFIER_LOGS_DIR, self.verifier), (TESTS_DIR, self.tests)):
            if sandbox_path == inside or sandbox_path.startswith(inside + "/"):
                if host is None:
                    return None
                parts = [p for p in sandbox_path[len(inside) :].split("/") if p]
                for i in range(len(parts) - 1):
                    parent = host.joinpath(*parts[: i + 1])
                    if parent.is_dir() and not parent.is_symlink():
                        continue
                    if not clear:
                        return None
                    if parent.is_symlink() or parent.exists():
                        remove_path(parent)
                    parent.mkdir()
                return host.joinpath(*parts)
        return None

    def put(self, source: Path, sandbox_path: str) -> None:
        """Replace what is at ``sandbox_path`` of the channel by a copy of ``source``."""
        target = self.host_path(sandbox_path, clear=True)
        if target is None:
            raise InfraError(f"{sandbox_path} is not in this verification (it has no tests)")
        if target in (self.verifier, self.tests):  # the mount point stays: its content is replaced
            if not source.is_dir():
                raise InfraError(f"{sandbox_path} of the verification can only be replaced by a directory")
            _empty(target)
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
            return
        if target.is_symlink() or target.exists():
            remove_path(target)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)

    def remove(self, sandbox_path: str) -> None:
        """Delete what is at ``sandbox_path`` (``/tests`` or ``/logs/verifier`` itself: emptied)."""
        target = self.host_path(sandbox_path)
        if target is None:  # nothing there: a link on the way, or /tests of a verification without tests
            return
        if target in (self.verifier, self.tests):
            _empty(target)
        elif target.is_symlink() or target.exists():
            remove_path(target)

    def read(self, sandbox_path: str, max_bytes: int) -> bytes:
        """At most ``max_bytes`` of the regular file at ``sandbox_path`` (a link is refused)."""
        target = self.host_path(sandbox_path)
        if target is None:
            raise FileNotFoundError(f"no such file in the sandbox: {sandbox_path}")
        return read_regular(target, max_bytes)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def run(
        self,
        container: Container,
        *,
        command: str,
        env: Mapping[str, str],
        cwd: str,
        uid: int,
        gid: int,
        timeout_sec: float | None,
        grace: float,
        stdout_path: Path,
        stderr_path: Path,
        cap: int,
        started: float,
    ) -> Outcome:
        """Run ``command`` as the verification (see the module's docstring); returns once every
        process it started is gone."""
        self.commands += 1
        if uid != 0:  # the directory the verifier writes is its user's (phase_user gives it in the container)
            os.chown(self.verifier, uid, gid)
        group = Path(container.parent) / new_group_name()
        group.mkdir()
        report = self.root / f"report-{self.commands}.txt"
        report.write_bytes(b"")
        try:
            binds = {VERIFIER_LOGS_DIR: str(self.verifier)}
            if self.tests is not None:
                binds[TESTS_DIR] = str(self.tests)
            spec = {
                "pid": container.pid,
                "pid_ns": container.pid_ns,
                "binds": binds,
                "cgroup_procs": [*container.procs, str(group / "cgroup.procs")],
                "uid": uid,
                "gid": gid,
                "bounding": container.bounding,
                "keep": container.effective,
                "extra": container.mark,
                "cwd": cwd,
                "env": dict(env),
                "command": command,
                "report": str(report),
                "ulimits": {name: [soft, hard] for name, soft, hard in container.ulimits},
                "apparmor": container.apparmor,
            }
            stdout_path.parent.mkdir(parents=True, exist_ok=True)
            stderr_path.parent.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(HELPER), json.dumps(spec)],  # -S: no site start-up
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
            )
            pipes = (_Pipe(proc.stdout, stdout_path, cap), _Pipe(proc.stderr, stderr_path, cap))
            for pipe in pipes:
                pipe.start()
            deadline = None if timeout_sec is None else started + timeout_sec
            timed_out = False
            try:
                _wait(proc, None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()  # the helper first: a child it forks but did not yet put in the group dies with it
            stop_started = time.monotonic()
            end_group(group, container.v2, grace=grace if timed_out else 0.0)
            code = proc.wait(30)
            for pipe in pipes:
                pipe.join(10)
            for stream in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError, AttributeError):
                    stream.close()  # type: ignore[union-attr]
            said = report.read_text(errors="replace").splitlines()
            if said[:1] != ["exec"] and not timed_out:  # what the command prints can never get here
                why = said[-1] if said else f"the helper ended with {code}: {_tail(stderr_path).strip()[-300:]}"
                if why.startswith("subject: "):
                    raise SubjectFault(f"the verdict channel could not be laid out: {why[9:]}")
                raise InfraError(f"the private verdict channel could not be set up: {why}")
            return Outcome(
                exit_code=None if timed_out else code,
                timed_out=timed_out,
                truncated=(pipes[0].truncated, pipes[1].truncated),
                stop_s=time.monotonic() - stop_started,
            )
        finally:
            end_group(group, container.v2, grace=0.0)
            with contextlib.suppress(OSError):
                group.rmdir()


def _wait(proc: subprocess.Popen[bytes], timeout: float | None) -> None:
    """``proc.wait(timeout)`` without its polling (sleeps of up to 50 ms): a pidfd says when it ended."""
    if timeout is not None:
        fd = os.pidfd_open(proc.pid)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            ended = poller.poll(timeout * 1000)
        finally:
            os.close(fd)
        if not ended:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    proc.wait()


def _empty(directory: Path) -> None:
    for entry in os.listdir(directory):
        remove_path(directory / entry)


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 400))
        return f.read().decode(errors="replace")
    return ""
