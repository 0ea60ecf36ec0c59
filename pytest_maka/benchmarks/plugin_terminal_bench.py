"""Legacy Terminal-Bench (task.yaml) task sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..core.spec import TaskSource
from ..core.task import Task
from . import detect, terminal_bench


def pytest_maka_task_formats() -> list[str]:
    return [terminal_bench.FORMAT]


@pytest.hookimpl(trylast=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    if not detect.claims_directory_source(terminal_bench.FORMAT, source, path, spec_path):
        return None
    return terminal_bench.discover(path)
