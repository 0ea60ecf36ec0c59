"""What the whole run has spent so far (``budgets.cohort_max_cost_usd``), shared between processes.

Every process that runs attempts (the controller, each xdist worker, a pool thread) appends
each finished attempt to the one ledger under its file lock, so the ledger is the run's
shared account: ``CohortSpend`` sums ``usage.cost_usd`` of the attempts that started since
this run began (a resumed output directory's older attempts are not this run's spend),
reading only what was appended since its last look. An attempt still running elsewhere
counts once it is written; the running attempt adds its own metered spend (presets/meter.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..store.tail import LedgerTail


class CohortSpend:
    """USD spent by this run's finished attempts, read incrementally from the attempts ledger."""

    def __init__(self, ledger: Path, since: float) -> None:
        self._tail = LedgerTail(ledger, since)
        self._spent = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            new = self._tail.new_attempts()
            if self._tail.restarted:
                self._spent = 0.0
            for record in new:
                cost = record.usage.cost_usd if record.usage is not None else None
                if cost is not None and cost > 0:
                    self._spent += float(cost)
            return self._spent
