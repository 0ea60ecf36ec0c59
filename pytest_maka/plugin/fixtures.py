"""Fixtures every cell uses. Override or extend them in a conftest.py.

- ``maka_session``: the run's state (cohort, executor, output directory).
- ``maka_cell``: the current cell (task, subject, repetition).
- ``maka_workspace``: a host scratch directory for this cell's attempts, removed afterwards.
- ``executor_lease``: a callable turning a LeaseRequest into a sandbox context manager
  (through the ``pytest_maka_acquire_lease`` hook); the lifecycle calls it once per attempt.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..core.cell import Cell
from ..run.lifecycle import LeaseFn
from .session import MAKA_KEY, MakaSession

__all__ = ["MAKA_KEY", "executor_lease", "maka_cell", "maka_session", "maka_workspace"]


@pytest.fixture(scope="session")
def maka_session(request: pytest.FixtureRequest) -> MakaSession:
    maka = request.config.stash.get(MAKA_KEY, None)
    if maka is None:
        pytest.skip("no cohort: run with --maka-spec=PATH")
    return maka


@pytest.fixture
def maka_cell(request: pytest.FixtureRequest) -> Cell:
    cell = getattr(request.node, "cell", None)
    if cell is None:
        pytest.skip("maka_cell is only available to cohort cells")
    return cell


@pytest.fixture
def maka_workspace(maka_session: MakaSession, maka_cell: Cell) -> Iterator[Path]:
    path = maka_session.engine.workspace(maka_cell)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def executor_lease(maka_session: MakaSession) -> LeaseFn:
    return maka_session.engine.lease()
