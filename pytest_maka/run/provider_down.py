"""Which subjects' providers this run already found unusable: their remaining cells are not run.

An attempt whose provider answered none of its model requests (core/provider.py) records
why in ``agent.provider_unusable``. Every process that runs attempts (the controller, each
xdist worker) appends to the one attempts ledger, so the ledger is where they learn it of each
other: ``ProviderDown`` reads what was appended since its last look (this run's attempts
only: a resumed output directory's older attempts may have had another key).
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..store.tail import LedgerTail


class ProviderDown:
    """Subject name -> the first of this run's attempts that found its provider unusable."""

    def __init__(self, ledger: Path, since: float) -> None:
        self._tail = LedgerTail(ledger, since)
        self._down: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, subject: str) -> str | None:
        """Why ``subject``'s cells should not run (its provider was unusable in a cell), or None."""
        with self._lock:
            new = self._tail.new_attempts()
            if self._tail.restarted:
                self._down = {}
            for record in new:
                why = record.agent.provider_unusable if record.agent is not None else None
                if why and record.subject not in self._down:
                    self._down[record.subject] = f"{why} (in cell {record.cell_id}, attempt {record.attempt})"
            return self._down.get(subject)
