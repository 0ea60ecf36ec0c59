"""The step loop: every task runs as a task of steps, each step through ``run_step``.

A single-step task is a task of one step, run on the attempt's own facts. A multi-step task
(Harbor ``steps/``) runs its steps in order in one environment, each with facts of its own
(its artifacts under ``steps/<name>/``): the previous step's hidden tests and logs are
removed, the step's ``workdir/`` is laid over the workdir, its ``setup.sh`` and healthcheck
run under the step's ``setup`` network plan; then, for every step alike: limit → budget →
subject → freeze → deadline → separate-or-restore → verify, with the step's instruction,
tests, timeouts and networks (its own NetworkPlan). A step with a separate verifier is
verified in a fresh environment (``run/separate.py``) while the subject's keeps running for
the next. ``core.steps`` decides when the remaining steps stop and what the cell's verdict
is; ``_fold`` makes the cell's facts from its steps'.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.errors import SubjectFault
from ..core.steps import CellVerdict, StepOutcome, cell_verdict, step_task, stop_reason
from ..core.task import AGENT_LOGS_DIR, ARTIFACTS_DIR, TESTS_DIR, VERIFIER_LOGS_DIR, Step
from ..core.taxonomy import OFFICIAL, SubjectOutcome, VerifierOutcome, classify
from ..core.usage import tokens
from ..executors.base import LeaseRequest, Sandbox
from ..verifiers.base import Verdict
from .facts import AgentFacts, BudgetFacts, CellLimits, StepSetup, StepsVerdict, Tamper, Timeouts, VerifierFacts
from .health import wait_healthy
from .phase import network_phase
from .phases import agent_limit, freeze, refuse, run_subject, scaled_timeout, verify, verify_ahead, within_deadline
from .restore import base_env, guarded, restore_for_verification
from .separate import run_collect_hooks, verify_in_separate_environment
from .taint import arm, note_read_only_system, settle
from .work import INSTRUCTION_FILE, AttemptWork, StepsRun

Deadline = tuple[float, str] | None
#: The steps that ran, each with its facts and its outcome.
Done = list[tuple[AttemptWork, StepOutcome]]
#: Usage keys summed over the steps (null stays null only when no step reported it).
SUMMED_USAGE = ("input_tokens", "output_tokens", "cache_tokens", "cost_usd")


@dataclass(frozen=True)
class StepPlace:
    """Where a step stands in its task."""

    #: The step of a multi-step task; None: a single-step task's one step (the task itself).
    step: Step | None
    index: int
    #: No step of the subject's runs after this one.
    last: bool


def run_steps(work: AttemptWork, sandbox: Sandbox, request: LeaseRequest, deadline: Deadline) -> None:
    """Run every step of ``work``'s task in ``sandbox`` (already leased), filling ``work``."""
    task = work.cell.task
    if not task.steps:  # a task of one step: its facts are the attempt's
        run_step(work, sandbox, StepPlace(None, 0, last=True), request, deadline)
        return
    done: Done = []
    stopped: str | None = None
    for index, step in enumerate(task.steps):
        step_dir = work.attempt_dir / "steps" / step.name
        step_dir.mkdir(parents=True)
        step_work = work.for_step(step_task(task, step), step_dir)
        place = StepPlace(step, index, last=index == len(task.steps) - 1)
        try:
            run_step(step_work, sandbox, place, request, deadline)
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


def run_step(work: AttemptWork, sandbox: Sandbox, place: StepPlace, request: LeaseRequest, deadline: Deadline) -> None:
    """One step: (a multi-step task's step set up first) limit → budget → subject → freeze →
    deadline → separate-or-restore → verify, filling ``work``."""
    task, budgets, scratch = work.cell.task, work.settings.budgets, request.scratch_dir
    if place.step is not None and not _set_up_step(work, sandbox, place, scratch, deadline):
        return
    agent_timeout, limit_name = agent_limit(task, budgets, deadline)
    verifier_timeout = scaled_timeout(
        task.verifier_timeout_sec, budgets.verifier_timeout_sec, budgets.timeout_multiplier
    )
    work.budget_facts = BudgetFacts(Timeouts(agent_timeout, verifier_timeout), CellLimits.of(budgets))
    if agent_timeout is not None and agent_timeout <= 0:
        work.budget_exceeded, work.subject_outcome = limit_name, SubjectOutcome(started=False)
        return
    verify_ahead(work, sandbox)  # the verifier's sandbox may be set up while the subject runs
    if not run_subject(work, sandbox, agent_timeout, limit_name):
        return
    with work.timed("freeze"):
        freeze(work, sandbox, scratch)
    if deadline is not None and deadline[0] <= time.time():  # the whole-cell deadline left no time to verify
        work.budget_exceeded = work.budget_exceeded or deadline[1]
        return
    if task.verifier_environment is not None:  # verified in a fresh environment (run/separate.py)
        # As Harbor 0.25: the subject's environment is stopped first only when no step runs after this one.
        verify_in_separate_environment(
            work,
            sandbox,
            replace(request, cell=work.cell, attempt_dir=work.attempt_dir),  # the step's view, its own build log
            task.verifier_environment,
            lambda: work.verifier.tests_payload(task, scratch),
            deadline,
            collect=task.verifier_collect,
            stop=place.last,
        )
        return
    if task.verifier_collect:  # [[verifier.collect]] before verification, as in separate mode
        work.verifier_facts.collect_hooks = run_collect_hooks(work, sandbox, task.verifier_collect)
    try:
        with work.timed("restore"):
            tests = work.verifier.tests_payload(task, scratch)
            work.verifier_facts.tamper = Tamper(
                guarded("restore", lambda: restore_for_verification(sandbox, tests, scratch, task_format=task.format))
            )
            armed = arm(sandbox)
        verify(work, sandbox, work.verifier, scratch, deadline)
    except SubjectFault as fault:  # e.g. it stopped its container and changed what a restart runs
        refuse(work, fault)
        return
    with work.timed("taint") if place.step is None else nullcontext():  # (a step's timings have no taint phase)
        settle(work, sandbox, armed)
    note_read_only_system(work, sandbox)


