"""Reading a ledger that may not be ours (``maka report`` / ``maka compare``): every line checked.

A line that is not UTF-8 or not JSON, a record of another schema (or of a newer version of
this one), a missing or mistyped field: each is one error naming the file, the line and the
field, before any view is built. A record of an earlier version is read in the current
version's shape (``core.records.upgrade``), then typed (``core.record_model.AttemptRecord``).
A torn last line (a crash mid-write, no newline after it) is skipped, as the ledger itself does.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ..core.errors import MakaUserError
from ..core.record_model import AttemptRecord
from ..core.records import SCHEMA, SCHEMA_PREFIX, SCHEMA_VERSION, schema_version, upgrade
from ..core.validation import first_error


class LedgerError(MakaUserError):
    """A ledger line the views cannot use."""


def read_ledger(path: Path) -> list[AttemptRecord]:
    """Every attempt in ``path``, typed (:class:`AttemptRecord`); LedgerError otherwise."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise LedgerError(path, None, f"cannot read the ledger: {e.strerror or e}") from None
    lines = data.split(b"\n")
    torn = len(lines) - 1  # index of the text after the last newline ("" when none)
    records: list[AttemptRecord] = []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        where = f"line {index + 1}"
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise LedgerError(path, where, "not valid UTF-8") from None
        except RecursionError:
            raise LedgerError(path, where, "a JSON value nested too deeply to read") from None
        except ValueError:
            if index == torn:
                continue  # a torn last line from a crash mid-write
            raise LedgerError(path, where, "not a JSON record (is this a pytest-maka attempts ledger?)") from None
        if not isinstance(record, dict):
            raise LedgerError(path, where, f"expected a JSON object (schema {SCHEMA}), got {type(record).__name__}")
        version = schema_version(record.get("schema"))
        if version is None:
            expected = f"expected {SCHEMA_PREFIX}N (N = 1 to {SCHEMA_VERSION})"
            raise LedgerError(path, f"{where}: schema", f"{expected}, got {record.get('schema')!r}")
        if version > SCHEMA_VERSION:
            raise LedgerError(
                path,
                f"{where}: schema",
                f"{record['schema']} was written by a newer pytest-maka; this one reads up to {SCHEMA}: upgrade it",
            )
        try:
            records.append(AttemptRecord.model_validate(upgrade(record)))
        except ValidationError as e:
            err = first_error(e, path, model=AttemptRecord, error=LedgerError)
            raise LedgerError(path, f"{where}: {err.key}" if err.key else where, err.message) from None
    return records
