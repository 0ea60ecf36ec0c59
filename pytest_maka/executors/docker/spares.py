"""Containers started ahead of time, so that a lease does not wait for a container to start.

A spare is a never-used container of one environment (image and limits). It is made
only for environments this process has already leased twice (a cohort with several
subjects or repetitions per task), at most one per environment, in a background thread;
a lease takes it instead of starting a container of its own. Spares carry the run and
owner labels (``cell`` says ``spare``); the lease that takes one names the cell in the
container's name. They are removed by ``close()``, at interpreter exit, and, after a
crash, by the dead-owner sweep.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .processes import Keepers


@dataclass
class Spare:
    container_id: str
    info: dict[str, Any]
    keepers: Keepers = field(default_factory=Keepers)


class Spares:
    """At most one started spare per key; ``make(key)`` builds one, ``dispose(spare)`` removes it."""

    def __init__(self, make: Callable[[Hashable], Spare], dispose: Callable[[Spare], None]) -> None:
        self._make = make
        self._dispose = dispose
        self._lock = threading.Lock()
        self._ready: dict[Hashable, Future[Spare]] = {}
        self._uses: Counter[Hashable] = Counter()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        atexit.register(self.close)

    def take(self, key: Hashable) -> Spare | None:
        """The spare for ``key`` (waiting for it to finish starting), or None."""
        with self._lock:
            self._uses[key] += 1
            future = self._ready.pop(key, None)
        if future is None:
            return None
        try:
            return future.result(timeout=120)
        except Exception:
            return None  # the caller starts a container itself and reports any error

    def refill(self, key: Hashable) -> None:
        """Start the next spare for ``key`` in the background if the key is worth it."""
        with self._lock:
            if self._closed or key in self._ready or self._uses[key] < 2:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="maka-docker-spare")
            self._ready[key] = self._pool.submit(self._make, key)

    def close(self) -> None:
        """Remove every spare (waits for those still starting)."""
        with self._lock:
            self._closed = True
            pending, self._ready = list(self._ready.values()), {}
            pool, self._pool = self._pool, None
        for future in pending:
            with contextlib.suppress(Exception):  # engine gone: the dead-owner sweep removes it
                self._dispose(future.result(timeout=120))
        if pool is not None:
            pool.shutdown(wait=True)
