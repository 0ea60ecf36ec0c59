"""The pytest side of a maka run: an ``Engine`` built from pytest's config and hooks.

``MakaSession`` is what the ``maka_session`` fixture returns; the engine does the work (cohort,
executor, runner: ``engine/``), the session adds what only pytest has (options, usage errors,
the xdist controller's start time, the execution strategy chosen at configure time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..core.cell import Cell
from ..core.cohort import Cohort
from ..core.errors import MakaUserError
from ..engine import ContractBroken, Engine, EngineOptions, HostUnfit, Registries, StrictRefusal
from ..executors.base import Executor
from ..run.lifecycle import CellRunner
from ..store.ledger import Ledger
from ..store.redact import Redactor
from ..subjects.base import Subject
from ..verifiers.base import Verifier

if TYPE_CHECKING:
    from .strategy import ExecutionStrategy

COHORT_STARTED_KEY = "maka_cohort_started"


class MakaSession:
    """Everything a pytest process needs to collect and run the cells of one cohort."""

    def __init__(self, config: pytest.Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        #: How this process runs its items' cells (chosen at configure time, ``strategy.py``).
        self.strategy: ExecutionStrategy | None = None

    @classmethod
    def create(
        cls, config: pytest.Config, spec_path: Path, out_option: str | None, concurrency: Callable[[], int]
    ) -> MakaSession:
        """Build the engine from the config's hooks and options (a usage error of one line, or one
        line per problem under --maka-strict); check the host on the controller."""
        workerinput = getattr(config, "workerinput", {})
        try:
            registries = Registries.from_hook(config.hook)
            options = EngineOptions(
                out_dir=Path(out_option) if out_option else None,
                reports_root=config.rootpath / "reports",
                started=float(workerinput.get(COHORT_STARTED_KEY) or time.time()),
                rerun=bool(config.getoption("maka_rerun", False)),
                strict=bool(config.getoption("maka_strict", False)),
                concurrency=concurrency,
            )
            engine = Engine.build(spec_path, registries, options)
        except StrictRefusal as e:
            problems = e.problems
            more = f"; {len(problems) - 1} more below" if len(problems) > 1 else ""
            raise pytest.UsageError("\n".join([f"{problems[0]} (--maka-strict{more})", *problems[1:]])) from None
        except (MakaUserError, ContractBroken) as e:
            raise pytest.UsageError(str(e)) from None
        maka = cls(config, engine)
        if not hasattr(config, "workerinput"):
            try:
                engine.check_host()
            except HostUnfit as e:
                raise pytest.UsageError(str(e)) from None
        return maka

    # -- the engine's parts, as the fixture and the plugins read them ----------------------
    @property
    def cohort(self) -> Cohort:
        return self.engine.cohort

    @property
    def subjects(self) -> dict[str, Subject]:
        return self.engine.subjects

    @property
    def verifiers(self) -> dict[str, Verifier]:
        return self.engine.verifiers

    @property
    def executor(self) -> Executor:
        return self.engine.executor

    @property
    def out_dir(self) -> Path:
        return self.engine.out_dir

    @property
    def started(self) -> float:
        return self.engine.started

    @property
    def ledger(self) -> Ledger:
        return self.engine.ledger

    @property
    def redactor(self) -> Redactor:
        return self.engine.redactor

    @property
    def runner(self) -> CellRunner:
        return self.engine.runner

    @property
    def scratch_root(self) -> Path:
        return self.engine.scratch_root

    @property
    def out_dir_display(self) -> str:
        try:
            return str(self.out_dir.relative_to(Path.cwd()))
        except ValueError:
            return str(self.out_dir)

    def skip_reason(self, cell: Cell) -> str | None:
        return self.engine.skip_reason(cell)

    def close(self) -> None:
        self.engine.close()


#: Where the config keeps this process's MakaSession.
MAKA_KEY = pytest.StashKey[MakaSession]()
