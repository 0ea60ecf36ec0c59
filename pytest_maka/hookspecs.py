"""pytest-maka hooks. Every name starts with ``pytest_maka_`` so pytest registers it.

Implement them in a conftest.py or in a plugin registered through the
``pytest_maka.adapters`` entry-point group.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager

    from .core.cell import Cell
    from .core.cohort import Cohort
    from .core.record_model import AttemptRecord
    from .core.spec import TaskSource
    from .core.task import Task
    from .core.taxonomy import AttemptFacts, Status
    from .executors.base import Executor, LeaseRequest, Sandbox


@pytest.hookspec(historic=True)
def pytest_maka_configure(config: pytest.Config, cohort: Cohort) -> None:
    """The cohort is loaded and validated; called once per process (late plugins too); ``config`` is
    None on a Dask worker, which runs the engine without pytest."""


@pytest.hookspec
def pytest_maka_task_formats() -> list[str]:
    """Names of the task formats this plugin can load (for error messages and detection)."""


@pytest.hookspec(firstresult=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    """Load the tasks of one ``tasks:`` entry; return None if this adapter does not handle it.

    ``source.format`` is None when the spec did not name one: detect it from the files.
    Raise core.errors.TaskError for an invalid task.
    """


@pytest.hookspec
def pytest_maka_subject_kinds() -> dict[str, Any]:
    """Subject classes (or ``core.kinds.Kind`` rows) by kind name (see subjects/base.py)."""


@pytest.hookspec
def pytest_maka_verifiers() -> dict[str, type]:
    """Verifier classes by name; a task selects one with ``Task.grading`` (see verifiers/base.py)."""


@pytest.hookspec
def pytest_maka_executor_kinds() -> dict[str, Any]:
    """Executor classes (or ``core.kinds.Kind`` rows) by kind name (see executors/base.py)."""


@pytest.hookspec(firstresult=True)
def pytest_maka_acquire_lease(executor: Executor, request: LeaseRequest) -> AbstractContextManager[Sandbox] | None:
    """Return the context manager that leases one attempt's sandbox (default: executor.lease)."""


@pytest.hookspec(firstresult=True)
def pytest_maka_classify(facts: AttemptFacts, cell: Cell) -> Status | None:
    """Classify one attempt. The default is the kernel's core.taxonomy.classify()."""


@pytest.hookspec
def pytest_maka_record(record: AttemptRecord, cell: Cell) -> Mapping[str, Any] | None:
    """Add facts to an attempt's record before it is written: return a mapping of NEW top-level
    keys (JSON values), or None. The record is read-only; a returned key the record already has
    (a built-in one, or another plugin's) makes the attempt infra_failure, naming the plugin."""


@pytest.hookspec
def pytest_maka_report(out_dir: Path, records: list[AttemptRecord], cohort: Cohort) -> None:
    """The derived files have been written for ``records`` (controller only): add your own views."""


# -- progress of a run (called in the process that runs the attempt, from any of its threads) --


@pytest.hookspec
def pytest_maka_attempt_started(cell: Cell, attempt: int) -> None:
    """Attempt ``attempt`` (1-based) of ``cell`` starts. With --maka-concurrency > 1 this runs on
    a pool thread, several cells at once: implementations must be thread-safe and quick."""


@pytest.hookspec
def pytest_maka_phase(cell: Cell, phase: str, attempt: int, detail: str | None) -> None:
    """The running attempt entered ``phase``: one of core.progress.PROGRESS_PHASES ("setup",
    "waiting for a container slot", "building image", "agent", "freeze", "restore", "verify", "collect", "teardown", and
    "queued on the cluster" on a --maka-cluster controller, which then also receives the
    phases the Dask worker reports, on the Dask client's thread); ``detail`` says more where
    known (the current image build step)."""


@pytest.hookspec
def pytest_maka_attempt_finished(cell: Cell, record: AttemptRecord) -> None:
    """The attempt's record is in the ledger (``record.status`` is its taxonomy class)."""
