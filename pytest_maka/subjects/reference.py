"""Reference subjects: ``oracle`` runs the task's own solution, ``nop`` does nothing.

They calibrate a benchmark: a task that fails with oracle or passes with nop is broken.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..core.task import SOLUTION_DIR, Task
from ..executors.base import Sandbox
from .base import RunContext, SubjectBase, SubjectResult


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Oracle(SubjectBase):
    """Runs ``solution/solve.sh`` (uploaded to /solution for this subject only) with ``[solution] env``."""

    kind = "oracle"
    reference = True
    Options = NoOptions

    def unsupported(self, task: Task) -> str | None:
        if task.solution_dir is not None:
            return None
        return task.metadata.get("solution_unsupported") or "the task has no reference solution (solution/solve.sh)"

    def uploads(self, task: Task) -> dict[str, Path]:
        assert task.solution_dir is not None
        return {SOLUTION_DIR: task.solution_dir}

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        """``solve.sh`` with the task's ``[solution] env`` on top of the phase's environment."""
        env = {**ctx.env, **task.solution_env}
        return SubjectResult.from_exec(ctx.run(sandbox, f"bash {SOLUTION_DIR}/solve.sh", cwd=task.workdir, env=env))


class Nop(SubjectBase):
    """Does nothing: the verifier sees the task's initial state."""

    kind = "nop"
    reference = True
    Options = NoOptions

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        ctx.stdout_path.write_bytes(b"")
        ctx.stderr_path.write_bytes(b"")
        return SubjectResult(exit_code=0, timed_out=False, duration_s=0.0)
