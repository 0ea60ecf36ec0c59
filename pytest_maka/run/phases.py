"""The phases of one step after its lease: run the subject, freeze, verify (and refuse).

``run/steps.py`` strings them together (a single-step task is a task of one step);
``run/separate.py`` runs ``verify`` on a fresh verifier sandbox.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import SubjectFault
from ..core.provider import Connection, ProviderEvidence, failed_statuses, judge, silent_connections
from ..core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, VERIFIER_LOGS_DIR, Task
from ..core.taxonomy import SubjectOutcome, VerifierOutcome
from ..core.trajectory import claimed_success, telemetry
from ..core.usage import tokens
from ..executors.base import ExecAhead, ExecResult, ReportsFullDisk, Sandbox, VerdictChannel
from ..executors.copyout import CopyReport
from ..executors.hostfs import remove_path
from ..subjects.base import RunContext, SubjectResult, as_subject_result
from ..verifiers.base import PlansExec, Verdict, Verifier, VerifyContext
from .facts import AgentFacts, SubjectRun, Tamper, VerifierRun
from .freeze import usage_problems, workspace_diff
from .network_check import confirm
from .phase import is_default_user, network_phase, phase_user
from .restore import (
    VERIFIER_HOME,
    base_env,
    close_verdict,
    image_env_of,
    layer_env,
    printable,
    salvage,
    verdict_channel,
    verifier_env,
)
from .work import INSTRUCTION_FILE, AttemptWork

Deadline = tuple[float, str] | None


def scaled_timeout(task_value: float | None, override: float | None, multiplier: float) -> float | None:
    value = override if override is not None else task_value
    return None if value is None else value * multiplier


def refuse(work: AttemptWork, fault: SubjectFault) -> None:
    """Not verified: what the subject left rules out a fair verdict (its failure, with the paths)."""
    work.subject_fault = str(fault)
    tamper = work.verifier_facts.tamper or Tamper()
    tamper.refused, tamper.paths = str(fault), [printable(p) for p in fault.paths[:50]]
    work.verifier_facts.tamper = tamper


def agent_limit(task: Task, budgets: Any, deadline: tuple[float, str] | None) -> tuple[float | None, str | None]:
    """The task's agent timeout, cut short by an experimenter deadline when that comes first."""
    timeout = scaled_timeout(task.agent_timeout_sec, budgets.agent_timeout_sec, budgets.timeout_multiplier)
    return within_deadline(timeout, deadline)


def within_deadline(timeout: float | None, deadline: tuple[float, str] | None) -> tuple[float | None, str | None]:
    """``timeout`` cut to what is left before ``deadline``, with the budget's name when it was cut."""
    if deadline is None:
        return timeout, None
    left = deadline[0] - time.time()
    if timeout is None or left < timeout:
        return left, deadline[1]
    return timeout, None


def run_subject(work: AttemptWork, sandbox: Sandbox, timeout: float | None, limit_name: str | None) -> bool:
    """Run the subject (as the task's agent user) and take its facts; False when it could not start."""
    with phase_user(sandbox, work.cell.task.agent_user, "agent", [AGENT_LOGS_DIR, ARTIFACTS_DIR]):
        return subject_phase(work, sandbox, timeout, limit_name)


def subject_phase(work: AttemptWork, sandbox: Sandbox, timeout: float | None, limit_name: str | None) -> bool:
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
        cohort_max_cost_usd=work.settings.budgets.cohort_max_cost_usd,
        cohort_spent=work.cohort_spent,
    )
    assert work.egress is not None
    started = time.time()
    with work.timed("agent"), network_phase(sandbox, "agent", work.plan, work.egress):
        result = as_subject_result(work.subject.run(sandbox, task, ctx))
    run = SubjectRun(
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        timeout_sec=timeout,
        duration_s=round(result.duration_s, 4),
        output_truncated=result.output_truncated,
        env_passed=sorted(work.subject.env()),
    )
    work.agent_facts = AgentFacts(run=run, limits_hit=list(result.limits_hit))  # what came before it is gone
    if not result.started:
        work.agent_facts.started = False
        work.subject_outcome = SubjectOutcome(started=False)
        work.infra_error = f"the subject could not start: {result.error}"
        work.retryable = result.retryable
        return False
    take_facts(work, result, started)
    if result.timed_out and limit_name:
        work.budget_exceeded = limit_name
    return True


def take_facts(work: AttemptWork, result: SubjectResult, started: float) -> None:
    """What the subject reported: usage, stop reason, claim, trajectory, its own error."""
    work.subject_outcome = SubjectOutcome(
        exit_code=result.exit_code, timed_out=result.timed_out, stop_reason=result.stop_reason
    )
    work.usage, work.claim, work.trajectory = dict(result.usage), result.claim, result.trajectory
    agent = work.agent_facts
    agent.stop_reason, agent.error = result.stop_reason or None, result.error or None
    agent.cost_source, agent.version = result.cost_source or None, result.agent_version or None
    agent.name = result.agent_name or None
    agent.cost = result.cost.as_record() if result.cost is not None else None
    agent.usage_partial = bool(result.usage_partial)
    if result.provider is not None:
        judge_provider(work, result.provider)
    agent.handoff = dict(result.handoff)
    agent.telemetry = telemetry(result.trajectory, started) or None
    if result.policy_denied:
        work.policy_denied = result.policy_denied
    if result.budget_exceeded:
        work.budget_exceeded = result.budget_exceeded
    if result.aborted:
        work.aborted = True


