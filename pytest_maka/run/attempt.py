"""The steps of one attempt and the facts they gather for classify() and the record."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import progress
from ..core.cell import Cell
from ..core.errors import DeadlineReached, SubjectFault
from ..core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, Task
from ..core.taxonomy import AttemptFacts, Status, SubjectOutcome, VerifierOutcome
from ..core.trajectory import claimed_success, telemetry
from ..core.usage import tokens
from ..egress.log import LOG_NAME, EgressLog
from ..egress.phase import network_phase, network_record
from ..egress.plan import NetworkPlan, build_plan
from ..executors.base import Executor, LeaseRequest, Sandbox
from ..executors.copyout import CopyReport
from ..executors.hostfs import remove_path
from ..subjects.base import RunContext, Subject, SubjectResult, as_subject_result
from ..verifiers.base import Verdict, Verifier, VerifyContext
from .freeze import usage_problems, workspace_diff
from .phase import phase_user, wait_healthy
from .restore import (
    VERIFIER_HOME,
    base_env,
    guarded,
    image_env_of,
    layer_env,
    printable,
    restore_for_verification,
    salvage,
    verifier_env,
)
from .separate import KEPT_VERIFIER_KEYS, run_collect_hooks, verify_separately

if TYPE_CHECKING:
    from .lifecycle import RunSettings

INSTRUCTION_FILE = f"{AGENT_LOGS_DIR}/instruction.md"


def attempt_plan(work: AttemptWork) -> NetworkPlan:
    """The attempt's NetworkPlan: task, policy, the subject's declared needs and its own hook."""
    extra, setup = getattr(work.subject, "egress", None), getattr(work.subject, "setup_egress", None)
    needs = (*work.cell.subject.egress, *(extra() if callable(extra) else ()))
    return build_plan(work.cell.task, work.settings.policy, needs, tuple(setup()) if callable(setup) else ())


def subject_mounts(subject: Subject, task: Task) -> dict[str, Path]:
    """The subject's read-only mounts (an installed agent); subjects without the method have none."""
    mounts = getattr(subject, "mounts", None)
    return dict(mounts(task)) if callable(mounts) else {}


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
    subject_fault: str | None = None
    verdict: Verdict | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    claim: Any = None
    trajectory: dict[str, Any] | None = None
    agent_info: dict[str, Any] = field(default_factory=dict)
    verifier_info: dict[str, Any] = field(default_factory=dict)
    isolation: dict[str, Any] = field(default_factory=dict)
    plan: NetworkPlan = field(default_factory=NetworkPlan)
    egress: EgressLog | None = None
    budget_info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: False when an infra error says another attempt would fail the same way.
    retryable: bool = True
    #: A multi-step task's steps, as the record lists them (run/steps.py); None for one step.
    steps: list[dict[str, Any]] | None = None

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
            subject_fault=self.subject_fault,
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        progress.phase(phase)
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
            Status.BUDGET_EXHAUSTED: f"budget exhausted: {facts.budget_exceeded}" + self._why_not_started(),
            Status.VERIFIER_FAILURE: self._verifier_problem(),
            Status.AGENT_INCOMPLETE: self._incomplete_reason(),
            Status.AGENT_FAILURE: self._rejection(score),
        }[status]
        return {"type": status.value, "message": message or status.value}

    def _why_not_started(self) -> str:
        why = self.agent_info.get("not_started")
        return f" ({why})" if why else ""

    def _verifier_problem(self) -> str:
        if self.verifier_outcome is not None and self.verifier_outcome.timed_out:
            return f"the verifier timed out after {self.verifier_info.get('timeout_sec')} s"
        if self.verdict is not None and self.verdict.error:
            return self.verdict.error
        return "the verifier gave no verdict"

    def _rejection(self, score: float | None) -> str:
        if self.subject_fault:
            return f"not verified: {self.subject_fault}"
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
        hit = self.agent_info.get("limits_hit")
        return f"the subject exited with code {code}" + (f" (hit its {' and '.join(hit)} limit)" if hit else "")

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
            "egress_log": d / LOG_NAME,
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
    budgets = settings.budgets
    (d / "instruction.md").write_text(task.instruction, encoding="utf-8")
    work.plan, work.egress = attempt_plan(work), EgressLog(d / LOG_NAME)
    stack = ExitStack()
    try:
        with work.timed("setup"):
            try:
                sandbox = stack.enter_context(lease(request))
            except DeadlineReached as exc:  # e.g. the image build ran past the whole-cell deadline
                work.agent_info["not_started"] = str(exc)
                name = deadline[1] if deadline else "cell_timeout_sec"
                work.facts_update(budget_exceeded=name, subject_outcome=SubjectOutcome(started=False))
                return
            with network_phase(sandbox, "setup", work.plan, work.egress):
                sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
            work.isolation = sandbox.isolation(
                agent_network=work.plan.agent.mode == "all", verifier_network=work.plan.verifier.mode == "all"
            )
            if task.healthcheck is not None:  # the environment must be up before the agent starts
                env = base_env(task, image_env_of(sandbox))
                until = deadline[0] if deadline else None
                wait_healthy(sandbox, task.healthcheck, env=env, log_dir=d / "healthcheck", deadline=until)
        if task.steps:  # --- multi-step tasks: the loop per step (run/steps.py) replaces the phases below
            from .steps import run_steps

            run_steps(work, sandbox, request.scratch_dir, deadline)
            return
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
        if deadline is not None and deadline[0] <= time.time():  # the whole-cell deadline left no time to verify
            work.budget_exceeded = work.budget_exceeded or deadline[1]
            return
        if task.verifier_environment is not None:  # --- separate verifier environment (run/separate.py)
            verify_separately(work, sandbox, request, deadline, verify=_verify, refuse=_refuse)
            return
        if task.verifier_collect:  # [[verifier.collect]] before verification, as in separate mode
            work.verifier_info["collect_hooks"] = run_collect_hooks(work, sandbox, task.verifier_collect)
        try:
            with work.timed("restore"):
                tests = work.verifier.tests_payload(task, request.scratch_dir)
                work.verifier_info["tamper"] = guarded(
                    "restore", lambda: restore_for_verification(sandbox, tests, request.scratch_dir)
                )
        except SubjectFault as fault:
            _refuse(work, fault)
            return
        _verify(work, sandbox, work.verifier, request.scratch_dir, deadline)
    finally:
        with work.timed("teardown"):
            _close(stack, work)
        if work.isolation:
            work.isolation["network"] = network_record(work.plan, work.isolation.get("network"), work.egress)


