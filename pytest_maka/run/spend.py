"""What the whole run has spent so far (``budgets.cohort_max_cost_usd``), shared between processes.

Every process that runs attempts (the controller, each xdist worker, a pool thread) appends
each finished attempt to the one ledger under its file lock, so the ledger is the run's
shared account: ``CohortSpend`` sums ``usage.cost_usd`` of the attempts that started since
this run began (a resumed output directory's older attempts are not this run's spend),
reading only what was appended since its last look. An attempt still running elsewhere
counts once it is written; the running attempt adds its own metered spend (presets/meter.py).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from pathlib import Path

from ..core.records import utc_iso


class CohortSpend:
    """USD spent by this run's finished attempts, read incrementally from the attempts ledger."""

    def __init__(self, ledger: Path, since: float) -> None:
        self.ledger = ledger
        self.since = _when(utc_iso(since))
        self._offset = 0
        self._spent = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self._read()
            return self._spent

    def _read(self) -> None:
        try:
            with self.ledger.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size < self._offset:  # cut (a torn tail moved aside): read anew
                    self._offset, self._spent = 0, 0.0
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:  # nothing complete yet (a line being written)
            return
        self._offset += end + 1
        for raw in data[:end].split(b"\n"):
            self._spent += _cost(raw, self.since)


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _cost(raw: bytes, since: datetime | None) -> float:
    """The cost of one ledger line when it is an attempt of this run, else 0."""
    try:
        record = json.loads(raw)
    except ValueError:
        return 0.0
    if not isinstance(record, dict):
        return 0.0
    started = _when(str(record.get("started_at")))
    if since is not None and (started is None or started < since):
        return 0.0
    usage = record.get("usage")
    cost = usage.get("cost_usd") if isinstance(usage, dict) else None
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0:
        return float(cost)
    return 0.0
