"""Bounded waits on a Dask cluster: every wait ends, in a result or in one clear line.

Dask's own waits have no end of their own: a task that no worker can run (none has the
``cells`` resource) stays queued for ever, a ``Future.result()`` without a timeout waits as
long as the scheduler keeps the task, and a scheduler that stopped answering a connected
client is noticed by nobody. So the controller waits for an attempt in slices of
``POLL_SEC``; between two slices it checks that its client is still connected, asks the
scheduler (within ``ASK_SEC``; one question per slice for all the waiting attempts, see
``Watch``) whether a worker that can run a cell is there, and gives up
with ``ClusterStalled`` once none has been for ``no_worker_sec``. A worker that stops
answering is Dask's to notice (its heartbeats stop: the scheduler removes it and the task
runs again elsewhere, which the attempt's claim turns into a lost attempt); the attempt on
the worker is bounded by its own timeouts there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: Seconds of one wait for an attempt's result before the cluster is looked at again.
POLL_SEC = 5.0
#: Seconds a question to the scheduler may take before it counts as not answering.
ASK_SEC = 30.0
#: Client states in which a result can still arrive (``connecting``: Dask is reconnecting,
#: which it gives up on within its own timeout, closing the client).
ALIVE = frozenset({"running", "connecting", "newly-created"})
#: Worker states in which a worker still takes (or will take again) cells.
TAKING = frozenset({"init", "running", "paused"})


class ClusterStalled(Exception):
    """The cluster can no longer deliver this result; the message says why, in one line."""


def can_run_cells(worker: dict[str, Any]) -> bool:
    """Whether a worker (as the scheduler's ``identity`` lists it) can be given a cell."""
    resources = worker.get("resources") or {}
    return float(resources.get("cells", 0) or 0) >= 1 and str(worker.get("status", "running")) in TAKING


def cell_workers(client: Any, ask_sec: float = ASK_SEC) -> int:
    """How many workers of the cluster can run cells now (ClusterStalled if the scheduler is silent)."""
    try:
        info = client.sync(client.scheduler.identity, callback_timeout=ask_sec)
    except (TimeoutError, OSError) as exc:
        raise ClusterStalled(
            f"the Dask scheduler at {client.scheduler.address} did not answer within {ask_sec:g} s "
            f"({type(exc).__name__})"
        ) from None
    return sum(can_run_cells(w) for w in (info.get("workers") or {}).values())


class Watch:
    """The controller's look at the cluster, shared by every waiting attempt: at most one
    question to the scheduler per ``poll_sec``, however many attempts wait."""

    def __init__(self, client: Any, poll_sec: float = POLL_SEC, ask_sec: float = ASK_SEC) -> None:
        self.client, self.poll_sec, self.ask_sec = client, poll_sec, ask_sec
        self._lock = threading.Lock()
        self._at: float | None = None
        self._count, self._error = 0, ""

    def cell_workers(self) -> int:
        """How many workers can run cells (asked at most once per poll; ClusterStalled if silent)."""
        with self._lock:  # held at most ask_sec: the others would ask the same question meanwhile
            if self._at is None or time.monotonic() - self._at >= self.poll_sec:
                try:
                    self._count, self._error = cell_workers(self.client, self.ask_sec), ""
                except ClusterStalled as exc:
                    self._error = str(exc)
                self._at = time.monotonic()
            if self._error:
                raise ClusterStalled(self._error)
            return self._count


def result(
    watch: Watch,
    future: Any,
    no_worker_sec: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """The future's result (or the exception its task raised); ClusterStalled when the cluster
    lost the controller, or had no worker able to run a cell for ``no_worker_sec``."""
    client = watch.client
    without_since: float | None = None
    while True:
        try:
            return future.result(timeout=watch.poll_sec)
        except TimeoutError:
            # finished since the wait timed out (or the task itself raised TimeoutError): ask
            # again, never take this wait's own timeout for the task's outcome
            if future.done():
                return future.result()
        if client.status not in ALIVE:
            raise ClusterStalled(
                f"the controller lost the Dask scheduler at {client.scheduler.address} (client {client.status})"
            )
        if watch.cell_workers():
            without_since = None
        elif without_since is None:
            without_since = clock()
        elif clock() - without_since >= no_worker_sec:
            raise ClusterStalled(
                f"no worker of the Dask cluster at {client.scheduler.address} could run a cell for "
                f"{no_worker_sec:g} s (none has the 'cells' resource: start workers with `maka worker` "
                "or `dask worker --resources cells=N`; executor.cluster.no_worker_timeout_sec)"
            )
