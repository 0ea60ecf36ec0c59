"""The append-only attempts ledger and the derived results file.

The ledger (``attempts.jsonl``) is appended by whichever process ran the attempt, under
a file lock, flushed and fsynced, so a crash never loses a finished attempt. A torn last
line (a crash mid-write) is skipped when reading.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..core import cancel
from ..core.records import Record, cell_record, group_by_cell

ATTEMPTS_FILE = "attempts.jsonl"
RESULTS_FILE = "results.jsonl"


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


def read_jsonl(path: Path) -> list[Record]:
    """Every complete JSON line of ``path``; a missing file reads as empty."""
    if not path.exists():
        return []
    out: list[Record] = []
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn line from a crash mid-write
    return out


class Ledger:
    """``attempts.jsonl`` in an output directory."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / ATTEMPTS_FILE
        self._lock = FileLock(str(self.out_dir / ".attempts.lock"))

    def append(self, record: Mapping[str, Any]) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        line = _dumps(record) + "\n"
        with cancel.shielded(), self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def read(self) -> list[Record]:
        return read_jsonl(self.path)

    def cell_records(self, keys: Iterable[str] | None = None) -> list[Record]:
        """One record per cell (earliest final attempt wins), optionally only for ``keys``."""
        wanted = set(keys) if keys is not None else None
        groups = group_by_cell(self.read())
        return [cell_record(attempts) for key, attempts in groups.items() if wanted is None or key in wanted]


def write_results(out_dir: Path, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``results.jsonl`` atomically (write a temp file, then rename)."""
    path = Path(out_dir) / RESULTS_FILE
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(_dumps(record) + "\n")
    os.replace(tmp, path)
    return path
