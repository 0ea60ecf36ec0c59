"""Many threads of one process appending to the ledger (cells finishing at once)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_maka.core.records import SCHEMA
from pytest_maka.store.ledger import Ledger

THREADS = 24
#: Where a thread blocked in ``append`` can be: handing its line in for the next group commit
#: (``_commit``), the process's lock (in ``locked``) or the file lock.
WAITS = (":_commit", ":locked", "filelock")


def _line(cell_key: str) -> dict[str, object]:
    """The smallest record the ledger writes (the fields every reader needs)."""
    fields = {"cell_id": cell_key, "task": "t", "subject": "s", "finished_at": "2026-01-01T00:00:00+00:00"}
    return {"schema": SCHEMA, "cell_key": cell_key, "attempt": 1, "status": "agent_failure", **fields}


def _frames_of(threads: list[threading.Thread]) -> list[list[str]]:
    frames = sys._current_frames()
    out = []
    for t in threads:
        frame, names = frames.get(t.ident or -1), []
        while frame is not None:
            names.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
            frame = frame.f_back
        out.append(names)
    return out


def test_waiting_threads_queue_on_the_process_lock_not_the_file_lock(tmp_path: Path) -> None:
    """While the ledger is held, every other thread of the process waits on the process's
    lock (no CPU) and none polls the file lock; once released, every line lands whole."""
    ledger = Ledger(tmp_path)
    threads = [threading.Thread(target=ledger.append, args=(_line(f"c{i}"),)) for i in range(THREADS)]
    with ledger.locked():
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while True:  # until every thread is blocked inside append
            stacks = _frames_of(threads)
            if all(any(n.endswith(":append") for n in s) and any(w in n for n in s for w in WAITS) for s in stacks):
                break
            assert time.monotonic() < deadline, stacks
            time.sleep(0.01)
        polling = [s for s in _frames_of(threads) if any("filelock" in n for n in s)]
        assert not polling, f"threads poll the file lock while the process holds the ledger: {polling[:2]}"
        assert not (tmp_path / "attempts.jsonl").exists(), "nothing is written while the lock is held"
    for t in threads:
        t.join(60)
    lines = (tmp_path / "attempts.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["cell_key"] for line in lines) == sorted(f"c{i}" for i in range(THREADS))


def test_two_ledgers_of_one_file_exclude_each_other(tmp_path: Path) -> None:
    first, second = Ledger(tmp_path), Ledger(tmp_path)
    done = threading.Event()

    def write() -> None:
        second.append(_line("late"))
        done.set()

    with first.locked():
        writer = threading.Thread(target=write)
        writer.start()
        first.append(_line("early"))  # re-entrant while held
        assert not done.wait(0.2), "another Ledger of the same file appended while the lock was held"
    writer.join(60)
    keys = [json.loads(line)["cell_key"] for line in (tmp_path / "attempts.jsonl").read_text().splitlines()]
    assert keys == ["early", "late"]


def test_lines_handed_in_while_the_ledger_is_held_are_written_with_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: the threads that queue while the ledger is held are written together,
    and each append returns only once its own line is in the file, fsynced."""
    ledger = Ledger(tmp_path)
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        real_fsync(fd)
        fsyncs.append(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    seen_after_return: dict[str, bool] = {}

    def append(i: int) -> None:
        ledger.append(_line(f"c{i}"))
        on_disk = (tmp_path / "attempts.jsonl").read_text().splitlines()
        seen_after_return[f"c{i}"] = any(json.loads(line)["cell_key"] == f"c{i}" for line in on_disk)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(THREADS)]
    with ledger.locked():
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while not all(any(n.endswith(":append") for n in s) for s in _frames_of(threads)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        while len(ledger._shared.queue) < THREADS:  # every line handed in
            assert time.monotonic() < deadline
            time.sleep(0.01)
    for t in threads:
        t.join(60)
    assert len(fsyncs) == 1, f"{THREADS} lines queued behind one lock took {len(fsyncs)} fsyncs"
    assert seen_after_return == {f"c{i}": True for i in range(THREADS)}
    lines = (tmp_path / "attempts.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["cell_key"] for line in lines) == sorted(f"c{i}" for i in range(THREADS))


def test_a_failed_group_write_fails_every_append_of_the_group(tmp_path: Path) -> None:
    """A group whose write fails raises in every thread of the group: no append returns as if
    its line were recorded."""
    ledger = Ledger(tmp_path)
    (tmp_path / "attempts.jsonl").mkdir()  # opening it for append fails (IsADirectoryError)
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            ledger.append(_line(f"c{i}"))
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    with ledger.locked():
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(ledger._shared.queue) < 8:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    for t in threads:
        t.join(60)
    assert len(errors) == 8 and all(isinstance(e, IsADirectoryError) for e in errors)
