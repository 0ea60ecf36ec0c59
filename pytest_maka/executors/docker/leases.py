"""Bounded container slots per engine, shared by every process on this host, taken in FIFO order.

A slot is a file ``<state>/slots/<engine>/<n>.slot`` held with ``flock``: the kernel drops
the lock when its process dies, so a crashed xdist worker never leaks capacity. The holder
writes its container id into the file; whoever takes the slot next finds the id of a
container its dead predecessor could not remove, and removes it.

Whoever finds every slot taken queues: a ticket file ``<state>/slots/queue-<engines>/<ns>-<pid>-<n>``
held with ``flock`` (a dead waiter's ticket is removed by the next one to look). The
``k``-th live ticket in name order (its time of arrival) may take a slot only while more
than ``k`` are free, so waiters of every process on the host are served first come, first
served, and nobody who arrives later takes a slot ahead of one already waiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
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


class Ticket:
    """One waiter's place in a host-wide queue (a directory of flocked files)."""

    _numbers = itertools.count()

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.name = f"{time.time_ns():020d}-{os.getpid():08d}-{next(self._numbers):06d}"
        hidden = directory / f".{self.name}"  # locked before it shows: never taken for a dead waiter's
        self.fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.rename(hidden, directory / self.name)

    def ahead(self, limit: int | None = None) -> int:
        """How many live waiters came before this one, counted up to ``limit`` (the tickets of
        dead ones met on the way are removed). A waiter needs only to know whether fewer wait
        ahead than there are free slots, so each poll checks at most that many tickets."""
        return _count_live(self.directory, before=self.name, limit=limit)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.directory / self.name)
            fd, self.fd = self.fd, -1
            os.close(fd)


def _alive(path: Path) -> bool:
    """True when a waiter holds the ticket at ``path``; a ticket nobody holds is removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # it left the queue
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)  # its waiter died
    return False


def waiting(directory: Path, limit: int | None = None) -> int:
    """Live tickets in the queue at ``directory`` (a snapshot), counted up to ``limit``."""
    if not directory.is_dir():
        return 0
    return _count_live(directory, before=None, limit=limit)


def _count_live(directory: Path, *, before: str | None, limit: int | None) -> int:
    """Live tickets in arrival order (before ``before``, if given), stopping at ``limit``."""
    count = 0
    for name in sorted(os.listdir(directory)):
        if limit is not None and count >= limit:
            break
        if before is not None and name >= before:
            break
        if not name.startswith(".") and _alive(directory / name):
            count += 1
    return count


@dataclass
class Choice(Generic[T]):
    target: T
    slot: Slot
    waited_s: float = field(default=0.0)
    #: Every slot was taken when it came: it waited in line (``waited_s`` is that wait).
    queued: bool = False


def acquire(
    candidates: Callable[[], Sequence[tuple[T, SlotPool]]],
    *,
    timeout_sec: float,
    on_empty: Callable[[], Exception],
    wait_for_target_sec: float = 0.0,
    queue: Path | None = None,
    on_wait: Callable[[], None] | None = None,
) -> Choice[T]:
    """Take a slot on the candidate with the most free slots; wait in line while all are full.

    ``candidates`` is called on every round (targets leave and rejoin rotation). While it
    returns nothing, the wait goes on for up to ``wait_for_target_sec`` (within
    ``timeout_sec``) with growing, jittered pauses; then ``on_empty()`` is raised. With
    ``queue`` (a directory shared by every process that uses these pools), a caller that
    cannot take a slot at once takes a ticket there and is served in order of arrival;
    ``on_wait`` is called once when it starts to wait. ``Choice.waited_s``: seconds waited.
    """
    start = time.monotonic()
    ticket: Ticket | None = None
    queued = False
    try:
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
            free = {id(pool): pool.free() for _, pool in pools}
            total = sum(free.values())
            if ticket is not None:
                ahead = ticket.ahead(limit=total)
            else:
                ahead = waiting(queue, limit=total) if queue is not None else 0
            if ahead < total:  # fewer wait before this one than slots are free: its turn
                ranked = sorted(pools, key=lambda tp: (-free[id(tp[1])], random.random()))
                for target, pool in ranked:
                    slot = pool.try_acquire()
                    if slot is not None:
                        return Choice(target, slot, time.monotonic() - start, queued=queued)
            if time.monotonic() - start > timeout_sec:
                raise TimeoutError(f"no free container slot within {timeout_sec:.0f}s")
            if not queued:
                queued = True
                if queue is not None:
                    ticket = Ticket(queue)
                if on_wait is not None:
                    on_wait()
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
    finally:
        if ticket is not None:
            ticket.close()