def _close(stack: ExitStack, work: AttemptWork) -> None:
    """Release the lease; a cleanup failure after a verdict is noted, not fatal to the verdict."""
    try:
        stack.close()
    except Exception as e:
        if work.verifier_outcome is None:
            raise
        work.isolation["teardown_error"] = f"{type(e).__name__}: {e}"


def _refuse(work: AttemptWork, fault: SubjectFault) -> None:
    """Not verified: what the subject left rules out a fair verdict (its failure, with the paths)."""
    work.subject_fault = str(fault)
    work.verifier_info["tamper"] = {
        **work.verifier_info.get("tamper", {}),
        "refused": str(fault),
        "paths": [printable(p) for p in fault.paths[:50]],
    }


def _agent_timeout(task: Task, budgets: Any, deadline: tuple[float, str] | None) -> tuple[float | None, str | None]:
    """The task's agent timeout, cut short by an experimenter deadline when that comes first."""
    timeout = _timeout(task.agent_timeout_sec, budgets.agent_timeout_sec, budgets.timeout_multiplier)
    return _within_deadline(timeout, deadline)


def _within_deadline(timeout: float | None, deadline: tuple[float, str] | None) -> tuple[float | None, str | None]:
    """``timeout`` cut to what is left before ``deadline``, with the budget's name when it was cut."""
    if deadline is None:
        return timeout, None
    left = deadline[0] - time.time()
    if timeout is None or left < timeout:
        return left, deadline[1]
    return timeout, None


def _run_subject(work: AttemptWork, sandbox: Sandbox, timeout: float | None, limit_name: str | None) -> bool:
    """Run the subject (as the task's agent user) and take its facts; False when it could not start."""
    with phase_user(sandbox, work.cell.task.agent_user, "agent", [AGENT_LOGS_DIR, ARTIFACTS_DIR]):
        return _subject_phase(work, sandbox, timeout, limit_name)


