"""Which subjects' providers this run already found unusable: their remaining cells are not run.

An attempt whose provider answered none of its model requests (core/provider.py) records
why in ``agent.provider_unusable``. Every process that runs attempts (the controller, each
xdist worker) appends to the one attempts ledger, so the ledger is where they learn it of each
other: ``ProviderDown`` reads what was appended since its last look (this run's attempts
only: a resumed output directory's older attempts may have had another key).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from pathlib import Path

from ..core.records import utc_iso


class ProviderDown:
    """Subject name -> the first of this run's attempts that found its provider unusable."""

    def __init__(self, ledger: Path, since: float) -> None:
        self.ledger = ledger
        self.since = _when(utc_iso(since))
        self._offset = 0
        self._down: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, subject: str) -> str | None:
        """Why ``subject``'s cells should not run (its provider was unusable in a cell), or None."""
        with self._lock:
            self._read()
            return self._down.get(subject)

    def _read(self) -> None:
        try:
            with self.ledger.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size < self._offset:  # cut (a torn tail moved aside): read anew
                    self._offset, self._down = 0, {}
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for raw in data[:end].split(b"\n"):
            found = _unusable(raw, self.since)
            if found is not None and found[0] not in self._down:
                self._down[found[0]] = found[1]


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _unusable(raw: bytes, since: datetime | None) -> tuple[str, str] | None:
    """(subject, cause) when the ledger line is an attempt of this run whose provider was unusable."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    agent = record.get("agent") if isinstance(record, dict) else None
    why = agent.get("provider_unusable") if isinstance(agent, dict) else None
    if not isinstance(why, str) or not isinstance(record.get("subject"), str):
        return None
    started = _when(str(record.get("started_at")))
    if since is not None and (started is None or started < since):
        return None
    return record["subject"], f"{why} (in cell {record.get('cell_id')}, attempt {record.get('attempt')})"
