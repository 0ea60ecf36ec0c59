"""The Dask strategy: the in-process pool, each attempt run on a worker of the cluster.

The controller keeps up to ``--maka-concurrency`` cells in flight (``CLUSTER_IN_FLIGHT``
when not given) on its pool; the engine's runner is a ``ClusterRunner``, which submits each
attempt to the cluster and records it here (``runner.py``). The worker's side is ``remote.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..core.record_model import AttemptRecord
from .strategy import InProcessPool, Serial

if TYPE_CHECKING:
    from .collect import CellItem


class DaskCluster(InProcessPool):
    """``--maka-cluster`` (or the spec's ``executor.cluster``): cells on the pool, attempts on Dask."""

    name: ClassVar[str] = "dask"

    def run(self, item: CellItem) -> AttemptRecord:
        if self.size <= 1:  # --maka-concurrency 1: one cell at a time, waited for on pytest's thread
            return Serial(self.maka).run(item)
        return super().run(item)
