"""The append-only attempts ledger and the derived results file.

The ledger (``attempts.jsonl``) is appended by whichever process ran the attempt, under
a file lock, flushed and fsynced, so a crash never loses a finished attempt. Threads of
one process first queue on a lock of the process (one per ledger file), so at most one of
them at a time waits on the file lock: a file lock is waited for by polling, and hundreds
of cells finishing at once would otherwise spend the process's CPU polling it.

Appends of one process are committed in groups: the lines that threads hand in while a
write is under way are written together by the next writer, under the locks, with one
fsync for all of them. Every ``append`` still returns only once its own line is fsynced
(a crash loses no line whose append returned), and lines are never split or interleaved.

A crash mid-write leaves a torn last line (no ``"\\n"``). Readers skip it and report it;
the next append, under the lock, first repairs the file: a tail that is a complete JSON
object is terminated, anything else is moved aside to ``attempts.torn`` (never deleted)
and cut from the ledger, so the new record never lands on the torn line. A malformed
line anywhere else is reported with its line number and skipped, never silently.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import ValidationError

from ..core import cancel
from ..core.record_model import AttemptRecord, RecordError, describe
from ..core.records import SCHEMA_VERSION, JsonRecord, cell_record, group_by_cell, schema_version, upgrade
from .redact import Redactor

ATTEMPTS_FILE = "attempts.jsonl"
RESULTS_FILE = "results.jsonl"
TORN_FILE = "attempts.torn"
#: Fields every ledger line must have for the readers that group attempts into cells.
REQUIRED_FIELDS = ("cell_key", "attempt", "status")


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)


def checked(record: AttemptRecord | Mapping[str, Any]) -> AttemptRecord:
    """``record`` as the typed model the line is written from; RecordError (one line naming the
    key) when a field does not have the schema's type."""
    try:
        return AttemptRecord.of(record)
    except ValidationError as e:
        raise RecordError(f"not written: {describe(e, record)}") from None


def record_line(record: AttemptRecord | Mapping[str, Any]) -> str:
    """One JSONL line of ``record``, checked against the typed model (the keys it holds, in their order)."""
    return _dumps(checked(record).to_json()) + "\n"


