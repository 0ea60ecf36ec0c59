"""Many cells at once in one pytest process, one item per cell as before.

pytest runs items one at a time. With ``--maka-concurrency N`` the item being run looks
ahead over the items this process owns (the rest of the session's items, or the items
xdist has sent this worker and not yet run) and starts their cells on a pool of N
threads, in collection order; each item's ``runtest`` then waits for its own cell's
record and reports it exactly as a serial run would. What is never started ahead:
skipped items, items whose lease or workspace fixture a conftest overrides (pytest sets
fixtures up one item at a time, so such a cell starts when its item runs, with its
fixtures), cells that already have a result in the ledger (resumed), and anything once
``-x`` / ``--maxfail`` has stopped the session.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from ..core.record_model import AttemptRecord
from ..core.records import read_record
from ..scale.pool import CellPool, Job
from ..store.ledger import Ledger
from . import compat
from .collect import CELL_FIXTURES, CellItem

if TYPE_CHECKING:
    from ..engine import Engine

#: How long a waiting item sleeps between looks at the pool (also the live view's tick).
TICK_SEC = 0.5
#: How long Ctrl-C waits for the interrupted cells to record themselves and clean up.
ABORT_WAIT_SEC = 120.0


class ItemSource(Protocol):
    """The items this process will run after ``current``, in order."""

    def upcoming(self, current: pytest.Item) -> Iterable[pytest.Item]: ...

    def passed(self, item: pytest.Item) -> None:
        """``item`` was looked at (started or found not to be startable ahead)."""
        ...


class SessionItems:
    """Without xdist: the session's items after the current one (after -k, --lf, deselection)."""

    def __init__(self, session: pytest.Session) -> None:
        self.items = session.items
        self.index = {item.nodeid: i for i, item in enumerate(self.items)}
        self.cursor = 0

    def upcoming(self, current: pytest.Item) -> Iterator[pytest.Item]:
        start = max(self.cursor, self.index.get(current.nodeid, -1) + 1)
        for i in range(start, len(self.items)):
            yield self.items[i]

    def passed(self, item: pytest.Item) -> None:
        i = self.index.get(item.nodeid)
        if i is not None:
            self.cursor = max(self.cursor, i + 1)


class LedgerFollower:
    """Reads the lines other processes append to the attempts ledger, from where it left off."""

    def __init__(self, ledger: Ledger) -> None:
        self.path = ledger.path
        self.offset = 0

    def new_records(self) -> list[AttemptRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                out.append(read_record(json.loads(line)))
            except ValueError:
                continue  # a torn line from a crash (the ledger's own read names it)
        return out


def prestartable(item: pytest.Item) -> bool:
    """Can this item's cell start before the item runs, with the default fixtures?"""
    if not isinstance(item, CellItem):
        return False
    if any(True for _ in item.iter_markers("skip")) or any(True for _ in item.iter_markers("skipif")):
        return False
    return all(compat.fixture_module(item, name) == "pytest_maka.plugin.fixtures" for name in CELL_FIXTURES)


class Lookahead:
    """Starts cells ahead of their items on a CellPool; one per pytest process."""

    def __init__(self, engine: Engine, session: pytest.Session, size: int, source: ItemSource) -> None:
        self.engine = engine
        self.session = session
        self.pool = CellPool(size)
        self.source = source
        self.jobs: dict[str, Job] = {}
        self.follower = LedgerFollower(engine.ledger)
        self.aborted = False
        #: Called while an item waits for its cell (the live view redraws from here).
        self.on_wait: list[Callable[[], None]] = []

    # -- the item being run -------------------------------------------------------------
    def record_for(self, item: CellItem) -> AttemptRecord:
        """Start (if not yet started) and wait for ``item``'s cell; start upcoming ones meanwhile."""
        engine = self.engine
        job = self.jobs.pop(item.nodeid, None)
        try:
            if job is None:
                self._learn()
                funcargs = item.funcargs  # type: ignore[attr-defined]
                if engine.runner.resumable(item.cell) is not None:
                    self._fill(item)
                    return engine.run_cell(item.cell, funcargs["executor_lease"], funcargs["maka_workspace"])
                job = self._start(item, funcargs["executor_lease"], funcargs["maka_workspace"])
            self._fill(item)
            while not job.done.is_set():
                for callback in self.on_wait:
                    callback()
                self.pool.wait_any(TICK_SEC)
                if not job.done.is_set():  # once it is done, report it before starting more (-x)
                    self._fill(item)
        except KeyboardInterrupt:
            self.abort()
            # A fresh one, with no context: the signal's may hold a frame interrupted at an
            # instruction with no line number (CPython 3.11), and pytest's report of the
            # interrupt then fails on it (seen in CI: exit 1 instead of 2).
            raise KeyboardInterrupt from None
        return job.outcome()

    # -- looking ahead -----------------------------------------------------------------
    def _stopping(self) -> bool:
        return self.aborted or bool(self.session.shouldfail or self.session.shouldstop)

    def _fill(self, current: pytest.Item) -> None:
        if self._stopping() or self.pool.free <= 0:
            return
        self._learn()
        engine = self.engine
        for item in self.source.upcoming(current):
            if self.pool.free <= 0:
                return
            if item.nodeid not in self.jobs and prestartable(item):
                assert isinstance(item, CellItem)
                if engine.runner.resumable(item.cell) is None:
                    self._start(item, engine.lease(), engine.workspace(item.cell))
            self.source.passed(item)

    def _start(self, item: CellItem, lease: Any, workspace: Path) -> Job:
        engine, cell = self.engine, item.cell
        job = self.pool.submit(item.nodeid, lambda: engine.run_cell(cell, lease, workspace))
        self.jobs[item.nodeid] = job
        return job

    def _learn(self) -> None:
        """Before a cell starts: take in what other workers recorded (a lost worker's cells)."""
        records = self.follower.new_records()
        if records:
            self.engine.runner.learn(records)

    # -- ending ------------------------------------------------------------------------
    def abort(self) -> None:
        """Ctrl-C: interrupt every running cell (each records agent_aborted) and start no more."""
        if self.aborted:
            return
        self.aborted = True
        self.pool.cancel_all()
        deadline = time.monotonic() + ABORT_WAIT_SEC
        while time.monotonic() < deadline:
            try:  # more interrupts (a second Ctrl-C, xdist tearing workers down) wait too
                if self.pool.drain(deadline - time.monotonic()):
                    return
            except KeyboardInterrupt:
                self.pool.cancel_all()

    def finish(self, interrupted: bool) -> None:
        """End of session: cells still running finish (after -x) or are aborted (Ctrl-C)."""
        try:
            if interrupted:
                self.abort()
            else:
                self.pool.drain()
        except KeyboardInterrupt:
            self.abort()
        finally:
            self.pool.close()
