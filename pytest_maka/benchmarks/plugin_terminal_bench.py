"""Legacy Terminal-Bench (task.yaml) task sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..core.errors import TaskError
from ..core.spec import TaskSource
from ..core.task import Task
from . import detect, terminal_bench


def pytest_maka_task_formats() -> list[str]:
    return [terminal_bench.FORMAT]


@pytest.hookimpl(trylast=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    if (source.format or detect.detect_format(path)) != terminal_bench.FORMAT:
        return None
    if source.adapter_options:
        key = next(iter(source.adapter_options))
        raise TaskError(
            spec_path,
            f"tasks[].{key}",
            "unknown key for the terminal-bench format; expected: path, format, include, exclude, limit",
        )
    if path.is_file():
        raise TaskError(path, None, "a terminal-bench source is a task directory or a directory of them")
    return terminal_bench.discover(path)