@dataclass
class JsonlScan:
    """What a JSONL file holds: its records and one line per problem found."""

    records: list[JsonRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn_tail: bool = False


def _problem(raw: bytes, required: tuple[str, ...]) -> tuple[JsonRecord | None, str | None]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except ValueError as e:
        return None, f"not JSON ({e.msg} at column {e.colno})"
    if not isinstance(value, dict):
        return None, f"not a JSON object (a {type(value).__name__})"
    missing = [k for k in required if k not in value]
    if missing:
        return None, f"missing field {missing[0]!r}"
    return value, None


def scan_jsonl(path: Path, *, required: tuple[str, ...] = ()) -> JsonlScan:
    """Every valid JSON-object line of ``path``; a missing file scans as empty.

    A last line without ``"\\n"`` that does not parse is a torn write (a crash, or a write
    still in progress): skipped and reported as such. Any other bad line is reported with
    its number and skipped.
    """
    scan = JsonlScan()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return scan
    lines = data.split(b"\n")
    last = len(lines) - 1  # the piece after the final "\n" ("" when the file ends cleanly)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        record, problem = _problem(raw, required)
        if record is not None:
            scan.records.append(record)
        elif number - 1 == last:
            scan.torn_tail = True
            scan.problems.append(f"{path} line {number}: torn last line ({len(raw)} bytes, no newline); skipped")
        else:
            scan.problems.append(f"{path} line {number}: {problem}; skipped")
    return scan


def read_jsonl(path: Path) -> list[JsonRecord]:
    """Every valid line of ``path`` (see :func:`scan_jsonl` for what is skipped and reported)."""
    return scan_jsonl(path).records


def repair_torn_tail(path: Path) -> str | None:
    """Make ``path`` end with a newline before an append; the caller holds the ledger lock.

    Returns a one-line note of what was done, or None when the file already ended cleanly.
    """
    try:
        fh = path.open("r+b")
    except FileNotFoundError:
        return None
    with fh:
        size = fh.seek(0, os.SEEK_END)
        if size == 0:
            return None
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        start = size - 1
        chunk = 1 << 16
        while start > 0:  # find the last "\n" (the torn line's start)
            lo = max(0, start - chunk)
            fh.seek(lo)
            found = fh.read(start - lo).rfind(b"\n")
            if found >= 0:
                start = lo + found + 1
                break
            start = lo
        fh.seek(start)
        tail = fh.read()
        record, _ = _problem(tail, ())
        if record is not None:  # complete but unterminated: keep it where it is
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")
            note = f"{path}: terminated an unterminated last line"
        else:
            with (path.parent / TORN_FILE).open("ab") as aside:
                aside.write(tail + b"\n")
                aside.flush()
                os.fsync(aside.fileno())
            fh.truncate(start)
            note = f"{path}: moved a torn last line ({len(tail)} bytes) to {path.parent / TORN_FILE}"
        fh.flush()
        os.fsync(fh.fileno())
    return note


@dataclass(eq=False)
class _Pending:
    """One line handed in for the next group commit."""

    line: str
    done: bool = False
    error: BaseException | None = None


@dataclass(eq=False)
class _FileState:
    """What the threads of this process share for one ledger file."""

    lock: threading.RLock = field(default_factory=threading.RLock)  # taken before the file lock
    cond: threading.Condition = field(default_factory=threading.Condition)  # guards the two below
    queue: list[_Pending] = field(default_factory=list)
    writing: bool = False
    owner: threading.local = field(default_factory=threading.local)  # depth of locked() per thread


_states: dict[str, _FileState] = {}
_states_guard = threading.Lock()


def _state(path: Path) -> _FileState:
    """The process's shared state for the ledger at ``path`` (shared by every Ledger of that file)."""
    key = os.path.realpath(path)
    with _states_guard:
        return _states.setdefault(key, _FileState())


class Ledger:
    """``attempts.jsonl`` in an output directory."""

    def __init__(self, out_dir: Path, redactor: Redactor | None = None) -> None:
        self.out_dir = Path(out_dir)
        #: Scrubs the secret values of the run's subjects from every record before it is written.
        self.redactor = redactor or Redactor()
        self.path = self.out_dir / ATTEMPTS_FILE
        self._lock = FileLock(str(self.out_dir / ".attempts.lock"))
        self._shared = _state(self.path)
        self.repairs: list[str] = []  # what appends did to torn last lines (one line each)
        self.read_problems: list[str] = []  # what the latest read skipped (one line each)
        self._scanned: tuple[tuple[int, int, int], LedgerScan] | None = None  # (file identity, its scan)

    @property
    def problems(self) -> list[str]:
        return [*self.repairs, *self.read_problems]

    def append(self, record: AttemptRecord | Mapping[str, Any]) -> AttemptRecord:
        """Write ``record`` (JSON is checked against :class:`AttemptRecord` first), scrubbed of
        secrets, as one line; returns what was written, once it is fsynced. RecordError, before
        anything is written, when a field does not have the schema's type."""
        record = self.redactor.record(checked(record))  # a secret is scrubbed whatever its type
        self.out_dir.mkdir(parents=True, exist_ok=True)
        line = _dumps(record.to_json()) + "\n"
        with cancel.shielded():
            if getattr(self._shared.owner, "depth", 0):  # the caller holds the lock: write now
                self._write([line])
            else:
                self._commit(_Pending(line))
        return record

    def _commit(self, mine: _Pending) -> None:
        """Hand ``mine`` in; unless another thread is writing (and will take it), take the
        lock and write every line handed in by then, ``mine`` included."""
        shared = self._shared
        with shared.cond:
            shared.queue.append(mine)
            while shared.writing and not mine.done:
                shared.cond.wait()
            if mine.done:
                if mine.error is not None:
                    raise mine.error
                return
            shared.writing = True
        batch: list[_Pending] = []
        error: BaseException | None = None
        try:
            with self.locked():
                with shared.cond:  # every line handed in while this thread waited for the lock
                    batch, shared.queue = shared.queue, []
                self._write([p.line for p in batch])
        except BaseException as e:  # every line of the group fails with it
            error = e
        finally:
            with shared.cond:
                shared.writing = False
                for pending in batch:
                    pending.done, pending.error = True, error
                shared.cond.notify_all()
        if error is not None:
            raise error

    def _write(self, lines: list[str]) -> None:
        """Append ``lines`` in one write and fsync them; the caller holds the ledger lock."""
        note = repair_torn_tail(self.path)
        if note:
            self.repairs.append(note)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write("".join(lines))
            fh.flush()
            os.fsync(fh.fileno())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The ledger's lock, the process's then the file's (re-entrant: ``append`` may be
        called while holding it)."""
        owner = self._shared.owner
        with self._shared.lock, self._lock:
            owner.depth = getattr(owner, "depth", 0) + 1
            try:
                yield
            finally:
                owner.depth -= 1

    def scan(self) -> LedgerScan:
        """Every line of the ledger, typed; lines an earlier version wrote are read in today's
        shape; a line that fits no version's schema is skipped and named in ``problems``.

        An unchanged file (same inode, size and modification time) is not typed again: the end of
        a session reads the ledger several times (the cells' records, reconciliation, the views).
        """
        identity = _identity(self.path)
        if identity is not None and self._scanned is not None and self._scanned[0] == identity:
            cached = self._scanned[1]
            self.read_problems = list(cached.problems)
            return LedgerScan(records=list(cached.records), problems=list(cached.problems))
        raw = scan_jsonl(self.path, required=REQUIRED_FIELDS)
        scan = LedgerScan(problems=raw.problems)
        for number, record in enumerate(raw.records, start=1):
            try:
                scan.records.append(AttemptRecord.model_validate(_current(record)))
            except (ValueError, ValidationError) as e:
                why = describe(e, record) if isinstance(e, ValidationError) else str(e)
                scan.problems.append(f"{self.path} record {number}: {why}; skipped")
        self.read_problems = scan.problems
        if identity is not None and _identity(self.path) == identity:  # nothing was appended meanwhile
            self._scanned = (identity, LedgerScan(records=list(scan.records), problems=list(scan.problems)))
        return scan

    def read(self) -> list[AttemptRecord]:
        return self.scan().records

    def cell_records(self, keys: Iterable[str] | None = None) -> list[AttemptRecord]:
        """One record per cell (earliest final attempt wins), optionally only for ``keys``."""
        wanted = set(keys) if keys is not None else None
        groups = group_by_cell(self.read())
        return [cell_record(attempts) for key, attempts in groups.items() if wanted is None or key in wanted]


@dataclass
class LedgerScan:
    """The ledger's attempts, typed, and one line per problem found."""

    records: list[AttemptRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells one state of a file from another: inode, size, modification time (None: absent)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _current(record: JsonRecord) -> JsonRecord:
    """``record`` in the current schema's shape when it is of a version this one reads (else as it is)."""
    version = schema_version(record.get("schema"))
    return upgrade(record) if version is not None and version <= SCHEMA_VERSION else record


def write_results(out_dir: Path, records: Iterable[AttemptRecord | Mapping[str, Any]]) -> Path:
    """Write ``results.jsonl`` atomically (write a temp file, then rename); every record is
    checked against :class:`AttemptRecord` before the file is replaced."""
    path = Path(out_dir) / RESULTS_FILE
    lines = [record_line(r) for r in records]
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line)
    os.replace(tmp, path)
    return path
