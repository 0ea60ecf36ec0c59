"""How a pytest process runs the cells of the items it is given: one strategy per process,
chosen at configure time (``plugin.choose_strategy``), as pytest-xdist chooses a scheduler.

The siblings: ``Serial`` (one cell at a time, when its item runs), ``InProcessPool``
(``--maka-concurrency N``: cells start ahead of their items on N threads), ``XdistController``
(``-n``: the controller runs no cell; each worker chooses Serial or InProcessPool for itself)
and ``dask.DaskCluster`` (``--maka-cluster``: the pool, each attempt run on a Dask
worker). Every one ends in the engine's ``run_cell`` (``engine/engine.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pytest

from ..core.record_model import AttemptRecord
from .lookahead import Lookahead, SessionItems

if TYPE_CHECKING:
    from .collect import CellItem
    from .session import MakaSession

#: Callables run while an item waits for its cell (the live view's redraw), set at configure.
WAIT_CALLBACKS_KEY = pytest.StashKey[list]()


class ExecutionStrategy(Protocol):
    """Runs the cell of each item this process runs; ends what is in flight at the session's end."""

    name: ClassVar[str]

    def run(self, item: CellItem) -> AttemptRecord:
        """The cell record of ``item``'s cell (run now, or started earlier and waited for)."""
        ...

    def finish(self, interrupted: bool) -> None:
        """The session ends: let cells in flight finish (after -x), or abort them (Ctrl-C)."""
        ...


class Serial:
    """One cell at a time, on pytest's thread, with the item's own fixtures."""

    name: ClassVar[str] = "serial"

    def __init__(self, maka: MakaSession) -> None:
        self.maka = maka

    def run(self, item: CellItem) -> AttemptRecord:
        funcargs = item.funcargs  # type: ignore[attr-defined]
        return self.maka.engine.run_cell(item.cell, funcargs["executor_lease"], funcargs["maka_workspace"])

    def finish(self, interrupted: bool) -> None:
        """Nothing runs between items."""


class InProcessPool:
    """``size`` cells at once in this process: each item's cell and the upcoming ones start on a
    pool of threads (``Lookahead``); each item reports its own cell's record."""

    name: ClassVar[str] = "pool"

    def __init__(self, maka: MakaSession, size: int) -> None:
        self.maka = maka
        self.size = size
        self.lookahead: Lookahead | None = None

    def run(self, item: CellItem) -> AttemptRecord:
        if self.lookahead is None:
            self.lookahead = self._make(item)
        return self.lookahead.record_for(item)

    def _make(self, item: CellItem) -> Lookahead:
        config = item.config
        source: Any
        if hasattr(config, "workerinput"):
            from .xdist import WorkerItems

            source = WorkerItems(config, item.session)
        else:
            source = SessionItems(item.session)
        made = Lookahead(self.maka.engine, item.session, self.size, source)
        made.on_wait.extend(config.stash.get(WAIT_CALLBACKS_KEY, []))
        return made

    def finish(self, interrupted: bool) -> None:
        if self.lookahead is not None:
            self.lookahead.finish(interrupted)


class XdistController:
    """``-n``/``--tx``: the workers run the cells (each choosing its own strategy); with
    ``--maka-concurrency N > 1`` this keeps each worker 2 x N items ahead (``xdist.py``)."""

    name: ClassVar[str] = "xdist"

    def __init__(self, config: pytest.Config, maka: MakaSession, concurrency: int) -> None:
        self.local = Serial(maka)  # never used while xdist distributes: the controller runs no item
        if concurrency <= 1:
            return
        from .xdist import REFUSED_DIST, XdistScheduler

        dist = config.getvalue("dist")
        if dist in REFUSED_DIST:
            raise pytest.UsageError(
                f"--maka-concurrency {concurrency} cannot be combined with --dist {dist}: {REFUSED_DIST[dist]}"
            )
        config.pluginmanager.register(XdistScheduler(concurrency), "maka-xdist-scheduler")

    def run(self, item: CellItem) -> AttemptRecord:
        return self.local.run(item)

    def finish(self, interrupted: bool) -> None:
        """Nothing runs here."""


def xdist_controller(config: pytest.Config) -> bool:
    """Whether this process is an xdist controller that distributes the items (-n/--tx)."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return False
    return bool(getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None))
