"""A cohort-wide allowance of retries, shared by every process of one run.

The count lives in ``.retries`` in the output directory, changed under a file lock and
keyed by the run (the controller's start time), so xdist workers draw from one pool and
the next run starts from zero.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock

RETRIES_FILE = ".retries"


class RetryAllowance:
    """``take()`` spends one retry of the run's ``limit``; False once they are used up."""

    def __init__(self, out_dir: Path, run_id: str, limit: int) -> None:
        self.path = Path(out_dir) / RETRIES_FILE
        self.run_id = run_id
        self.limit = limit
        self._lock = FileLock(str(self.path) + ".lock")

    def _read(self) -> int:
        try:
            run, used = self.path.read_text().split()
        except (FileNotFoundError, ValueError):
            return 0
        return int(used) if run == self.run_id and used.isdigit() else 0

    def used(self) -> int:
        with self._lock:
            return self._read()

    def take(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            used = self._read()
            if used >= self.limit:
                return False
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(f"{self.run_id} {used + 1}\n")
            os.replace(tmp, self.path)
            return True
