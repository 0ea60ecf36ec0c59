"""The steps of one attempt and the facts they gather for classify() and the record."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.cell import Cell
from ..core.spec import Policy
from ..core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR, Task
from ..core.taxonomy import AttemptFacts, Status, SubjectOutcome, VerifierOutcome
from ..core.trajectory import claimed_success, telemetry
from ..core.usage import tokens
from ..executors.base import Executor, LeaseRequest, Sandbox
from ..subjects.base import RunContext, Subject, SubjectResult, as_subject_result
from ..verifiers.base import Verdict, Verifier, VerifyContext
from .freeze import redact_tree, redact_value, workspace_diff

if TYPE_CHECKING:
    from .lifecycle import RunSettings

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTRUCTION_FILE = f"{AGENT_LOGS_DIR}/instruction.md"


def base_env(task: Task) -> dict[str, str]:
    """The variables every command gets; nothing from the host environment."""
    return {"PATH": BASE_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", **task.env}


def subject_mounts(subject: Subject, task: Task) -> dict[str, Path]:
    """The subject's read-only mounts (an installed agent); subjects without the method have none."""
    mounts = getattr(subject, "mounts", None)
    return dict(mounts(task)) if callable(mounts) else {}


def agent_network(task: Task, policy: Policy) -> bool:
    """The subject gets a network only if the task declares one and the spec allows it."""
    return policy.agent_network and task.network != "none"