def _set_up_step(work: AttemptWork, sandbox: Sandbox, place: StepPlace, scratch: Path, deadline: Deadline) -> bool:
    """A multi-step task's step made ready: its instruction, files, ``setup.sh`` and healthcheck;
    False (with the facts why) when its environment failed."""
    task, d, step = work.cell.task, work.attempt_dir, place.step
    assert step is not None
    (d / "instruction.md").write_text(task.instruction, encoding="utf-8")
    with work.timed("setup"):
        if place.index > 0:
            _clear_previous_step(sandbox, scratch)
            for dest, source in work.subject.uploads(task).items():  # e.g. the step's own /solution
                sandbox.put(source, dest)
        sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
        if step.workdir_dir is not None:
            _lay_over(sandbox, step.workdir_dir, task.workdir)
        problem = _prepare(work, sandbox, step, deadline)
    if problem is None:
        return True
    if place.index == 0:  # nothing of the subject's has run yet: the task's environment failed
        work.infra_error, work.subject_outcome = problem, SubjectOutcome(started=False)
    else:  # the subject had this environment before: what fails now is counted against it
        work.subject_fault = f"{problem} (after the subject's earlier steps)"
        work.subject_outcome = SubjectOutcome(exit_code=None)
        work.agent_facts = AgentFacts(not_started=problem)
    return False


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
        timeout, _ = within_deadline(task.agent_timeout_sec, deadline)
        result = sandbox.exec(
            f"bash {task.workdir}/setup.sh",
            env=env,
            timeout_sec=timeout,
            stdout_path=d / "setup.stdout.txt",
            stderr_path=d / "setup.stderr.txt",
            cwd=task.workdir,
            network=network,
        )
        work.agent_facts.setup = StepSetup(result.exit_code, round(result.duration_s, 4))
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
        work.infra_error, work.policy_denied, work.aborted = (
            last_work.infra_error,
            last_work.policy_denied,
            last_work.aborted,
        )
        work.provider_unusable, work.retryable = last_work.provider_unusable, last_work.retryable
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
    work.agent_facts = replace(decisive.agent_facts, decisive_step=decisive.attempt_dir.name)
    work.verifier_facts = VerifierFacts(steps=_cell_verifier(work, done, verdict, stopped))
    work.budget_facts = BudgetFacts(
        limits=CellLimits.of(work.settings.budgets), steps=[w.budget_facts for w, _ in done]
    )
    work.claim = done[-1][0].claim
    taints = [w.taint for w, _ in done if w.taint is not None]
    work.taint = next((t for t in taints if t.tainted), taints[-1] if taints else None)
    work.usage = _summed_usage([w.usage for w, _ in done])
    for step_work, _ in done:
        for phase, seconds in step_work.timings.items():
            work.timings[phase] = work.timings.get(phase, 0.0) + seconds
    work.steps = StepsRun(list(done), stopped)


def _cell_verifier(work: AttemptWork, done: Done, verdict: CellVerdict | None, stopped: str | None) -> StepsVerdict:
    task = work.cell.task
    last = done[-1][0].verifier_facts.run
    return StepsVerdict(
        kind=f"{work.verifier.name} (per step)",
        strategy=task.multi_step_reward_strategy,
        reward=verdict.score if verdict else None,
        rewards=verdict.rewards if verdict else {},
        reward_source=work.verdict.source if work.verdict else None,
        steps_run=len(done),
        steps_total=len(task.steps),
        timed_out=last.timed_out if last is not None else False,
        timeout_sec=last.timeout_sec if last is not None else None,
        error=work.verdict.error if work.verdict else None,
        stopped=stopped or None,
    )


def _summed_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in SUMMED_USAGE:
        values = [u[key] for u in usages if isinstance(u.get(key), (int, float))]
        if values:
            out[key] = sum(values)
    return out