def judge_provider(work: AttemptWork, evidence: ProviderEvidence) -> None:
    """The provider's failures into the record; an unusable provider ends the attempt as not the agent's."""
    if work.egress is not None:  # what the proxy saw: requests without an answer, the answers' statuses
        events = work.egress.events("agent")
        seen = [Connection(e.destination, e.allowed, e.bytes_out, e.bytes_in, tuple(e.statuses or ())) for e in events]
        providers = work.subject.egress()
        evidence = evidence.seen_by_the_proxy(failed_statuses(seen, providers), silent_connections(seen, providers))
    judged = judge(evidence)
    agent = work.agent_facts
    agent.provider_answered, agent.provider_errors = evidence.answered, judged.errors or None
    if judged.unusable:
        agent.provider_unusable = work.provider_unusable = judged.unusable
        work.retryable = False  # the same key or provider fails the same way


def freeze(work: AttemptWork, sandbox: Sandbox, scratch: Path) -> None:
    d = work.attempt_dir
    cap = work.settings.budgets.max_artifact_bytes
    logs, workspace = CopyReport(max_bytes=cap), CopyReport(max_bytes=cap)
    notes: list[str] = []
    salvage(
        notes, "copying /logs/agent out", lambda: sandbox.get(AGENT_LOGS_DIR, d / "agent", report=logs), d / "agent"
    )
    found = salvage(
        notes, "diffing the workspace", lambda: diff_workspace(sandbox, scratch / "workspace-after", workspace)
    )
    if found is not None:
        diff, counts = found
        (d / "workspace.diff").write_text(diff, encoding="utf-8", errors="backslashreplace")
        work.agent_facts.workspace_changes = counts
    agent = work.agent_facts
    agent.copied_out = {"agent_logs": logs.summary(), "workspace": workspace.summary()}
    agent.copy_truncated = bool(logs.truncated or workspace.truncated)
    agent.freeze_notes = notes
    agent.usage_problems = usage_problems(d / "agent")
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


def diff_workspace(sandbox: Sandbox, dest: Path, report: CopyReport) -> tuple[str, dict[str, int]]:
    """The diff of the workspace against its start; a copy made for it is removed at once."""
    try:
        return workspace_diff(sandbox.baseline_workspace(), sandbox.workspace_snapshot(dest, report=report))
    finally:
        if os.path.lexists(dest):  # only a copy lands at dest; a live workspace is elsewhere
            remove_path(dest)


def verifier_exec_env(verifier: Verifier, task: Task, sandbox: Sandbox) -> dict[str, str]:
    return verifier_env(task, imports_workdir=verifier.imports_workdir, image=image_env_of(sandbox))


def verify_ahead(work: AttemptWork, sandbox: Sandbox) -> None:
    """Before the subject runs: tell a sandbox that can set a command up ahead what the verifier
    will run (the same command, env and cwd ``verify`` gives it; nothing of it starts now)."""
    task, verifier = work.cell.task, work.verifier
    if not isinstance(sandbox, ExecAhead) or not isinstance(verifier, PlansExec):
        return
    if task.verifier_environment is not None or task.verifier_collect or not is_default_user(task.verifier_user):
        return
    if work.plan.verifier.network:
        return
    planned = verifier.planned_exec(task)
    if planned is not None:
        env = verifier_exec_env(verifier, task, sandbox)
        verdict = isinstance(sandbox, VerdictChannel)
        sandbox.exec_ahead(planned.command, env=env, cwd=planned.cwd, network=False, puts=planned.puts, verdict=verdict)


#: The files a verifier's reward is read from (``verifiers.reward``).
REWARD_FILES = ("reward.txt", "reward.json")


def reward_links(verdict: Verdict, copied: CopyReport) -> Verdict:
    """``verdict``, or a failure when a reward file was a symbolic link as the verifier ended.

    A reward is a regular file; a link there is the work of code the verifier ran (the
    subject's), whose copy-out holds the link's text and would read as a malformed reward,
    moving the attempt out of the denominator. So it is the subject's failure. With more
    links than the copy lists, a pass cannot be told from that and is refused likewise.
    """
    linked = sorted({entry.split(" -> ", 1)[0].split("/", 1)[-1] for entry in copied.links} & set(REWARD_FILES))
    unlisted = "..." in copied.links and verdict.passed
    if not linked and not unlisted:
        return verdict
    what = f"{' and '.join(linked)} {'was a symbolic link' if len(linked) == 1 else 'were symbolic links'}"
    reason = f"{what if linked else 'too many symbolic links to tell the reward files'} when the verifier ended"
    return Verdict(
        passed=False,
        score=0.0,
        source=verdict.source,
        details={**verdict.details, "reason": f"{reason}: a reward is a regular file", "reward_links": linked},
    )


