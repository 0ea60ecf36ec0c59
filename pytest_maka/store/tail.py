"""The attempts ledger read as it grows: this run's attempts, typed, each once.

Every process that runs attempts (the controller, each xdist worker, a pool thread) appends
each finished attempt to the one ledger under its file lock, so the ledger is where they learn
of each other's attempts (the run's spend, a provider found unusable). ``LedgerTail`` reads only
what was appended since its last look and keeps the attempts that started since this run began
(a resumed output directory's older attempts are another run's). A line being written is left
for the next look; a line that is not a record of any version is skipped.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from ..core.record_model import AttemptRecord
from ..core.records import read_record, utc_iso


class LedgerTail:
    """Reads the attempts ledger incrementally; ``restarted`` is set when the file was cut."""

    def __init__(self, ledger: Path, since: float) -> None:
        self.ledger = ledger
        self.since = _when(utc_iso(since))
        self._offset = 0
        self.restarted = False

    def new_attempts(self) -> list[AttemptRecord]:
        """This run's attempts appended since the last call (all of them again after a cut:
        a torn tail moved aside shortens the file, and ``restarted`` then says so)."""
        self.restarted = False
        try:
            with self.ledger.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size < self._offset:
                    self._offset, self.restarted = 0, True
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:  # nothing complete yet (a line being written)
            return []
        self._offset += end + 1
        records = (_record(raw) for raw in data[:end].split(b"\n"))
        return [r for r in records if r is not None and self._of_this_run(r)]

    def _of_this_run(self, record: AttemptRecord) -> bool:
        if self.since is None:
            return True
        started = _when(record.started_at or "")
        return started is not None and started >= self.since


def _record(raw: bytes) -> AttemptRecord | None:
    try:
        data = json.loads(raw)
        return read_record(data) if isinstance(data, dict) else None
    except (ValueError, ValidationError):
        return None


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
