"""Holding a Ctrl-C while something that must finish (a ledger line, a cleanup) is done."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigint_deferred(*, reraise: bool = True) -> Iterator[list[int]]:
    """Hold SIGINT until the block ends; then raise KeyboardInterrupt if one arrived.

    Yields the list of signals received. With ``reraise=False`` the caller decides what a
    held Ctrl-C means. Outside the main thread (where signals cannot be handled) it does
    nothing.
    """
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and reraise:
        raise KeyboardInterrupt
