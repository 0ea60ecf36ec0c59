"""Cells for report tests, built directly (no spec file, no run)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel

from pytest_maka.core.cell import Cell
from pytest_maka.core.spec import SubjectSpec
from pytest_maka.core.task import Task


class NoOptions(BaseModel):
    pass


def make_cell(task: str, subject: str, kind: str = "command", rep: int = 1) -> Cell:
    """A cell whose task and subject digests depend only on their names."""
    t = Task(id=task, path=Path("/tasks") / task, instruction="do it", digest=hashlib.sha256(task.encode()).hexdigest())
    spec = SubjectSpec(
        name=subject,
        kind=kind,
        options=NoOptions(),
        declared_in=Path("/cohort.yaml"),
        digest=hashlib.sha256(f"{subject}:{kind}".encode()).hexdigest(),
    )
    return Cell(t, spec, rep)