@dataclass
class AttemptWork:
    """Mutable state of one attempt: what happened, measured by the harness."""

    cell: Cell
    subject: Subject
    verifier: Verifier
    executor: Executor
    settings: RunSettings
    attempt_dir: Path
    subject_outcome: SubjectOutcome | None = None
    verifier_outcome: VerifierOutcome | None = None
    infra_error: str | None = None
    policy_denied: str | None = None
    budget_exceeded: str | None = None
    aborted: bool = False
    verdict: Verdict | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    claim: Any = None
    trajectory: dict[str, Any] | None = None
    agent_info: dict[str, Any] = field(default_factory=dict)
    verifier_info: dict[str, Any] = field(default_factory=dict)
    isolation: dict[str, Any] = field(default_factory=dict)
    budget_info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def facts_update(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self, key, value)

    def facts(self) -> AttemptFacts:
        return AttemptFacts(
            subject=self.subject_outcome,
            verifier=self.verifier_outcome,
            infra_error=self.infra_error,
            policy_denied=self.policy_denied,
            budget_exceeded=self.budget_exceeded,
            aborted=self.aborted,
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - t0

    def error_for(self, status: Status, facts: AttemptFacts) -> dict[str, str] | None:
        """A one-line cause for every non-pass, in the reader's terms."""
        if status is Status.AGENT_SUCCESS:
            return None
        score = self.verdict.score if self.verdict else None
        message = {
            Status.AGENT_ABORTED: "cancelled by the user or the system",
            Status.POLICY_DENIED: facts.policy_denied,
            Status.INFRA_FAILURE: facts.infra_error or "the subject could not be started",
            Status.BUDGET_EXHAUSTED: f"budget exhausted: {facts.budget_exceeded}",
            Status.VERIFIER_FAILURE: self._verifier_problem(),
            Status.AGENT_INCOMPLETE: self._incomplete_reason(),
            Status.AGENT_FAILURE: self._rejection(score),
        }[status]
        return {"type": status.value, "message": message or status.value}

    def _verifier_problem(self) -> str:
        if self.verifier_outcome is not None and self.verifier_outcome.timed_out:
            return f"the verifier timed out after {self.verifier_info.get('timeout_sec')} s"
        if self.verdict is not None and self.verdict.error:
            return self.verdict.error
        return "the verifier gave no verdict"

    def _rejection(self, score: float | None) -> str:
        reason = self.verdict.details.get("reason") if self.verdict else None
        if reason:
            return f"the verifier rejected the result: {reason}"
        return f"the verifier rejected the result (reward {score})"

    def _incomplete_reason(self) -> str:
        if self.subject_outcome is not None and self.subject_outcome.timed_out:
            return f"the subject timed out after {self.agent_info.get('timeout_sec')} s"
        if self.subject_outcome is not None and self.subject_outcome.exit_code == 0:
            return f"the subject stopped early: {self.subject_outcome.stop_reason}"
        code = self.subject_outcome.exit_code if self.subject_outcome else None
        return f"the subject exited with code {code}"

    def artifacts(self, out_dir: Path) -> dict[str, str]:
        """Paths (relative to the output directory) of what this attempt left."""
        d = self.attempt_dir
        wanted = {
            "instruction": d / "instruction.md",
            "agent_log": d / "agent.stdout.txt",
            "agent_stderr": d / "agent.stderr.txt",
            "agent_logs": d / "agent",
            "trajectory": d / "agent" / "trajectory.json",
            "diff": d / "workspace.diff",
            "verifier_output": d / "verifier.stdout.txt",
            "verifier_stderr": d / "verifier.stderr.txt",
            "verifier_logs": d / "verifier",
            "harness_error": d / "harness-error.txt",
        }
        out = {"dir": d.relative_to(out_dir).as_posix()}
        out.update({k: p.relative_to(out_dir).as_posix() for k, p in wanted.items() if p.exists()})
        return out


def _timeout(task_value: float | None, override: float | None, multiplier: float) -> float | None:
    value = override if override is not None else task_value
    return None if value is None else value * multiplier


def run_attempt_steps(
    work: AttemptWork,
    lease: Callable[[LeaseRequest], AbstractContextManager[Sandbox]],
    request: LeaseRequest,
    *,
    deadline: tuple[float, str] | None,
) -> None:
    """prepare → run subject → stop → freeze → restore → verify, filling ``work``."""
    task, settings, d = work.cell.task, work.settings, work.attempt_dir
    budgets, policy = settings.budgets, settings.policy
    (d / "instruction.md").write_text(task.instruction, encoding="utf-8")
    stack = ExitStack()
    try:
        with work.timed("setup"):
            sandbox = stack.enter_context(lease(request))
            sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
            work.isolation = sandbox.isolation(
                agent_network=agent_network(task, policy), verifier_network=policy.verifier_network
            )
        agent_timeout, limit_name = _agent_timeout(task, budgets, deadline)
        work.budget_info = {
            "agent_timeout_sec": agent_timeout,
            "verifier_timeout_sec": _timeout(
                task.verifier_timeout_sec, budgets.verifier_timeout_sec, budgets.timeout_multiplier
            ),
            "cell_timeout_sec": budgets.cell_timeout_sec,
            "max_tokens": budgets.max_tokens,
            "max_cost_usd": budgets.max_cost_usd,
            "max_output_bytes": budgets.max_output_bytes,
        }
        if agent_timeout is not None and agent_timeout <= 0:
            work.facts_update(budget_exceeded=limit_name, subject_outcome=SubjectOutcome(started=False))
            return
        if not _run_subject(work, sandbox, agent_timeout, limit_name):
            return
        with work.timed("freeze"):
            _freeze(work, sandbox, request.scratch_dir)
        with work.timed("restore"):
            _restore(sandbox, work.verifier.tests_payload(task, request.scratch_dir), request.scratch_dir)
        _verify(work, sandbox, work.verifier, request.scratch_dir)
    finally:
        with work.timed("teardown"):
            _close(stack, work)
        secrets = work.subject.secrets()
        redact_tree(d, secrets)
        work.claim, work.agent_info = redact_value(work.claim, secrets), redact_value(work.agent_info, secrets)


def _close(stack: ExitStack, work: AttemptWork) -> None:
    """Release the lease; a cleanup failure after a verdict is noted, not fatal to the verdict."""
    try:
        stack.close()
    except Exception as e:
        if work.verifier_outcome is None:
            raise
        work.isolation["teardown_error"] = f"{type(e).__name__}: {e}"


def _restore(sandbox: Sandbox, tests: Path | None, scratch: Path) -> None:
    """Clear stale verifier outputs and copy the hidden tests in fresh, over anything planted."""
    sandbox.remove(VERIFIER_LOGS_DIR)
    empty = scratch / "empty-verifier-dir"
    empty.mkdir(exist_ok=True)
    sandbox.put(empty, VERIFIER_LOGS_DIR)
    sandbox.remove(TESTS_DIR)
    if tests is not None:
        sandbox.put(tests, TESTS_DIR)


def _agent_timeout(task: Task, budgets: Any, deadline: tuple[float, str] | None) -> tuple[float | None, str | None]:
    """The task's agent timeout, cut short by an experimenter deadline when that comes first."""
    timeout = _timeout(task.agent_timeout_sec, budgets.agent_timeout_sec, budgets.timeout_multiplier)
    if deadline is None:
        return timeout, None
    left = deadline[0] - time.time()
    if timeout is None or left < timeout:
        return left, deadline[1]
    return timeout, None


def _run_subject(work: AttemptWork, sandbox: Sandbox, timeout: float | None, limit_name: str | None) -> bool:
    """Run the subject and take its facts; False when it could not start (the attempt ends)."""
    task, d, cell = work.cell.task, work.attempt_dir, work.cell
    env = {
        **base_env(task),
        "MAKA_INSTRUCTION": task.instruction,
        "MAKA_INSTRUCTION_FILE": INSTRUCTION_FILE,
        "MAKA_TASK_ID": task.id,
        "MAKA_WORKDIR": task.workdir,
        "MAKA_LOGS_DIR": AGENT_LOGS_DIR,
        "MAKA_SUBJECT": cell.subject.name,
        "MAKA_REPETITION": str(cell.repetition),
        **work.subject.env(),
    }
    ctx = RunContext(
        env=env,
        timeout_sec=timeout,
        stdout_path=d / "agent.stdout.txt",
        stderr_path=d / "agent.stderr.txt",
        max_output_bytes=work.settings.budgets.max_output_bytes,
        network=agent_network(task, work.settings.policy),
        max_tokens=work.settings.budgets.max_tokens,
        max_cost_usd=work.settings.budgets.max_cost_usd,
        isolated=work.executor.isolated,
    )
    started = time.time()
    with work.timed("agent"):
        result = as_subject_result(work.subject.run(sandbox, task, ctx))
    work.agent_info = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "timeout_sec": timeout,
        "duration_s": round(result.duration_s, 4),
        "output_truncated": result.output_truncated,
        "env_passed": sorted(work.subject.env()),
    }
    if not result.started:
        work.agent_info["started"] = False
        work.facts_update(
            subject_outcome=SubjectOutcome(started=False), infra_error=f"the subject could not start: {result.error}"
        )
        return False
    _take_facts(work, result, started)
    if result.timed_out and limit_name:
        work.budget_exceeded = limit_name
    return True


