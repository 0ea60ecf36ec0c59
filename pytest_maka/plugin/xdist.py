"""xdist with --maka-concurrency N: workers hold enough items to keep N cells in flight.

xdist's ``load`` scheduler keeps a worker only two items ahead once items take longer
than 0.1 s, so a worker could never run more than two cells at once. ``WindowScheduling``
is ``load`` with one change: every worker is kept ``window`` items ahead (2 x N: N in
flight plus as many finished ones waiting for their turn to be reported), items still
dealt in collection order and evenly near the end. It never takes an item back from a
worker (``worksteal`` does, which could run a cell a worker has already started twice),
and a crashed worker's items are handed to the others exactly as ``load`` does.

On the worker, ``WorkerItems`` reads the queue of items xdist has sent it (private xdist
state, kept to this module: ``WorkerInteractor.torun`` and ``nextitem_index``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

#: --dist modes that cannot be combined with --maka-concurrency > 1, and why.
REFUSED_DIST = {
    "worksteal": "it takes items back from a worker, which may already have started their cells",
    "each": "it runs every cell on every worker",
}


def window_for(concurrency: int) -> int:
    return max(2 * concurrency, concurrency + 2)


class WindowScheduling(LoadScheduling):
    """``--dist load`` that keeps every worker ``window`` items ahead."""

    def __init__(self, config: pytest.Config, log: Any, window: int) -> None:
        super().__init__(config, log)
        self.window = window

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.node2collection.values()))
        self.pending[:] = range(len(self.collection))
        if not self.collection:
            return
        share = math.ceil(len(self.pending) / len(self.nodes))
        for node in self.nodes:
            self._send_tests(node, min(self.window, share))
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            self._top_up(node)
        else:
            node.shutdown()

    def _top_up(self, node: Any) -> None:
        fair = math.ceil(len(self.pending) / max(len(self.node2pending), 1))
        want = min(self.window - len(self.node2pending[node]), max(fair, 1))
        if want > 0:
            self._send_tests(node, want)


class XdistScheduler:
    """Registered on the controller: answers ``pytest_xdist_make_scheduler`` for ``--dist load``."""

    def __init__(self, concurrency: int) -> None:
        self.window = window_for(concurrency)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "load":
            return None
        return WindowScheduling(config, log, self.window)


class WorkerItems:
    """On an xdist worker: the items xdist has sent this worker and it has not run yet."""

    def __init__(self, config: pytest.Config, session: pytest.Session) -> None:
        self.session = session
        self.interactor = next(
            (p for p in config.pluginmanager.get_plugins() if type(p).__name__ == "WorkerInteractor"), None
        )

    def upcoming(self, current: pytest.Item) -> Iterator[pytest.Item]:
        queue_of = getattr(self.interactor, "torun", None)
        if queue_of is None:  # another xdist: no lookahead on this worker (cells run one at a time)
            return
        with queue_of.lock() as queue:
            indices = [getattr(self.interactor, "nextitem_index", None), *queue]
        items = self.session.items
        for index in indices:
            if isinstance(index, int) and 0 <= index < len(items) and items[index] is not current:
                yield items[index]

    def passed(self, item: pytest.Item) -> None:
        """Nothing to remember: the queue itself shrinks as items run."""
