"""``command``: any agent CLI, run through ``sh -c`` in the task's workdir inside the executor."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, computed_field, field_validator

from ..core.errors import SpecError
from ..core.spec import SubjectSpec
from ..core.task import Task, digest_tree
from ..executors.base import Sandbox
from .base import RunContext, SubjectBase, SubjectResult
from .reported import read_reported, start_failure

BUNDLE_DIR = "/maka/subject"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class CommandOptions(BaseModel):
    """``command`` (required), ``env`` (host variables passed by name), ``set_env``, ``bundle``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1)
    env: list[str] = Field(default_factory=list)
    set_env: dict[str, str] = Field(default_factory=dict)
    bundle: Path | None = Field(default=None, exclude=True)  # identity comes from bundle_digest

    @field_validator("env")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        import re

        for name in names:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not a variable name")
        return names

    @field_validator("bundle")
    @classmethod
    def _bundle_exists(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        base = Path((info.context or {}).get("base_dir", "."))
        resolved = (base / value).resolve()
        if not resolved.exists():
            raise ValueError(f"no such file or directory: {resolved}")
        return resolved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def bundle_digest(self) -> str | None:
        """The bundle's content is part of the subject's identity: new code, new cells."""
        return digest_tree(self.bundle) if self.bundle is not None else None


class Command(SubjectBase):
    """Runs ``command`` with the instruction in $MAKA_INSTRUCTION and $MAKA_INSTRUCTION_FILE."""

    kind = "command"
    reference = False
    Options = CommandOptions

    def __init__(self, spec: SubjectSpec) -> None:
        super().__init__(spec)
        opts: CommandOptions = spec.options  # type: ignore[assignment]
        self.opts = opts
        for i, name in enumerate(opts.env):
            if name not in os.environ:
                raise SpecError(
                    spec.declared_in,
                    f"env[{i}]",
                    f"host variable {name} is not set (listed to be passed to the subject)",
                )
        self._passed = {n: os.environ[n] for n in opts.env}

    def uploads(self, task: Task) -> dict[str, Path]:
        return {BUNDLE_DIR: self.opts.bundle} if self.opts.bundle is not None else {}

    def env(self) -> dict[str, str]:
        extra = {"MAKA_SUBJECT_DIR": BUNDLE_DIR} if self.opts.bundle is not None else {}
        return {**self.opts.set_env, **extra, **self._passed}

    def secrets(self) -> list[str]:
        return [v for v in self._passed.values() if len(v) >= 4]

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        result = self._exec(sandbox, self.opts.command, task, ctx)
        stderr = ctx.stderr_path.read_text(errors="replace")[:4096] if ctx.stderr_path.exists() else ""
        missing = start_failure(self.opts.command, result.exit_code, stderr)
        if missing:
            return SubjectResult.not_started(missing)
        return SubjectResult.from_exec(result, **read_reported(sandbox))
