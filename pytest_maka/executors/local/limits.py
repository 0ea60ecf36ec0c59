"""Memory, process-count and file-size limits for the local executor's sandboxes.

One mechanism is chosen per process, the first that works here (probed once):

- ``cgroup2``: a child of this process's own cgroup on the unified hierarchy with the
  ``memory`` and ``pids`` controllers (``memory.max``, ``memory.swap.max``, ``pids.max``);
- ``cgroup1``: children of this process's cgroups in the ``memory`` and ``pids``
  hierarchies (``memory.limit_in_bytes``, ``pids.max``);
- ``rlimit``: per-process ``RLIMIT_AS`` (address space, not the sandbox's total) and
  ``RLIMIT_NPROC`` (counts every process of the user; not enforced for root).

A sandbox's command is held at a gate until its pid is in the cgroup and its rlimits are
set (``process.run_process(hold=...)``), so nothing escapes by forking early. Limits hit
are read back from the kernel's counters (``oom_kill``, ``pids`` fork failures) after each
command. ``RLIMIT_FSIZE`` (largest file a command may write) applies with every mechanism.
"""

from __future__ import annotations

import contextlib
import os
import resource
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from .process import pid_alive

MB = 1024 * 1024


@dataclass(frozen=True)
class LimitSpec:
    """What one sandbox may use (None: no limit)."""

    memory_mb: int | None = None
    pids: int | None = None
    file_mb: int | None = None


class SandboxLimits(Protocol):
    """The limits of one sandbox, applied to every command it runs."""

    mechanism: str

    def enter(self, pid: int) -> None:
        """Put process ``pid`` (started, not yet running the sandbox) under these limits."""
        ...

    def exceeded(self) -> list[str]:
        """The limits hit since the last call (``memory``, ``pids``)."""
        ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class _Hierarchy:
    """Where a controller's files are, in one cgroup version."""

    root: Path  # this process's own cgroup in that hierarchy
    files: dict[str, str]  # limit name -> control file
    counters: dict[str, tuple[str, bytes]]  # limit name -> (events file, counter key)


@cache
def _hierarchies() -> tuple[str, tuple[_Hierarchy, ...]] | None:
    """The first cgroup layout where a probe child can be created and limited, or None."""
    mounts = _cgroup_mounts()
    own = _own_cgroups()
    candidates: list[tuple[str, tuple[_Hierarchy, ...]]] = []
    if "" in mounts and "" in own:
        base = Path(mounts[""]) / own[""].lstrip("/")
        v2 = _Hierarchy(
            base,
            {"memory": "memory.max", "swap": "memory.swap.max", "pids": "pids.max"},
            {"memory": ("memory.events", b"oom_kill"), "pids": ("pids.events", b"max")},
        )
        candidates.append(("cgroup2", (v2,)))
    if "memory" in mounts and "pids" in mounts and "memory" in own and "pids" in own:
        memory = _Hierarchy(
            Path(mounts["memory"]) / own["memory"].lstrip("/"),
            {"memory": "memory.limit_in_bytes"},
            {"memory": ("memory.oom_control", b"oom_kill")},
        )
        pids = _Hierarchy(
            Path(mounts["pids"]) / own["pids"].lstrip("/"), {"pids": "pids.max"}, {"pids": ("pids.events", b"max")}
        )
        candidates.append(("cgroup1", (memory, pids)))
    for name, layout in candidates:
        if _probe(layout):
            return name, layout
    return None


