"""Cancelling a cell that runs on another thread of this process (Ctrl-C with N cells in flight).

Only the main thread receives Ctrl-C. A cell running on a pool thread runs inside a
``Scope``; ``Scope.cancel()`` (called from the main thread) raises KeyboardInterrupt in the
cell's thread, then runs the callbacks the code below registered with ``on_cancel`` (kill
the process tree a blocking wait is waiting on), so the lifecycle's own Ctrl-C path runs
unchanged there: the attempt is recorded ``agent_aborted`` and its lease released.
Code that must not be torn (a ledger line, a container's removal) runs under
``shielded()``: a cancel that arrives meanwhile is raised when the section ends.
Outside a scope (the main thread, serial runs) every function here is a no-op.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

_local = threading.local()


def _raise_in(thread: threading.Thread) -> None:
    """Ask CPython to raise KeyboardInterrupt in ``thread`` at its next bytecode."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))


class Scope:
    """The cancellable extent of one cell on one thread (enter it on that thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._shield = 0
        self._pending = False
        self.cancelled = False

    def __enter__(self) -> Scope:
        with self._lock:
            self._thread = threading.current_thread()
        _local.scope = self
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._thread = None
            self._pending = False
        _local.scope = None

    def cancel(self) -> bool:
        """Interrupt the cell's thread; False if it is not (or no longer) inside the scope."""
        with self._lock:
            if self._thread is None or self.cancelled:
                return False
            self.cancelled = True
            callbacks = list(self._callbacks)
            if self._shield:
                self._pending = True
            else:
                _raise_in(self._thread)
        for callback in callbacks:
            with suppress(Exception):
                callback()
        return True

    def _add(self, callback: Callable[[], None]) -> bool:
        with self._lock:
            if self.cancelled:
                return False
            self._callbacks.append(callback)
            return True

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._lock, suppress(ValueError):
            self._callbacks.remove(callback)

    def _enter_shield(self) -> None:
        with self._lock:
            self._shield += 1

    def _leave_shield(self) -> None:
        with self._lock:
            self._shield -= 1
            fire = self._shield == 0 and self._pending
            if fire:
                self._pending = False
        if fire:
            raise KeyboardInterrupt


def current() -> Scope | None:
    """The scope of the cell this thread is running, if any."""
    return getattr(_local, "scope", None)


@contextmanager
def on_cancel(callback: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a cancel of this thread's cell also calls ``callback``."""
    scope = current()
    if scope is None:
        yield
        return
    if not scope._add(callback):
        raise KeyboardInterrupt  # cancelled before the blocking call even started
    try:
        yield
    finally:
        scope._remove(callback)


@contextmanager
def shielded() -> Iterator[None]:
    """Run the block whole: a cancel that arrives meanwhile takes effect when it ends."""
    scope = current()
    if scope is None:
        yield
        return
    scope._enter_shield()
    try:
        yield
    finally:
        scope._leave_shield()
