"""Ctrl-C handling: the first one stops the run, later ones wait until it is recorded.

``first_ctrl_c_only()`` is installed for a whole pytest session (controller and workers):
the first SIGINT raises KeyboardInterrupt as usual; further ones print a note and are
otherwise ignored, so a second Ctrl-C cannot cut the ledger line, the cleanup or the
derived files the first one set in motion. ``sigint_deferred()`` holds SIGINT around one
short step (writing a ledger line, removing a container) and raises afterwards when the
held one is the run's first.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_seen = [0]  # Ctrl-Cs received while first_ctrl_c_only() is active
_active = [False]


def _count() -> bool:
    """Count one Ctrl-C; True when it should stop the run (the first, or any outside a session)."""
    _seen[0] += 1
    return _seen[0] == 1 or not _active[0]


def _on_sigint(signum: int, frame: Any) -> None:
    if _count():
        raise KeyboardInterrupt
    sys.stderr.write("\nmaka: already stopping; the attempts that were running are being recorded\n")


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def first_ctrl_c_only() -> Iterator[None]:
    """For the block: the first Ctrl-C raises KeyboardInterrupt, later ones are held off.

    Does nothing outside the main thread or when SIGINT is not at Python's default
    handler (e.g. a process that ignores it).
    """
    if not _main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _seen[0], _active[0] = 0, True
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        _active[0] = False
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def sigint_deferred() -> Iterator[list[int]]:
    """Hold SIGINT until the block ends; then raise KeyboardInterrupt if a held one is the
    run's first. Yields the list of signals held. In another thread, shields the block from
    a cancel of the cell (``core.cancel``) instead."""
    received: list[int] = []
    if not _main_thread():  # a pool thread (--maka-concurrency): a cancel waits for the block
        from .cancel import shielded

        with shielded():
            yield received
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)
    if any([_count() for _ in received]):
        raise KeyboardInterrupt
