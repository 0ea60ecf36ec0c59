"""What the plugins provide to the engine, read once from a pluggy hook relay.

The relay is pytest's ``config.hook`` in a pytest process and a plain pluggy one on a Dask
worker (``cluster/boot.py``); the engine sees only this typed table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.cell import Cell
from ..core.progress import AttemptObserver
from ..core.record_model import AttemptRecord
from ..core.spec import TaskSource
from ..core.task import Task
from ..core.taxonomy import AttemptFacts, Status
from ..executors.base import Executor, LeaseRequest, Sandbox

#: The entry-point group of third-party pytest-maka plugins (adapters, kinds, verifiers).
ENTRY_POINT_GROUP = "pytest_maka.adapters"

LoadTasksFn = Callable[[TaskSource, Path, Path], "list[Task] | None"]
AcquireLeaseFn = Callable[[Executor, LeaseRequest], AbstractContextManager[Sandbox]]


def _merged(hook_results: list[dict[str, type]]) -> dict[str, type]:
    merged: dict[str, type] = {}
    for result in hook_results:
        merged.update(result or {})
    return merged


class HookObserver:
    """An AttemptObserver that calls the ``pytest_maka_attempt_*`` and ``_phase`` hooks (on the
    thread that runs the attempt)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def attempt_started(self, cell: Cell, attempt: int) -> None:
        self.hook.pytest_maka_attempt_started(cell=cell, attempt=attempt)

    def phase(self, cell: Cell, attempt: int, phase: str, detail: str | None) -> None:
        self.hook.pytest_maka_phase(cell=cell, phase=phase, attempt=attempt, detail=detail)

    def attempt_finished(self, cell: Cell, record: AttemptRecord) -> None:
        self.hook.pytest_maka_attempt_finished(cell=cell, record=record)


def annotated(hook: Any, record: AttemptRecord, cell: Cell) -> AttemptRecord:
    """``record`` with the new top-level keys every ``pytest_maka_record`` implementation returns,
    called in pluggy's order; RecordError naming the plugin when one returns a key the record
    already has."""
    for impl in reversed(hook.pytest_maka_record.get_hookimpls()):
        if impl.hookwrapper or getattr(impl, "wrapper", False):
            continue
        given = {"record": record, "cell": cell}
        keys = impl.function(**{name: given[name] for name in impl.argnames})
        if keys is not None:
            record = record.annotated(keys, _plugin_name(impl.plugin_name))
    return record


def _plugin_name(name: str) -> str:
    """A plugin's name as a user knows it (a conftest's path relative to the current directory)."""
    try:
        return str(Path(name).relative_to(Path.cwd()))
    except ValueError:
        return name


@dataclass(frozen=True)
class Registries:
    """The kinds, verifiers and task loaders the installed plugins provide, and their
    per-attempt hooks (classify, annotate, lease, progress)."""

    subject_kinds: Mapping[str, type]
    executor_kinds: Mapping[str, type]
    verifier_kinds: Mapping[str, type]
    task_formats: Sequence[str]
    load_tasks: LoadTasksFn
    classify: Callable[[AttemptFacts, Cell], Status]
    annotate: Callable[[AttemptRecord, Cell], AttemptRecord]
    acquire_lease: AcquireLeaseFn
    observer: AttemptObserver

    @classmethod
    def from_hook(cls, hook: Any) -> Registries:
        """Read the table from a pluggy hook relay carrying the ``pytest_maka_*`` hookspecs."""

        def load_tasks(source: TaskSource, path: Path, spec_path: Path) -> list[Task] | None:
            return hook.pytest_maka_load_tasks(source=source, path=path, spec_path=spec_path)

        def classify(facts: AttemptFacts, cell: Cell) -> Status:
            return hook.pytest_maka_classify(facts=facts, cell=cell)

        def annotate(record: AttemptRecord, cell: Cell) -> AttemptRecord:
            return annotated(hook, record, cell)

        def acquire_lease(executor: Executor, request: LeaseRequest) -> AbstractContextManager[Sandbox]:
            return hook.pytest_maka_acquire_lease(executor=executor, request=request)

        return cls(
            subject_kinds=_merged(hook.pytest_maka_subject_kinds()),
            executor_kinds=_merged(hook.pytest_maka_executor_kinds()),
            verifier_kinds=_merged(hook.pytest_maka_verifiers()),
            task_formats=sorted({f for fs in hook.pytest_maka_task_formats() for f in fs}),
            load_tasks=load_tasks,
            classify=classify,
            annotate=annotate,
            acquire_lease=acquire_lease,
            observer=HookObserver(hook),
        )
