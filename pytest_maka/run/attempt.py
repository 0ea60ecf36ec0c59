"""One attempt's lifecycle: lease → prepare → run subject → stop → freeze → restore → verify.

The phases themselves are in ``run/phases.py``, the attempt's state in ``run/work.py``;
multi-step tasks loop over their steps in ``run/steps.py``, separate verifier environments
are ``run/separate.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack

from ..core.errors import DeadlineReached, SubjectFault
from ..core.network import NETWORK_PHASES
from ..core.taxonomy import SubjectOutcome
from ..egress.log import LOG_NAME, EgressLog
from ..egress.phase import network_phase, network_record
from ..executors.base import LeaseRequest, Sandbox
from .phase import wait_healthy
from .phases import agent_limit, freeze, refuse, run_subject, scaled_timeout, verify, verify_ahead
from .restore import base_env, guarded, image_env_of, restore_for_verification
from .separate import run_collect_hooks, verify_separately
from .taint import arm, note_read_only_system, settle
from .work import INSTRUCTION_FILE, AttemptWork, attempt_plan, subject_mounts

__all__ = ["INSTRUCTION_FILE", "AttemptWork", "attempt_plan", "run_attempt_steps", "subject_mounts"]


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
    request.egress = any(work.plan.phase(p).mode == "allowlist" for p in NETWORK_PHASES)
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
            work.isolation = sandbox.isolation(
                agent_network=work.plan.agent.mode == "all", verifier_network=work.plan.verifier.mode == "all"
            )
            with network_phase(sandbox, "setup", work.plan, work.egress) as setup:
                sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
                if task.healthcheck is not None:  # the environment must be up before the agent starts
                    env = base_env(task, image_env_of(sandbox))
                    until = deadline[0] if deadline else None
                    log_dir = d / "healthcheck"
                    wait_healthy(
                        sandbox, task.healthcheck, env=env, log_dir=log_dir, deadline=until, network=setup.network
                    )
        if task.steps:  # --- multi-step tasks: the loop per step (run/steps.py) replaces the phases below
            from .steps import run_steps

            run_steps(work, sandbox, request, deadline)
            return
        agent_timeout, limit_name = agent_limit(task, budgets, deadline)
        work.budget_info = {
            "agent_timeout_sec": agent_timeout,
            "verifier_timeout_sec": scaled_timeout(
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
        verify_ahead(work, sandbox)  # the verifier's sandbox may be set up while the subject runs
        if not run_subject(work, sandbox, agent_timeout, limit_name):
            return
        with work.timed("freeze"):
            freeze(work, sandbox, request.scratch_dir)
        if deadline is not None and deadline[0] <= time.time():  # the whole-cell deadline left no time to verify
            work.budget_exceeded = work.budget_exceeded or deadline[1]
            return
        if task.verifier_environment is not None:  # --- separate verifier environment (run/separate.py)
            verify_separately(work, sandbox, request, deadline, verify=verify, refuse=refuse)
            return
        if task.verifier_collect:  # [[verifier.collect]] before verification, as in separate mode
            work.verifier_info["collect_hooks"] = run_collect_hooks(work, sandbox, task.verifier_collect)
        try:
            with work.timed("restore"):
                tests = work.verifier.tests_payload(task, request.scratch_dir)
                work.verifier_info["tamper"] = guarded(
                    "restore",
                    lambda: restore_for_verification(sandbox, tests, request.scratch_dir, task_format=task.format),
                )
                armed = arm(sandbox)
            verify(work, sandbox, work.verifier, request.scratch_dir, deadline)
        except SubjectFault as fault:  # e.g. it stopped its container and changed what a restart runs
            refuse(work, fault)
            return
        with work.timed("taint"):
            settle(work, sandbox, armed)
        note_read_only_system(work, sandbox)
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
