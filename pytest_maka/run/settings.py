"""``RunSettings``: the parts of the spec the lifecycle needs, plus where to write."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.spec import Budgets, Policy, Retries


@dataclass
class RunSettings:
    """The parts of the spec the lifecycle needs, plus where to write."""

    cohort: str
    out_dir: Path
    budgets: Budgets
    policy: Policy
    retries: Retries
    cohort_started: float = field(default_factory=time.time)
    cells: int = 1  # cells in the cohort: sizes the default cohort-wide retry allowance
    #: ``--maka-rerun``: a cell with a result from before this run starts a new run of its own.
    rerun: bool = False

    def retry_limit(self) -> int:
        """Retries the whole run may spend (``retries.cohort_max``, else a quarter of the cells, at least 5)."""
        if self.retries.cohort_max is not None:
            return self.retries.cohort_max
        return max(5, math.ceil(self.cells / 4))