def _cgroup_mounts() -> dict[str, str]:
    """Controller ('' for the unified hierarchy) -> mount point."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            _dev, point, fstype, opts, *_ = line.split()
            if fstype == "cgroup2":
                out.setdefault("", point)
            elif fstype == "cgroup":
                for opt in opts.split(","):
                    if opt in ("memory", "pids"):
                        out.setdefault(opt, point)
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller ('' for the unified hierarchy) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _probe(layout: tuple[_Hierarchy, ...]) -> bool:
    try:
        group = _Group(layout, f"maka-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}", LimitSpec(64, 64))
    except OSError:
        return False
    group.close()
    return True


class _Group:
    """One sandbox's cgroup(s): created with the limits written, removed by ``close``."""

    def __init__(self, layout: tuple[_Hierarchy, ...], name: str, spec: LimitSpec) -> None:
        self.dirs: list[Path] = []
        self.layout = layout
        values = {"memory": spec.memory_mb, "swap": 0 if spec.memory_mb else None, "pids": spec.pids}
        try:
            for h in layout:
                d = h.root / name
                d.mkdir()
                self.dirs.append(d)
                for limit, file in h.files.items():
                    value = values.get(limit)
                    if value is None:
                        continue
                    try:
                        (d / file).write_text(str(value * MB if limit == "memory" else value))
                    except OSError:
                        if limit != "swap":  # no swap accounting: nothing to limit
                            raise
        except OSError:
            self.close()
            raise

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for h, d in zip(self.layout, self.dirs, strict=False):
            for limit, (file, key) in h.counters.items():
                with contextlib.suppress(OSError, ValueError):
                    for line in _read_small(d / file).splitlines():
                        k, _, v = line.partition(b" ")
                        if k == key:
                            out[limit] = int(v)
        return out

    def close(self) -> None:
        for d in reversed(self.dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        self.dirs = []


def _read_small(path: Path) -> bytes:
    """A small kernel file's content in three system calls (read after every command)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


@dataclass
class CgroupLimits:
    """A sandbox's own cgroup (v1 or v2) plus RLIMIT_FSIZE."""

    mechanism: str
    spec: LimitSpec
    group: _Group
    _procs: list[int] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._procs = [os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for d in self.group.dirs]
        self._seen = self.group.counts()

    def enter(self, pid: int) -> None:
        for fd in self._procs:
            os.write(fd, str(pid).encode())
        _prlimit(pid, [(resource.RLIMIT_FSIZE, _bytes(self.spec.file_mb))])

    def exceeded(self) -> list[str]:
        now = self.group.counts()
        hit = sorted(k for k, v in now.items() if v > self._seen.get(k, 0))
        self._seen = now
        return hit

    def describe(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "memory_mb": self.spec.memory_mb,
            "pids": self.spec.pids,
            "file_mb": self.spec.file_mb,
            "scope": "whole sandbox",
        }

    def close(self) -> None:
        for fd in self._procs:
            os.close(fd)
        self._procs = []
        self.group.close()


@dataclass
class RlimitLimits:
    """Per-process rlimits: the fallback where no cgroup can be created."""

    spec: LimitSpec
    mechanism: str = "rlimit"

    def enter(self, pid: int) -> None:
        limits = [
            (resource.RLIMIT_AS, _bytes(self.spec.memory_mb)),
            (resource.RLIMIT_NPROC, self.spec.pids),
            (resource.RLIMIT_FSIZE, _bytes(self.spec.file_mb)),
        ]
        _prlimit(pid, limits)

    def exceeded(self) -> list[str]:
        return []  # the kernel keeps no counter for rlimits

    def describe(self) -> dict[str, Any]:
        pids = self.spec.pids if os.geteuid() != 0 else None
        return {
            "mechanism": "rlimit",
            "memory_mb": self.spec.memory_mb,
            "pids": pids,
            "file_mb": self.spec.file_mb,
            "scope": "per process (address space); process count per user"
            + (", not enforced for root" if os.geteuid() == 0 and self.spec.pids else ""),
        }

    def close(self) -> None:
        pass


def _prlimit(pid: int, limits: list[tuple[int, int | None]]) -> None:
    for which, value in limits:
        if value is not None:
            resource.prlimit(pid, which, (value, value))


def _bytes(mb: int | None) -> int | None:
    return None if mb is None else mb * MB


def open_limits(spec: LimitSpec) -> SandboxLimits:
    """The limits of a new sandbox, by the best mechanism this host offers."""
    found = _hierarchies()
    if found is not None and (spec.memory_mb is not None or spec.pids is not None):
        mechanism, layout = found
        try:
            group = _Group(layout, f"maka-{os.getpid()}-{uuid.uuid4().hex[:12]}", spec)
        except OSError:
            pass
        else:
            return CgroupLimits(mechanism, spec, group)
    return RlimitLimits(spec)


def sweep() -> list[str]:
    """Remove the empty cgroups of sandboxes whose process died (SIGKILL skips ``close``)."""
    found = _hierarchies()
    removed: list[str] = []
    for h in found[1] if found is not None else ():
        with contextlib.suppress(OSError):
            for entry in os.scandir(h.root):
                parts = entry.name.split("-")
                if len(parts) == 3 and parts[0] == "maka" and parts[1].isdigit() and not pid_alive(int(parts[1])):
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)  # refused while a process is still in it
                        removed.append(entry.path)
    return removed


def mechanism() -> str:
    """The mechanism sandboxes get here (for documentation and the record)."""
    found = _hierarchies()
    return found[0] if found is not None else "rlimit"
