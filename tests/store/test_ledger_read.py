"""Reading the ledger: an unchanged file is typed once, and every change (an append by another
process, a torn line completed, a file replaced) is seen by the next read."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pytest_maka.core.records import SCHEMA
from pytest_maka.store.ledger import Ledger


def _line(cell_key: str, status: str = "agent_failure") -> str:
    fields = {"cell_id": cell_key, "task": "t", "subject": "s", "finished_at": "2026-01-01T00:00:00+00:00"}
    record = {"schema": SCHEMA, "cell_key": cell_key, "attempt": 1, "status": status, **fields}
    return json.dumps(record) + "\n"


def test_an_unchanged_ledger_is_typed_once_and_every_change_is_read(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.append(json.loads(_line("a")))
    first = ledger.read()
    again = ledger.read()
    assert [r.cell_key for r in again] == ["a"]
    assert again[0] is first[0], "the unchanged file was not typed again"
    again.append(first[0])  # the caller's list is its own
    assert len(ledger.read()) == 1

    with (tmp_path / "attempts.jsonl").open("a") as fh:  # another process appends
        fh.write(_line("b"))
    assert [r.cell_key for r in ledger.read()] == ["a", "b"]

    path = tmp_path / "attempts.jsonl"
    replaced = tmp_path / "replacement"
    replaced.write_text(_line("a", "agent_success") + _line("b"))  # same size? a new inode either way
    os.replace(replaced, path)
    assert [r.status for r in ledger.read()] == ["agent_success", "agent_failure"]


def test_a_bad_line_is_named_on_every_read_not_only_the_first(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    (tmp_path / "attempts.jsonl").write_text(_line("a") + '{"schema": "' + SCHEMA + '", "cell_key": 3}\n')
    assert len(ledger.read()) == 1 and len(ledger.read_problems) == 1
    ledger.read_problems = []
    assert len(ledger.read()) == 1 and len(ledger.read_problems) == 1, "a cached read names its problems too"
