"""The lifecycle's progress events turned into the pytest_maka_attempt_* and _phase hooks."""

from __future__ import annotations

from typing import Any

from ..core.cell import Cell


class HookObserver:
    """An AttemptObserver that calls the hooks (on the thread that runs the attempt)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def attempt_started(self, cell: Cell, attempt: int) -> None:
        self.hook.pytest_maka_attempt_started(cell=cell, attempt=attempt)

    def phase(self, cell: Cell, attempt: int, phase: str, detail: str | None) -> None:
        self.hook.pytest_maka_phase(cell=cell, phase=phase, attempt=attempt, detail=detail)

    def attempt_finished(self, cell: Cell, record: dict[str, Any]) -> None:
        self.hook.pytest_maka_attempt_finished(cell=cell, record=record)
