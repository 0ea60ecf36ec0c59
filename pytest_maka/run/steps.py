"""Multi-step tasks (Harbor ``steps/``): one cell, one environment, the lifecycle loop per step.

For each step in order: the previous step's hidden tests and logs are removed, the step's
``workdir/`` is laid over the workdir, its ``setup.sh`` and healthcheck run under the step's
``setup`` network plan, then the usual run subject → stop → freeze → restore → verify with
the step's instruction, tests, timeouts and networks (its own NetworkPlan; its artifacts
under ``steps/<name>/`` of the attempt). A step with a separate verifier is verified in a
fresh environment (``run/separate.py``) while the subject's keeps running for the next. ``core.steps`` decides
when the remaining steps stop and what the cell's verdict is; this module only runs them.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import SubjectFault
from ..core.network import NETWORK_PHASES
from ..core.steps import CellVerdict, StepOutcome, cell_verdict, step_task, stop_reason
from ..core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR, Step
from ..core.taxonomy import OFFICIAL, SubjectOutcome, VerifierOutcome, classify
from ..core.usage import tokens
from ..egress.phase import network_phase
from ..executors.base import LeaseRequest, Sandbox
from ..verifiers.base import Verdict
from . import phases
from .health import wait_healthy
from .restore import base_env, guarded, restore_for_verification
from .separate import verify_in_separate_environment
from .taint import arm, settle
from .work import INSTRUCTION_FILE, AttemptWork, attempt_plan

Deadline = tuple[float, str] | None
#: The steps that ran, each with its facts and its outcome.
Done = list[tuple[AttemptWork, StepOutcome]]
#: Usage keys summed over the steps (null stays null only when no step reported it).
SUMMED_USAGE = ("input_tokens", "output_tokens", "cache_tokens", "cost_usd")


def run_steps(work: AttemptWork, sandbox: Sandbox, request: LeaseRequest, deadline: Deadline) -> None:
    """Run every step of ``work``'s task in ``sandbox`` (already leased), then fold them into ``work``."""
    task = work.cell.task
    done: Done = []
    stopped: str | None = None
    for index, step in enumerate(task.steps):
        step_work = _step_work(work, step)
        try:
            _run_step(step_work, sandbox, step, index, request, deadline, last=index == len(task.steps) - 1)
        except BaseException as e:  # the steps so far stay in the record; the lifecycle classifies the rest
            if isinstance(e, KeyboardInterrupt):
                step_work.aborted = True
            else:
                step_work.infra_error = f"{type(e).__name__}: {e}"
            done.append((step_work, _outcome(step, step_work)))
            _fold(work, done, None)
            raise
        outcome = _outcome(step, step_work)
        done.append((step_work, outcome))
        spent = _spent(work, done)
        if spent:  # the cell's token or cost budget covers all its steps together
            work.budget_exceeded = spent
            stopped = f"the cell's {spent} budget was spent by step {step.name!r}"
        else:
            stopped = stop_reason(outcome, step.min_reward)
        if stopped:
            break
    _fold(work, done, stopped if len(done) < len(task.steps) else None)


def _spent(work: AttemptWork, done: Done) -> str | None:
    """The budget (``max_tokens`` / ``max_cost_usd``) the steps so far used up together, or None."""
    budgets, usage = work.settings.budgets, _summed_usage([w.usage for w, _ in done])
    used = tokens(usage)
    if budgets.max_tokens is not None and used is not None and used > budgets.max_tokens:
        return "max_tokens"
    cost = usage.get("cost_usd")
    if budgets.max_cost_usd is not None and cost is not None and cost > budgets.max_cost_usd:
        return "max_cost_usd"
    return None


def _step_work(work: AttemptWork, step: Step) -> AttemptWork:
    """A fresh AttemptWork for one step: the step's view of the task (its networks decide
    the step's NetworkPlan), its own artifact dir; the attempt's egress log is shared."""
    cell = replace(work.cell, task=step_task(work.cell.task, step))
    step_dir = work.attempt_dir / "steps" / step.name
    step_dir.mkdir(parents=True)
    step_work = AttemptWork(
        cell=cell,
        subject=work.subject,
        verifier=work.verifier,
        executor=work.executor,
        settings=work.settings,
        attempt_dir=step_dir,
        isolation=work.isolation,
        egress=work.egress,
        cohort_spent=work.cohort_spent,
    )
    step_work.plan = attempt_plan(step_work)
    return step_work