def verify(
    work: AttemptWork, sandbox: Sandbox, verifier: Verifier, scratch: Path, deadline: tuple[float, str] | None
) -> None:
    task, d, settings = work.cell.task, work.attempt_dir, work.settings
    budgets = settings.budgets
    timeout = scaled_timeout(task.verifier_timeout_sec, budgets.verifier_timeout_sec, budgets.timeout_multiplier)
    timeout, cut_by = within_deadline(timeout, deadline)
    if timeout is not None and timeout <= 0:  # the whole-cell deadline left no time to verify
        work.budget_exceeded = work.budget_exceeded or cut_by
        close_verdict(sandbox)
        return
    ctx = VerifyContext(
        env=verifier_exec_env(verifier, task, sandbox),
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
    with work.timed("collect"):  # the reward first, before anything else runs in the environment
        notes, copied = collect_verifier_output(sandbox, ctx)
    if result.timed_out:  # a verifier stopped half-way has no score, whatever it wrote
        verdict = Verdict(passed=None, error=f"the verifier timed out after {timeout} s")
    else:
        verdict = reward_links(verifier.grade(task, result, ctx), copied)
    take_verdict(work, sandbox, verifier, result, verdict, ctx, cut_by=cut_by, notes=notes)


def collect_verifier_output(sandbox: Sandbox, ctx: VerifyContext) -> tuple[list[str], CopyReport]:
    """Copy ``/logs/verifier`` out (then close the verdict channel) and ``/logs/artifacts``;
    what could not be copied as notes, and the verifier logs' copy report."""
    notes: list[str] = []
    copied = CopyReport()
    try:
        salvage(
            notes, "copying /logs/verifier out", lambda: sandbox.get(VERIFIER_LOGS_DIR, ctx.verifier_dir, report=copied)
        )
    finally:
        close_verdict(sandbox)
    artifacts = ctx.attempt_dir / "artifacts"
    salvage(notes, "copying /logs/artifacts out", lambda: sandbox.get(ARTIFACTS_DIR, artifacts), artifacts)
    return notes, copied


def take_verdict(
    work: AttemptWork,
    sandbox: Sandbox,
    verifier: Verifier,
    result: ExecResult,
    verdict: Verdict,
    ctx: VerifyContext,
    *,
    cut_by: str | None,
    notes: list[str],
) -> None:
    """The verification's facts: the verdict, the verifier's outcome and what it did."""
    no_verdict = verdict.passed is None and not result.timed_out
    full = sandbox.full_disk() if no_verdict and isinstance(sandbox, ReportsFullDisk) else None
    if full:  # the verifier could not write its reward on the disk the subject filled: the subject's doing
        work.subject_fault = f"the verifier gave no verdict and {full}"
    work.verdict = verdict
    if result.timed_out and cut_by:  # cut short by the experimenter's deadline, not its own timeout
        work.budget_exceeded = work.budget_exceeded or cut_by
    claimed = claimed_success(work.claim)
    if claimed is not None and verdict.passed is not None and not result.timed_out:
        work.agent_facts.claim_agrees_with_verdict = claimed == verdict.passed  # a diagnostic, never a verdict
    evidence = verdict.details.get("network_failure")  # alone a diagnostic: never moves the attempt (taxonomy)
    evidence = evidence if isinstance(evidence, str) else None
    confirmed = None
    if evidence is not None and verdict.passed is None and not result.timed_out:
        confirmed = confirm(evidence, work.cell.task, work.plan.verifier)  # harness-side evidence
    if confirmed is not None:
        verdict = replace(verdict, error=f"{verdict.error}; confirmed: {confirmed}",
                          details={**verdict.details, "network_confirmed": confirmed})  # fmt: skip
        work.verdict = verdict
        work.retryable = False  # the same host fails the same way: rerun the output once it answers
    work.verifier_outcome = VerifierOutcome(
        ran=True,
        timed_out=result.timed_out,
        passed=None if result.timed_out else verdict.passed,
        network_failure=evidence,
        network_confirmed=confirmed,
    )
    work.verifier_facts.run = VerifierRun(
        kind=verifier.name,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        timeout_sec=ctx.timeout_sec,
        duration_s=round(result.duration_s, 4),
        set_up_ahead=result.set_up_ahead,
        reward=verdict.score,
        rewards=verdict.rewards,
        reward_source=verdict.source,
        error=verdict.error,
        output_path=ctx.stdout_path.relative_to(work.settings.out_dir).as_posix(),
        verdict_channel=verdict_channel(sandbox),
        # a diagnostic, never a verdict: code the verifier ran may have written the reward and
        # then ended the script (docs/security.md, "The verdict channel", residual risk)
        passed_with_exit_code=result.exit_code if verdict.passed and result.exit_code else None,
        collect_notes=notes,
        details=dict(verdict.details),
    )
