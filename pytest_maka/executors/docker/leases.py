"""Bounded container slots per engine, shared by every process on this host.

A slot is a file ``<state>/slots/<engine>/<n>.slot`` held with ``flock``: the kernel drops
the lock when its process dies, so a crashed xdist worker never leaks capacity. The holder
writes its container id into the file; whoever takes the slot next finds the id of a
container its dead predecessor could not remove, and removes it.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Slot:
    """One held slot. ``stale_container`` is what a dead previous holder left behind."""

    path: Path
    fd: int
    stale_container: str | None = None

    def record(self, container_id: str) -> None:
        """Remember the container this slot's lease runs (for cleanup after a crash)."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, container_id.encode(), 0)

    def clear(self) -> None:
        os.ftruncate(self.fd, 0)

    def release(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)  # closing drops the flock


class SlotPool:
    """``capacity`` slots for one engine."""

    def __init__(self, directory: Path, capacity: int) -> None:
        self.directory = directory
        self.capacity = capacity
        directory.mkdir(parents=True, exist_ok=True)

    def _open(self, n: int) -> int:
        return os.open(self.directory / f"{n}.slot", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def free(self) -> int:
        """How many slots nobody holds right now (a snapshot)."""
        count = 0
        for n in range(self.capacity):
            fd = self._open(n)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                count += 1
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
        return count

    def try_acquire(self) -> Slot | None:
        for n in random.sample(range(self.capacity), self.capacity):
            fd = self._open(n)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            previous = os.pread(fd, 200, 0).decode(errors="replace").strip()
            return Slot(self.directory / f"{n}.slot", fd, previous or None)
        return None


@dataclass
class Choice(Generic[T]):
    target: T
    slot: Slot
    waited_s: float = field(default=0.0)


def acquire(
    candidates: Callable[[], Sequence[tuple[T, SlotPool]]],
    *,
    timeout_sec: float,
    on_empty: Callable[[], Exception],
    wait_for_target_sec: float = 0.0,
) -> Choice[T]:
    """Take a slot on the candidate with the most free slots; wait while all are full.

    ``candidates`` is called on every round (targets leave and rejoin rotation). While it
    returns nothing, the wait goes on for up to ``wait_for_target_sec`` (within
    ``timeout_sec``) with growing, jittered pauses; then ``on_empty()`` is raised.
    """
    start = time.monotonic()
    delay = 0.02
    empty_since: float | None = None
    while True:
        pools = list(candidates())
        now = time.monotonic()
        if not pools:
            empty_since = now if empty_since is None else empty_since
            if now - empty_since >= wait_for_target_sec or now - start > timeout_sec:
                raise on_empty()
            time.sleep(min(random.uniform(0.5, 1.5) * max(delay, 0.5), 5.0))
            delay = min(delay * 2, 5.0)
            continue
        empty_since = None
        ranked = sorted(pools, key=lambda tp: (-tp[1].free(), random.random()))
        for target, pool in ranked:
            slot = pool.try_acquire()
            if slot is not None:
                return Choice(target, slot, time.monotonic() - start)
        if time.monotonic() - start > timeout_sec:
            raise TimeoutError(f"no free container slot within {timeout_sec:.0f}s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
