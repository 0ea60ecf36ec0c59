"""The Docker executor's slots, shared by every process on the host: waiters of separate real
processes are served in order of arrival, a later arrival never takes a slot ahead of them, and a
waiter killed in line does not block the line. No engine is needed: the slots are files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_maka.core.errors import MakaUserError
from pytest_maka.executors.docker.leases import SlotPool, Ticket, acquire, waiting
from pytest_maka.executors.docker.options import MAX_CONTAINERS_ENV, DockerOptions, host_slots

#: One waiter: ``ROOT NAME HOLD_S``: queue for the one slot, note when it queued and when it got it.
WAITER = """
import pathlib, sys, time
from pytest_maka.executors.docker.leases import SlotPool, acquire
root, name, hold = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
pool = SlotPool(root / "slots", 1)
choice = acquire(lambda: [("engine", pool)], timeout_sec=120, on_empty=lambda: RuntimeError("no engine"),
                 queue=root / "queue", on_wait=lambda: (root / f"{name}.queued").touch())
with open(root / "order", "a") as f:
    f.write(f"{name} queued={choice.queued}\\n")
time.sleep(hold)
choice.slot.release()
"""


def _start(root: Path, name: str, hold: float = 0.3) -> subprocess.Popen[bytes]:
    """A waiter process; returns once it stands in line (its ticket is in the queue)."""
    proc = subprocess.Popen([sys.executable, "-c", WAITER, str(root), name, str(hold)])
    deadline = time.monotonic() + 60
    while not (root / f"{name}.queued").exists():
        assert proc.poll() is None, f"waiter {name} ended with {proc.returncode} before queueing"
        assert time.monotonic() < deadline, f"waiter {name} never queued"
        time.sleep(0.01)
    return proc


def _take(pool: SlotPool, root: Path, timeout: float) -> None:
    acquire(lambda: [("engine", pool)], timeout_sec=timeout, on_empty=lambda: RuntimeError("x"), queue=root / "queue")


def test_waiters_of_two_processes_are_served_in_order_of_arrival(tmp_path: Path) -> None:
    pool = SlotPool(tmp_path / "slots", 1)
    held = pool.try_acquire()
    assert held is not None
    first = _start(tmp_path, "first")
    second = _start(tmp_path, "second")
    assert waiting(tmp_path / "queue") == 2
    held.release()
    with pytest.raises(TimeoutError):  # arrived last: the slot is free, but two wait before it
        _take(pool, tmp_path, timeout=0)
    assert first.wait(60) == 0 and second.wait(60) == 0
    assert (tmp_path / "order").read_text().splitlines() == ["first queued=True", "second queued=True"]
    assert waiting(tmp_path / "queue") == 0 and not os.listdir(tmp_path / "queue"), "every ticket removed"
    _take(pool, tmp_path, timeout=0)  # nobody waits: taken at once


def test_a_waiter_killed_in_line_does_not_block_the_line(tmp_path: Path) -> None:
    pool = SlotPool(tmp_path / "slots", 1)
    held = pool.try_acquire()
    assert held is not None
    dead = _start(tmp_path, "dead")
    dead.send_signal(signal.SIGKILL)
    dead.wait(10)
    alive = _start(tmp_path, "alive")
    held.release()
    assert alive.wait(60) == 0
    assert (tmp_path / "order").read_text().splitlines() == ["alive queued=True"]
    assert os.listdir(tmp_path / "queue") == [], "the dead waiter's ticket was removed"


def test_a_ticket_counts_only_live_waiters_ahead(tmp_path: Path) -> None:
    a, b = Ticket(tmp_path), Ticket(tmp_path)
    assert (a.ahead(), b.ahead()) == (0, 1)
    a.close()
    assert b.ahead() == 0 and waiting(tmp_path) == 1
    b.close()
    assert waiting(tmp_path) == 0


def test_the_default_slot_count_is_one_for_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_CONTAINERS_ENV, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")  # no longer the run's own -n x concurrency
    assert DockerOptions(concurrency=5).default_slots() == max(4, 2 * (os.cpu_count() or 1))
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "6")
    assert host_slots() == 6 and DockerOptions().default_slots() == 6
    assert DockerOptions(slots_per_engine=2).default_slots() == 2, "the spec's slots_per_engine first"
    monkeypatch.setenv(MAX_CONTAINERS_ENV, "many")
    with pytest.raises(MakaUserError, match=r"^\$MAKA_DOCKER_MAX_CONTAINERS: expected a whole number"):
        host_slots()


def test_a_poll_checks_only_as_many_tickets_as_there_are_free_slots(tmp_path: Path) -> None:
    """With hundreds in line, a waiter's poll must not open every ticket ahead of it: it only needs
    to know whether fewer wait ahead than slots are free. Dead tickets met on the way still go."""
    line = [Ticket(tmp_path) for _ in range(6)]
    last = Ticket(tmp_path)
    line[0].close()
    os.close(line[1].fd)  # its waiter died: the file stays, nobody holds it
    line[1].fd = -1
    assert last.ahead(limit=2) == 2
    assert not (tmp_path / line[1].name).exists(), "the dead ticket met on the way was removed"
    assert last.ahead(limit=0) == 0 and last.ahead() == 4 and waiting(tmp_path, limit=3) == 3
    for ticket in line[2:]:
        ticket.close()
    assert last.ahead(limit=2) == 0
    last.close()
