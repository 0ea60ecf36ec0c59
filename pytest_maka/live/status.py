"""Which attempts this process is running, and in which phase: fed by the attempt hooks.

Every pytest process (the controller, each xdist worker) has one ``RunningCells``,
registered as a plugin. Attempt hooks arrive from the threads that run cells, so every
change is made under a lock. Workers publish their state to ``<out>/.live/<worker>.json``
(atomically renamed) so that the controller's view can show the phases of cells running
in other processes; the controller reads those files when it draws.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.cell import Cell
from ..core.record_model import AttemptRecord

LIVE_DIR = ".live"


@dataclass
class Running:
    """One attempt in flight."""

    cell_id: str
    subject: str
    attempt: int
    started: float
    phase: str = "setup"
    detail: str | None = None


class RunningCells:
    """The attempts in flight in this process (a plugin: implements the attempt hooks)."""

    def __init__(self, publish_to: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], Running] = {}
        self._publish_to = publish_to

    def pytest_maka_attempt_started(self, cell: Cell, attempt: int) -> None:
        with self._lock:
            self._running[(cell.key, attempt)] = Running(cell.id, cell.subject.name, attempt, time.time())
            self._publish()

    def pytest_maka_phase(self, cell: Cell, attempt: int, phase: str, detail: str | None) -> None:
        with self._lock:
            running = self._running.get((cell.key, attempt))
            if running is not None:
                running.phase, running.detail = phase, detail
                self._publish()

    def pytest_maka_attempt_finished(self, cell: Cell, record: AttemptRecord) -> None:
        with self._lock:
            self._running.pop((cell.key, record.attempt), None)
            self._publish()

    def snapshot(self) -> list[Running]:
        with self._lock:
            return [Running(**asdict(r)) for r in self._running.values()]

    def _publish(self) -> None:
        """Write the state for the controller (workers only; called under the lock)."""
        if self._publish_to is None:
            return
        data = {"running": [asdict(r) for r in self._running.values()]}
        tmp = self._publish_to.with_suffix(".tmp")
        try:
            self._publish_to.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self._publish_to)
        except OSError:
            pass  # the live view is a convenience: it never fails a cell


def read_published(out_dir: Path) -> list[Running]:
    """The running attempts the xdist workers published."""
    running: list[Running] = []
    for path in sorted((out_dir / LIVE_DIR).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            running += [Running(**r) for r in data.get("running", [])]
        except (OSError, ValueError, TypeError):
            continue
    return running