def _subject_phase(work: AttemptWork, sandbox: Sandbox, timeout: float | None, limit_name: str | None) -> bool:
    task, d, cell = work.cell.task, work.attempt_dir, work.cell
    kernel = {
        **base_env(task, image_env_of(sandbox)),
        "MAKA_INSTRUCTION": task.instruction,
        "MAKA_INSTRUCTION_FILE": INSTRUCTION_FILE,
        "MAKA_TASK_ID": task.id,
        "MAKA_WORKDIR": task.workdir,
        "MAKA_LOGS_DIR": AGENT_LOGS_DIR,
        "MAKA_SUBJECT": cell.subject.name,
        "MAKA_REPETITION": str(cell.repetition),
    }
    env = layer_env(kernel, work.subject.env())
    ctx = RunContext(
        env=env,
        timeout_sec=timeout,
        stdout_path=d / "agent.stdout.txt",
        stderr_path=d / "agent.stderr.txt",
        max_output_bytes=work.settings.budgets.max_output_bytes,
        network=work.plan.agent.network,
        max_tokens=work.settings.budgets.max_tokens,
        max_cost_usd=work.settings.budgets.max_cost_usd,
        isolated=work.executor.isolated,
    )
    assert work.egress is not None
    started = time.time()
    with work.timed("agent"), network_phase(sandbox, "agent", work.plan, work.egress):
        result = as_subject_result(work.subject.run(sandbox, task, ctx))
    work.agent_info = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "timeout_sec": timeout,
        "duration_s": round(result.duration_s, 4),
        "output_truncated": result.output_truncated,
        "env_passed": sorted(work.subject.env()),
    }
    if result.limits_hit:
        work.agent_info["limits_hit"] = list(result.limits_hit)
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
    cap = work.settings.budgets.max_artifact_bytes
    logs, workspace = CopyReport(max_bytes=cap), CopyReport(max_bytes=cap)
    notes: list[str] = []
    salvage(
        notes, "copying /logs/agent out", lambda: sandbox.get(AGENT_LOGS_DIR, d / "agent", report=logs), d / "agent"
    )
    found = salvage(
        notes, "diffing the workspace", lambda: _workspace_diff(sandbox, scratch / "workspace-after", workspace)
    )
    if found is not None:
        diff, counts = found
        (d / "workspace.diff").write_text(diff, encoding="utf-8", errors="backslashreplace")
        work.agent_info["workspace_changes"] = counts
    work.agent_info["copied_out"] = {"agent_logs": logs.summary(), "workspace": workspace.summary()}
    if logs.truncated or workspace.truncated:
        work.agent_info["copy_truncated"] = True
    if notes:
        work.agent_info["freeze_notes"] = notes
    if problems := usage_problems(d / "agent"):
        work.agent_info["usage_problems"] = problems
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


def _workspace_diff(sandbox: Sandbox, dest: Path, report: CopyReport) -> tuple[str, dict[str, int]]:
    """The diff of the workspace against its start; a copy made for it is removed at once."""
    try:
        return workspace_diff(sandbox.baseline_workspace(), sandbox.workspace_snapshot(dest, report=report))
    finally:
        if os.path.lexists(dest):  # only a copy lands at dest; a live workspace is elsewhere
            remove_path(dest)


def _verify(
    work: AttemptWork, sandbox: Sandbox, verifier: Verifier, scratch: Path, deadline: tuple[float, str] | None
) -> None:
    task, d, settings = work.cell.task, work.attempt_dir, work.settings
    budgets = settings.budgets
    timeout = _timeout(task.verifier_timeout_sec, budgets.verifier_timeout_sec, budgets.timeout_multiplier)
    timeout, cut_by = _within_deadline(timeout, deadline)
    if timeout is not None and timeout <= 0:  # the whole-cell deadline left no time to verify
        work.budget_exceeded = work.budget_exceeded or cut_by
        return
    ctx = VerifyContext(
        env=verifier_env(
            task, imports_workdir=getattr(verifier, "imports_workdir", False), image=image_env_of(sandbox)
        ),
        timeout_sec=timeout,
        stdout_path=d / "verifier.stdout.txt",
        stderr_path=d / "verifier.stderr.txt",
        network=work.plan.verifier.network,
        max_output_bytes=budgets.max_output_bytes,
        attempt_dir=d,
        scratch_dir=scratch,
    )
    assert work.egress is not None
    user = phase_user(sandbox, task.verifier_user, "verifier", [VERIFIER_LOGS_DIR, VERIFIER_HOME])
    with work.timed("verify"), network_phase(sandbox, "verifier", work.plan, work.egress), user:
        result = verifier.run(sandbox, task, ctx)
    notes: list[str] = []
    with work.timed("collect"):
        salvage(notes, "copying /logs/verifier out", lambda: sandbox.get(VERIFIER_LOGS_DIR, ctx.verifier_dir))
        artifacts = d / "artifacts"
        salvage(notes, "copying /logs/artifacts out", lambda: sandbox.get(ARTIFACTS_DIR, artifacts), artifacts)
    if result.timed_out:  # a verifier stopped half-way has no score, whatever it wrote
        verdict = Verdict(passed=None, error=f"the verifier timed out after {timeout} s")
    else:
        verdict = verifier.grade(task, result, ctx)
    work.verdict = verdict
    if result.timed_out and cut_by:  # cut short by the experimenter's deadline, not its own timeout
        work.budget_exceeded = work.budget_exceeded or cut_by
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
        **({"collect_notes": notes} if notes else {}),
        **verdict.details,
        "tamper": work.verifier_info.get("tamper"),
        **{k: work.verifier_info[k] for k in KEPT_VERIFIER_KEYS if k in work.verifier_info},
    }