def _run_step(
    work: AttemptWork,
    sandbox: Sandbox,
    step: Step,
    index: int,
    request: LeaseRequest,
    deadline: Deadline,
    *,
    last: bool,
) -> None:
    """Prepare the step, then run subject → freeze → restore → verify, filling ``work``."""
    task, d, scratch = work.cell.task, work.attempt_dir, request.scratch_dir
    (d / "instruction.md").write_text(task.instruction, encoding="utf-8")
    with work.timed("setup"):
        if index > 0:
            _clear_previous_step(sandbox, scratch)
            for dest, source in work.subject.uploads(task).items():  # e.g. the step's own /solution
                sandbox.put(source, dest)
        sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
        if step.workdir_dir is not None:
            _lay_over(sandbox, step.workdir_dir, task.workdir)
        problem = _prepare(work, sandbox, step, deadline)
    if problem is not None:
        if index == 0:  # nothing of the subject's has run yet: the task's environment failed
            work.facts_update(infra_error=problem, subject_outcome=SubjectOutcome(started=False))
        else:  # the subject had this environment before: what fails now is counted against it
            work.facts_update(subject_fault=f"{problem} (after the subject's earlier steps)")
            work.subject_outcome = SubjectOutcome(exit_code=None)
            work.agent_info = {"not_started": problem}
        return
    agent_timeout, limit_name = phases.agent_limit(task, work.settings.budgets, deadline)
    work.budget_info = {"agent_timeout_sec": agent_timeout}
    if agent_timeout is not None and agent_timeout <= 0:
        work.facts_update(budget_exceeded=limit_name, subject_outcome=SubjectOutcome(started=False))
        return
    if not phases.run_subject(work, sandbox, agent_timeout, limit_name):
        return
    with work.timed("freeze"):
        phases.freeze(work, sandbox, scratch)
    if deadline is not None and deadline[0] <= time.time():
        work.budget_exceeded = work.budget_exceeded or deadline[1]
        return
    if task.verifier_environment is not None:  # this step verifies in a fresh environment (run/separate.py)
        _verify_separately(work, sandbox, request, deadline, last=last)
        return
    try:
        with work.timed("restore"):
            tests = work.verifier.tests_payload(task, scratch)
            work.verifier_info["tamper"] = guarded(
                "restore", lambda: restore_for_verification(sandbox, tests, scratch, task_format=task.format)
            )
            armed = arm(sandbox)
        phases.verify(work, sandbox, work.verifier, scratch, deadline)
    except SubjectFault as fault:
        phases.refuse(work, fault)
        return
    settle(work, sandbox, armed)


def _verify_separately(
    work: AttemptWork, sandbox: Sandbox, request: LeaseRequest, deadline: Deadline, *, last: bool
) -> None:
    """Verify this step in a fresh environment with the artifacts carried out of the subject's.

    As Harbor 0.25: the subject's environment keeps running (the next step runs in it) and
    its artifacts are copied out of it live; only after the last step is it stopped first.
    """
    task = work.cell.task
    assert task.verifier_environment is not None
    verify_in_separate_environment(
        work,
        sandbox,
        replace(request, cell=work.cell, attempt_dir=work.attempt_dir),  # the step's view, its own build log
        task.verifier_environment,
        lambda: work.verifier.tests_payload(task, request.scratch_dir),
        deadline,
        verify=phases.verify,
        refuse=phases.refuse,
        collect=task.verifier_collect,
        stop=last,
    )


def _clear_previous_step(sandbox: Sandbox, scratch: Path) -> None:
    """The last step's hidden tests leave, and the logs start empty, before anything of this step runs."""
    empty = scratch / "empty-step-dir"
    empty.mkdir(exist_ok=True)
    sandbox.remove(TESTS_DIR)
    for path in (AGENT_LOGS_DIR, VERIFIER_LOGS_DIR, ARTIFACTS_DIR):
        sandbox.put(empty, path)


