"""The verifier interface. A task names its verifier (``Task.grading``); adapters register more.

The kernel keeps the authority rules around every verifier: the subject's processes are all
gone, ``/logs/verifier`` is emptied and ``/tests`` is replaced by a fresh copy of
``tests_payload()`` before ``run()``; afterwards it copies ``/logs/verifier`` out to
``ctx.attempt_dir / "verifier"`` and only then calls ``grade()``.

``Verifier`` is the whole contract; its one optional attribute, ``imports_workdir``, has its
default on ``VerifierBase``, and its one optional capability is ``PlansExec`` (checked with
``isinstance``; without it the verifier's command is set up when it runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..core.network_evidence import TAIL_CHARS, network_failure
from ..core.task import Task
from ..executors.base import ExecResult, ExecSettings, Sandbox


@dataclass(frozen=True)
class Verdict:
    """The verifier's verdict; ``passed`` is None when there is none (then ``error`` says why)."""

    passed: bool | None
    score: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    source: str | None = None
    #: Verifier-specific facts for the record (e.g. per-test outcomes).
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VerifyContext(ExecSettings):
    """What the lifecycle gives a verifier: exec settings (``run()``) and where to write."""

    attempt_dir: Path
    scratch_dir: Path

    @property
    def verifier_dir(self) -> Path:
        """Where the kernel copies /logs/verifier before ``grade()``."""
        return self.attempt_dir / "verifier"


class Verifier(Protocol):
    name: ClassVar[str]
    #: Optional (default False, ``VerifierBase``): the verifier runs code that imports from the
    #: workdir (a repository's own tests), so Python keeps the working directory on its path there.
    imports_workdir: ClassVar[bool]

    def tests_payload(self, task: Task, scratch: Path) -> Path | None:
        """The host directory copied fresh to /tests after the subject stopped (None: nothing)."""
        ...

    def run(self, sandbox: Sandbox, task: Task, ctx: VerifyContext) -> ExecResult:
        """Run the verification under ``ctx.timeout_sec``; return the measured result."""
        ...

    def grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        """Read the verdict from what ``run()`` left (files under ``ctx``)."""
        ...


class VerifierBase:
    """Defaults for the optional parts of the Verifier protocol."""

    imports_workdir: ClassVar[bool] = False


@dataclass(frozen=True)
class PlannedExec:
    """The one command a verifier's ``run()`` will execute, known before the subject ends."""

    command: str
    cwd: str | None
    #: Sandbox paths put before it runs (``/tests``, when the task has tests).
    puts: tuple[str, ...] = ()


@runtime_checkable
class PlansExec(Protocol):
    """Optional verifier capability: say ahead what ``run()`` will execute (None: unknown), with
    ``ctx.env``, ``ctx.network`` and no other command. The kernel then lets the sandbox set that
    command up while the subject runs (``ExecAhead``); nothing of the verification starts early."""

    def planned_exec(self, task: Task) -> PlannedExec | None: ...


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_CHARS))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def network_starved(verdict: Verdict, task: Task, ctx: VerifyContext) -> Verdict:
    """``verdict``, or no verdict when a non-pass comes with evidence of a network that failed it.

    Read whenever the task declares that its verifier has a network (Harbor's default is
    public), granted or not: a phase given no network, or given one whose hosts do not resolve
    or answer (the machine is offline, the host is gone), is no verdict on the subject. A task
    that declares its verifier needs no network keeps its verdict; a pass always stands.
    """
    declared = task.verifier_declared
    if verdict.passed or declared == "none":
        return verdict
    evidence = network_failure(_tail(ctx.stdout_path) + "\n" + _tail(ctx.stderr_path))
    if evidence is None:
        return verdict
    why = (
        f"the verifier's network failed it (declared {declared}, granted)"
        if ctx.network
        else f"the verifier needed a network it was not given (declared {declared}, granted none)"
    )
    return replace(
        verdict,
        passed=None,
        score=None,
        error=f"{why}: {evidence}",
        details={**verdict.details, "network_failure": evidence, "reward_written": verdict.score},
    )
