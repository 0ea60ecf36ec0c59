"""SWE-bench instance files as task sources, and the ``patch`` subject kind for predictions."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...core.errors import TaskError
from ...core.spec import TaskSource
from ...core.task import Task
from .. import detect
from . import adapter as swebench


def pytest_maka_task_formats() -> list[str]:
    return [swebench.FORMAT]


@pytest.hookimpl(trylast=True)
def pytest_maka_load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
    if (source.format or detect.detect_format(path)) != swebench.FORMAT:
        return None
    if not path.is_file():
        raise TaskError(path, None, "a swe-bench source is an instance file (.json, .jsonl or .parquet)")
    options = swebench.parse_options(source.adapter_options, spec_path)
    return swebench.load_instances(path, options, spec_path)


@pytest.hookimpl(trylast=True)
def pytest_maka_subject_kinds() -> dict[str, type]:
    from .patch import Patch

    return {Patch.kind: Patch}
