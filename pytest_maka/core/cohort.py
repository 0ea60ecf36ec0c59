"""Expanding a validated spec and its loaded tasks into the cells of a cohort."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .cell import Cell
from .errors import SpecError
from .spec import NAME_PATTERN, LoadedSpec, TaskSource
from .task import Task

_TASK_ID = re.compile(NAME_PATTERN)


def select_tasks(tasks: Sequence[Task], source: TaskSource, spec_path: Path, index: int) -> list[Task]:
    """Apply include/exclude globs and limit, in a deterministic (sorted by id) order."""
    ordered = sorted(tasks, key=lambda t: t.id)
    ids = [t.id for t in ordered]
    for j, pattern in enumerate(source.include):
        if not fnmatch.filter(ids, pattern):
            raise SpecError(spec_path, f"tasks[{index}].include[{j}]", f"{pattern!r} matches no task in {source.path}")
    chosen = [
        t
        for t in ordered
        if (not source.include or any(fnmatch.fnmatchcase(t.id, p) for p in source.include))
        and not any(fnmatch.fnmatchcase(t.id, p) for p in source.exclude)
    ]
    if source.limit is not None:
        chosen = chosen[: source.limit]
    return chosen


@dataclass(frozen=True)
class Cohort:
    """One experiment: the validated spec, its tasks and the cells of their product."""

    loaded: LoadedSpec
    tasks: tuple[Task, ...]
    cells: tuple[Cell, ...]

    @property
    def name(self) -> str:
        return self.loaded.spec.name

    def cell_by_id(self) -> dict[str, Cell]:
        return {c.id: c for c in self.cells}


def build_cohort(loaded: LoadedSpec, tasks_per_source: Sequence[Sequence[Task]]) -> Cohort:
    """Cells in task → subject → repetition order; task ids must be unique and id-safe."""
    spec_path = loaded.path
    tasks: list[Task] = []
    seen: dict[str, tuple[int, Task]] = {}
    for i, (source, loaded_tasks) in enumerate(zip(loaded.spec.tasks, tasks_per_source, strict=True)):
        for task in select_tasks(loaded_tasks, source, spec_path, i):
            if not _TASK_ID.match(task.id):
                raise SpecError(
                    spec_path, f"tasks[{i}]", f"task id {task.id!r} (from {task.path}) must match {NAME_PATTERN}"
                )
            if task.id in seen:
                j, other = seen[task.id]
                twice = f"task id {task.id!r} (from {task.path}) also comes from {other.path} (tasks[{j}])"
                raise SpecError(spec_path, f"tasks[{i}]", twice)
            seen[task.id] = (i, task)
            tasks.append(task)
    if not tasks:
        raise SpecError(spec_path, "tasks", "the task sources select no task")
    reps = loaded.spec.repetitions
    cells = tuple(Cell(task=t, subject=s, repetition=r) for t in tasks for s in loaded.subjects for r in range(reps))
    return Cohort(loaded=loaded, tasks=tuple(tasks), cells=cells)