def _lay_over(sandbox: Sandbox, source: Path, workdir: str) -> None:
    """Every file (and link) below ``source`` put at its place under ``workdir``: what the
    subject made there stays, except where a file of the step's stands (as ``docker cp``)."""
    for root, dirs, files in os.walk(source):
        dirs.sort()
        rel = Path(root).relative_to(source)
        links = [n for n in dirs if os.path.islink(os.path.join(root, n))]
        for name in sorted(files) + links:
            sandbox.put(Path(root) / name, f"{workdir}/{(rel / name).as_posix()}")


def _prepare(work: AttemptWork, sandbox: Sandbox, step: Step, deadline: Deadline) -> str | None:
    """The step's ``setup.sh`` (from the workdir, as Harbor runs it), then its healthcheck,
    both under the step's ``setup`` phase network plan."""
    assert work.egress is not None
    with network_phase(sandbox, "setup", work.plan, work.egress) as setup:
        return _set_up(work, sandbox, step, deadline, setup.network)


def _set_up(work: AttemptWork, sandbox: Sandbox, step: Step, deadline: Deadline, network: bool) -> str | None:
    task, d = work.cell.task, work.attempt_dir
    env = base_env(task)
    if step.setup_script is not None:
        timeout, _ = phases.within_deadline(task.agent_timeout_sec, deadline)
        result = sandbox.exec(
            f"bash {task.workdir}/setup.sh",
            env=env,
            timeout_sec=timeout,
            stdout_path=d / "setup.stdout.txt",
            stderr_path=d / "setup.stderr.txt",
            cwd=task.workdir,
            network=network,
        )
        work.agent_info["setup"] = {"exit_code": result.exit_code, "duration_s": round(result.duration_s, 4)}
        if result.timed_out:
            return f"step {step.name!r}: setup.sh timed out after {timeout} s"
        if result.exit_code != 0:
            return f"step {step.name!r}: setup.sh exited with code {result.exit_code}"
    if step.healthcheck is not None:
        until = deadline[0] if deadline else None
        failed = wait_healthy(
            sandbox, step.healthcheck, env=env, cwd=task.workdir, out_dir=d, deadline=until, network=network
        )
        if failed:
            return f"step {step.name!r}: {failed}"
    return None


def _outcome(step: Step, work: AttemptWork) -> StepOutcome:
    """The step's class and verdict; a step refused for what the subject left scores 0."""
    status = classify(work.facts())
    verdict = work.verdict
    refused = work.taint is not None and work.taint.refused
    if (work.subject_fault or refused) and status in OFFICIAL:
        return StepOutcome(step.name, status, passed=False, score=0.0, rewards={})
    if verdict is None or verdict.passed is None:
        return StepOutcome(step.name, status)
    return StepOutcome(step.name, status, passed=verdict.passed, score=verdict.score, rewards=dict(verdict.rewards))


def _fold(work: AttemptWork, done: Done, stopped: str | None) -> None:
    """The cell's facts from its steps: the class follows the step that decided it."""
    task = work.cell.task
    last_work, last = done[-1]
    if last.status not in OFFICIAL:  # the loop ended on a step with no fair result: so does the cell
        decisive, verdict = last_work, None
        work.verdict = last_work.verdict
        work.verifier_outcome = last_work.verifier_outcome
        for name in ("infra_error", "policy_denied", "aborted"):
            setattr(work, name, getattr(last_work, name))
    else:
        verdict = cell_verdict([o for _, o in done], len(task.steps), task.multi_step_reward_strategy)
        decisive = done[verdict.decisive][0]
        details = {"reason": verdict.reason} if verdict.reason else {}
        source = f"steps ({task.multi_step_reward_strategy})"
        work.verdict = Verdict(verdict.passed, verdict.score, verdict.rewards, source=source, details=details)
        work.verifier_outcome = VerifierOutcome(ran=True, passed=verdict.passed)
    work.subject_outcome = decisive.subject_outcome
    work.subject_fault = None if verdict is not None and verdict.passed else decisive.subject_fault
    work.budget_exceeded = decisive.budget_exceeded or work.budget_exceeded  # (or the cell's, spent by the steps)
    work.agent_info = {**decisive.agent_info, "decisive_step": decisive.attempt_dir.name}
    work.verifier_info = _cell_verifier(work, done, verdict, stopped)
    work.budget_info = {**work.budget_info, **_budgets(work), "steps": [w.budget_info for w, _ in done]}
    work.claim = done[-1][0].claim
    taints = [w.taint for w, _ in done if w.taint is not None]
    work.taint = next((t for t in taints if t.tainted), taints[-1] if taints else None)
    work.usage = _summed_usage([w.usage for w, _ in done])
    for step_work, _ in done:
        for phase, seconds in step_work.timings.items():
            work.timings[phase] = work.timings.get(phase, 0.0) + seconds
    work.steps = _entries(work, done, stopped)


