"""The subject interface: one small class per kind, registered through a hook."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from pydantic import BaseModel

from ..core.spec import SubjectSpec
from ..core.task import Task
from ..executors.base import ExecResult, ExecSettings, Sandbox


@dataclass(frozen=True)
class RunContext(ExecSettings):
    """Everything a subject needs to start, prepared by the lifecycle: ``env`` holds MAKA_*
    plus the allow-listed variables; ``run()`` executes a command with these settings."""


class Subject(Protocol):
    """An agent with its settings. Two settings of one agent are two subjects."""

    kind: ClassVar[str]
    #: True for reference subjects (oracle, nop): no model behind them, safe without a sandbox.
    reference: ClassVar[bool]
    #: Validates the keys of the spec entry other than name/kind.
    Options: ClassVar[type[BaseModel]]

    spec: SubjectSpec

    def unsupported(self, task: Task) -> str | None:
        """A reason this subject cannot attempt ``task`` at all (the cell is skipped), or None."""
        ...

    def uploads(self, task: Task) -> dict[str, Path]:
        """Sandbox path -> host path to upload before the run (e.g. /solution for oracle)."""
        ...

    def env(self) -> dict[str, str]:
        """Extra variables for the run; host values passed by name are included here."""
        ...

    def secrets(self) -> list[str]:
        """Values that must never appear in artifacts or reports."""
        ...

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> ExecResult:
        """Run once, under ``ctx.timeout_sec``; return what the executor measured."""
        ...


class SubjectBase:
    """Defaults for the optional parts of the protocol."""

    kind: ClassVar[str] = ""
    reference: ClassVar[bool] = False

    def __init__(self, spec: SubjectSpec) -> None:
        self.spec = spec
        self.options = spec.options

    def unsupported(self, task: Task) -> str | None:
        return None

    def uploads(self, task: Task) -> dict[str, Path]:
        return {}

    def env(self) -> dict[str, str]:
        return {}

    def secrets(self) -> list[str]:
        return []

    def _exec(self, sandbox: Sandbox, command: str, task: Task, ctx: RunContext) -> ExecResult:
        return ctx.run(sandbox, command, cwd=task.workdir)
