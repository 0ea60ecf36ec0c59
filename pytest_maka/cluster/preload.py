"""The Dask preload ``maka worker`` gives its workers (``dask worker --preload pytest_maka.cluster.preload``).

At start it imports what the worker will run (a broken install fails the worker now, not
its first cell) and logs the worker's cell settings, warning when it has no ``cells``
resource (it would never get a cell) or fewer threads than cells. At the worker's end it
closes the cohort engines the worker made: their executors remove what dead processes'
leases left, and their private directories go.
"""

from __future__ import annotations

import logging
from typing import Any

from . import remote

logger = logging.getLogger("distributed.pytest_maka")  # shown in the worker's log, as Dask's own lines are


def dask_setup(worker: Any) -> None:
    cells = (worker.state.total_resources or {}).get("cells")
    if not cells:
        logger.warning("pytest-maka: this worker has no 'cells' resource, so it gets no cells (--resources cells=N)")
    elif worker.state.nthreads < cells:
        logger.warning(
            "pytest-maka: %d threads for %d cells: a cell holds a thread for its whole run",
            worker.state.nthreads,
            cells,
        )
    logger.info("pytest-maka worker ready at %s: cells=%s, threads=%d", worker.address, cells, worker.state.nthreads)


def dask_teardown(worker: Any) -> None:
    remote.close_all()
