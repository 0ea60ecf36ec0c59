"""The cgroup of one private verification (``verdict``): how its processes are ended, and the sweep
of those a killed harness left.

Its name says which harness process made it (``maka-verdict-<pid>-<start time>-<random>``),
under the container's freezer cgroup (cgroup v1: frozen, killed, thawed) or its own cgroup v2
(``cgroup.kill``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from ...core.errors import InfraError
from .labels import process_start

GROUP_PREFIX = "maka-verdict-"
_OWNER = f"{os.getpid()}-{process_start(os.getpid()) or 0}"


def new_group_name() -> str:
    return f"{GROUP_PREFIX}{_OWNER}-{secrets.token_hex(6)}"


def cgroup_mounts() -> tuple[list[tuple[frozenset[str], str]], str | None]:
    """v1 hierarchies (their mount options, mount point) and the v2 mount point, on this host."""
    v1: list[tuple[frozenset[str], str]] = []
    v2 = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fstype, _src, *opts = tail.split(" ")
        point = head.split(" ")[4]
        if fstype == "cgroup2":
            v2 = point
        elif fstype == "cgroup" and opts:
            v1.append((frozenset(opts[0].split(",")), point))
    return v1, v2


def _members(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def end_group(group: Path, v2: bool, *, grace: float) -> None:
    """End every process of the verification's cgroup (SIGTERM first when ``grace``): frozen,
    killed, thawed, until none is left (a fork cannot outrun it)."""
    if not group.is_dir():
        return
    if grace > 0:
        for pid in _members(group):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while _members(group) and time.monotonic() < end:
            time.sleep(0.05)
    for _ in range(200):
        if not _members(group):
            return
        if v2:
            with contextlib.suppress(OSError):
                (group / "cgroup.kill").write_text("1")
        else:
            _freeze_and_kill(group)
        time.sleep(0.02)
    raise InfraError(f"the verification's processes in {group} did not end")


def _freeze_and_kill(group: Path) -> None:
    state = group / "freezer.state"
    state.write_text("FROZEN")
    for _ in range(500):
        if state.read_text().strip() == "FROZEN":
            break
        time.sleep(0.005)
    for pid in _members(group):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    state.write_text("THAWED")


def find_groups(root: Path, levels: int = 5) -> Iterator[Path]:
    """The verification cgroups under ``root`` (``<root>/docker/<id>/maka-verdict-*``, or a systemd
    slice's deeper one: levels 2 to ``levels``). A container's cgroup removed while this looks
    (another run's container ending) is passed over, never an error."""
    level = [str(root)]
    for depth in range(1, levels + 1):
        below: list[str] = []
        for parent in level:
            try:
                with os.scandir(parent) as entries:
                    for entry in entries:
                        with contextlib.suppress(OSError):
                            if not entry.is_dir(follow_symlinks=False):
                                continue
                            if not entry.name.startswith(GROUP_PREFIX):
                                below.append(entry.path)
                            elif depth >= 2:
                                yield Path(entry.path)
            except FileNotFoundError:
                continue
        level = below


def sweep_groups(*, dry_run: bool = False) -> list[str]:
    """End and remove the verification cgroups of harness processes that are gone (killed in the
    middle of a verifier command: its processes, frozen or not, would hold the container's
    cgroup); returns their paths. Only on the engine's host, as root."""
    if os.geteuid() != 0:
        return []
    v1, v2 = cgroup_mounts()
    roots = [(point, False) for opts, point in v1 if "freezer" in opts] + ([(v2, True)] if v2 else [])
    swept: list[str] = []
    for root, is_v2 in roots:
        for group in find_groups(Path(root)):
            pid, _, rest = group.name[len(GROUP_PREFIX) :].partition("-")
            start = rest.rpartition("-")[0]
            if not pid.isdigit() or process_start(int(pid)) == start or not group.is_dir():
                continue
            try:
                if not dry_run:
                    end_group(group, is_v2, grace=0.0)
                    group.rmdir()
            except (OSError, InfraError) as exc:
                swept.append(f"{group}: not removed: {exc}")
            else:
                swept.append(str(group))
    return swept
