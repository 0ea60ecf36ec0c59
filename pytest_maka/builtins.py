"""The kernel's own implementations of the maka hooks: built-in subjects, executors, tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .benchmarks import harbor
from .core.cell import Cell
from .core.errors import TaskError
from .core.spec import TaskSource
from .core.task import Task
from .core.taxonomy import AttemptFacts, Status, classify


@pytest.hookimpl(trylast=True)
def pytest_maka_subject_kinds() -> dict[str, type]:
    from .subjects.command import Command
    from .subjects.reference import Nop, Oracle

    return {cls.kind: cls for cls in (Oracle, Nop, Command)}


@pytest.hookimpl(trylast=True)
def pytest_maka_executor_kinds() -> dict[str, type]:
    from .executors.local import LocalExecutor

    return {LocalExecutor.kind: LocalExecutor}


@pytest.hookimpl(trylast=True)
def pytest_maka_verifiers() -> dict[str, type]:
    from .verifiers.reward import RewardVerifier

    return {RewardVerifier.name: RewardVerifier}


def pytest_maka_task_formats() -> list[str]:
    return [harbor.FORMAT]


@pytest.hookimpl(trylast=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    if source.format not in (None, harbor.FORMAT):
        return None
    if source.format is None and not harbor.looks_like_source(path):
        return None
    if source.adapter_options:
        key = next(iter(source.adapter_options))
        raise TaskError(
            spec_path,
            f"tasks[].{key}",
            "unknown key for the harbor format; expected: path, format, include, exclude, limit",
        )
    return harbor.discover(path)


@pytest.hookimpl(trylast=True)
def pytest_maka_classify(facts: AttemptFacts, cell: Cell) -> Status:
    return classify(facts)


@pytest.hookimpl(trylast=True)
def pytest_maka_acquire_lease(executor: Any, request: Any) -> Any:
    return executor.lease(request)
