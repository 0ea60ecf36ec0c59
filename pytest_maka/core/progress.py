"""Where a running attempt is: the phase events behind the live view and the attempt hooks.

The lifecycle opens ``attempt_scope(observer, cell, number)`` around each attempt; code
running for that attempt on the same thread (the lifecycle's phases, an executor building
an image) calls ``phase(name, detail)``, which reaches the observer without any of that
code knowing about hooks, threads or views. Outside a scope ``phase`` does nothing.

The phase of every open attempt of the process is also kept here, so that work that can
wait (a sandbox set up ahead) runs only while every attempt waits on its subject
(``all_waiting``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from .cell import Cell
from .record_model import AttemptRecord

#: Phase names the kernel reports, in lifecycle order ("building image" and "waiting for a
#: container slot" come from the Docker executor; "queued on the cluster" is what the
#: controller shows of an attempt no Dask worker has started).
PROGRESS_PHASES = (
    "queued on the cluster",
    "installing agent",
    "waiting for a container slot",
    "setup",
    "building image",
    "agent",
    "freeze",
    "restore",
    "verify",
    "collect",
    "teardown",
)


class AttemptObserver(Protocol):
    """Receives the progress of every attempt of this process (may be called from any thread)."""

    def attempt_started(self, cell: Cell, attempt: int) -> None: ...

    def phase(self, cell: Cell, attempt: int, phase: str, detail: str | None) -> None: ...

    def attempt_finished(self, cell: Cell, record: AttemptRecord) -> None: ...


#: The phase of an attempt whose subject's agent is being installed into the cache (first use);
#: the live view prints a line for it.
INSTALL_PHASE = "installing agent"

#: The phase of an attempt whose lease waits for a slot shared by every run on the host
#: (``executors.capabilities.SharedCapacity``); the wait is ``timings.slot_wait``.
SLOT_WAIT_PHASE = "waiting for a container slot"

#: The phase in which an attempt waits on its subject (the harness itself is idle).
WAITING_PHASE = "agent"


@dataclass(frozen=True, eq=False)
class _Scope:
    observer: AttemptObserver | None
    cell: Cell
    attempt: int


_current: ContextVar[_Scope | None] = ContextVar("maka_attempt", default=None)
_lock = threading.Lock()
#: The current phase of every open attempt scope of this process ("" before the first).
_open: dict[_Scope, str] = {}


@contextmanager
def attempt_scope(observer: AttemptObserver | None, cell: Cell, attempt: int) -> Iterator[None]:
    """Report ``attempt_started`` and route ``phase()`` calls of this thread to ``observer``."""
    if observer is not None:
        observer.attempt_started(cell, attempt)
    scope = _Scope(observer, cell, attempt)
    token = _current.set(scope)
    with _lock:
        _open[scope] = ""
    try:
        yield
    finally:
        with _lock:
            _open.pop(scope, None)
        _current.reset(token)


def attempt_finished(record: AttemptRecord) -> None:
    """The current attempt's record has been written to the ledger."""
    scope = _current.get()
    if scope is not None and scope.observer is not None:
        scope.observer.attempt_finished(scope.cell, record)


def phase(name: str, detail: str | None = None) -> None:
    """The current attempt entered phase ``name`` (``detail``: e.g. a build step)."""
    scope = _current.get()
    if scope is None:
        return
    with _lock:
        if scope in _open:
            _open[scope] = name
    if scope.observer is not None:
        scope.observer.phase(scope.cell, scope.attempt, name, detail)


def all_waiting() -> bool:
    """True when every open attempt of this process waits on its subject (or none is open)."""
    with _lock:
        return all(p == WAITING_PHASE for p in _open.values())