def _take_facts(work: AttemptWork, result: SubjectResult, started: float) -> None:
    """What the subject reported: usage, stop reason, claim, trajectory, its own error."""
    work.subject_outcome = SubjectOutcome(
        exit_code=result.exit_code, timed_out=result.timed_out, stop_reason=result.stop_reason
    )
    work.usage, work.claim, work.trajectory = dict(result.usage), result.claim, result.trajectory
    for key, value in (
        ("stop_reason", result.stop_reason),
        ("error", result.error),
        ("cost_source", result.cost_source),
    ):
        if value:
            work.agent_info[key] = value
    facts = telemetry(result.trajectory, started)
    if facts:
        work.agent_info["telemetry"] = facts
    if result.policy_denied:
        work.policy_denied = result.policy_denied
    if result.budget_exceeded:
        work.budget_exceeded = result.budget_exceeded
    if result.aborted:
        work.aborted = True


def _freeze(work: AttemptWork, sandbox: Sandbox, scratch: Path) -> None:
    d = work.attempt_dir
    sandbox.get(AGENT_LOGS_DIR, d / "agent")
    diff, counts = workspace_diff(sandbox.baseline_workspace(), sandbox.workspace_snapshot(scratch / "workspace-after"))
    (d / "workspace.diff").write_text(diff, encoding="utf-8")
    work.agent_info["workspace_changes"] = counts
    if work.trajectory is not None:  # the harness's normalised one stands in for anything the agent wrote
        (d / "agent").mkdir(exist_ok=True)
        (d / "agent" / "trajectory.json").write_text(json.dumps(work.trajectory, ensure_ascii=False, default=str))
    budgets = work.settings.budgets
    used = tokens(work.usage)
    if budgets.max_tokens is not None and used is not None and used > budgets.max_tokens:
        work.budget_exceeded = work.budget_exceeded or "max_tokens"
    cost = work.usage.get("cost_usd")
    if budgets.max_cost_usd is not None and cost is not None and cost > budgets.max_cost_usd:
        work.budget_exceeded = work.budget_exceeded or "max_cost_usd"


def _verify(work: AttemptWork, sandbox: Sandbox, verifier: Verifier, scratch: Path) -> None:
    task, d, settings = work.cell.task, work.attempt_dir, work.settings
    budgets = settings.budgets
    timeout = _timeout(task.verifier_timeout_sec, budgets.verifier_timeout_sec, budgets.timeout_multiplier)
    ctx = VerifyContext(
        env={**base_env(task), **task.verifier_env},
        timeout_sec=timeout,
        stdout_path=d / "verifier.stdout.txt",
        stderr_path=d / "verifier.stderr.txt",
        network=settings.policy.verifier_network,
        max_output_bytes=budgets.max_output_bytes,
        attempt_dir=d,
        scratch_dir=scratch,
    )
    with work.timed("verify"):
        result = verifier.run(sandbox, task, ctx)
    with work.timed("collect"):
        sandbox.get(VERIFIER_LOGS_DIR, ctx.verifier_dir)
        sandbox.get(ARTIFACTS_DIR, d / "artifacts")
    verdict = verifier.grade(task, result, ctx)
    work.verdict = verdict
    claimed = claimed_success(work.claim)
    if claimed is not None and verdict.passed is not None and not result.timed_out:
        work.agent_info["claim_agrees_with_verdict"] = claimed == verdict.passed  # a diagnostic, never a verdict
    work.verifier_outcome = VerifierOutcome(
        ran=True, timed_out=result.timed_out, passed=None if result.timed_out else verdict.passed
    )
    work.verifier_info = {
        "kind": verifier.name,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "timeout_sec": timeout,
        "duration_s": round(result.duration_s, 4),
        "reward": verdict.score,
        "rewards": verdict.rewards,
        "reward_source": verdict.source,
        "error": verdict.error,
        "output_path": ctx.stdout_path.relative_to(settings.out_dir).as_posix(),
        **verdict.details,
    }