def _cell_verifier(work: AttemptWork, done: Done, verdict: CellVerdict | None, stopped: str | None) -> dict[str, Any]:
    task = work.cell.task
    last = done[-1][0].verifier_info
    info: dict[str, Any] = {
        "kind": f"{work.verifier.name} (per step)",
        "strategy": task.multi_step_reward_strategy,
        "reward": verdict.score if verdict else None,
        "rewards": verdict.rewards if verdict else {},
        "reward_source": work.verdict.source if work.verdict else None,
        "steps_run": len(done),
        "steps_total": len(task.steps),
        "timed_out": last.get("timed_out", False),
        "timeout_sec": last.get("timeout_sec"),
        "error": work.verdict.error if work.verdict else None,
    }
    if stopped:
        info["stopped"] = stopped
    return info


def _budgets(work: AttemptWork) -> dict[str, Any]:
    budgets = work.settings.budgets
    return {
        "cell_timeout_sec": budgets.cell_timeout_sec,
        "max_tokens": budgets.max_tokens,
        "max_cost_usd": budgets.max_cost_usd,
        "max_output_bytes": budgets.max_output_bytes,
    }


def _summed_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SUMMED_USAGE:
        values = [u[key] for u in usages if isinstance(u.get(key), (int, float))]
        if values:
            out[key] = sum(values)
    return out


def _entries(work: AttemptWork, done: Done, stopped: str | None) -> list[dict[str, Any]]:
    """The record's ``steps`` list: every declared step, the ones not run marked so."""
    out_dir = work.settings.out_dir
    entries = []
    for i, (step_work, outcome) in enumerate(done):
        facts = step_work.facts()
        agent, verifier = step_work.agent_info, step_work.verifier_info
        entries.append(
            {
                "index": i + 1,
                "name": outcome.name,
                "run": True,
                "status": outcome.status.value,
                "verdict": {True: "passed", False: "failed", None: "none"}[outcome.passed],
                "score": outcome.score,
                "rewards": dict(outcome.rewards),
                "min_reward": work.cell.task.steps[i].min_reward,
                "duration_s": round(sum(step_work.timings.values()), 4),
                "timings": {k: round(v, 4) for k, v in step_work.timings.items()},
                "subject": {
                    "exit_code": agent.get("exit_code"),
                    "timed_out": agent.get("timed_out"),
                    "timeout_sec": agent.get("timeout_sec"),
                    "duration_s": agent.get("duration_s"),
                    "usage": dict(step_work.usage),
                },
                "verifier": {
                    **{k: verifier.get(k) for k in ("exit_code", "timed_out", "duration_s", "error")},
                    "environment": (verifier.get("environment") or {}).get("mode", "shared"),
                },
                "network": {phase: step_work.plan.phase(phase).record() for phase in NETWORK_PHASES},
                "error": step_work.error_for(outcome.status, facts),
                "artifacts": {**step_work.artifacts(out_dir), **_setup_outputs(step_work)},
            }
        )
    for i in range(len(done), len(work.cell.task.steps)):
        step = work.cell.task.steps[i]
        entries.append({"index": i + 1, "name": step.name, "run": False, "status": None, "not_run": stopped})
    return entries


def _setup_outputs(work: AttemptWork) -> dict[str, str]:
    """Paths of what the step's setup.sh and healthcheck printed (relative to the output dir)."""
    names = {"setup_output": "setup.stdout.txt", "setup_stderr": "setup.stderr.txt"}
    names |= {"healthcheck_output": "healthcheck.stdout.txt", "healthcheck_stderr": "healthcheck.stderr.txt"}
    d, out_dir = work.attempt_dir, work.settings.out_dir
    return {k: (d / n).relative_to(out_dir).as_posix() for k, n in names.items() if (d / n).exists()}
