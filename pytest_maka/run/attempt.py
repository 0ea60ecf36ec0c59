"""One attempt's lifecycle: lease → prepare the environment → the step loop → release.

The step loop (``run/steps.py``) runs every task as a task of steps (a single-step task is a
task of one step): limit → budget → subject → freeze → deadline → separate-or-restore →
verify, with the phases in ``run/phases.py``, the attempt's state in ``run/work.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack

from ..core.errors import DeadlineReached, InfraError
from ..core.network import NETWORK_PHASES
from ..core.taxonomy import SubjectOutcome
from ..egress.log import LOG_NAME, EgressLog
from ..egress.phase import network_record
from ..executors.base import LeaseRequest, Sandbox
from .facts import IsolationFacts
from .health import last_line, wait_healthy
from .phase import network_phase
from .restore import base_env, image_env_of
from .steps import Deadline, run_steps
from .work import INSTRUCTION_FILE, AttemptWork, attempt_plan

__all__ = ["run_attempt_steps"]


def run_attempt_steps(
    work: AttemptWork,
    lease: Callable[[LeaseRequest], AbstractContextManager[Sandbox]],
    request: LeaseRequest,
    *,
    deadline: Deadline,
) -> None:
    """Lease the environment, bring it up healthy, run the task's steps in it, filling ``work``."""
    task, d = work.cell.task, work.attempt_dir
    (d / "instruction.md").write_text(task.instruction, encoding="utf-8")
    work.plan, work.egress = attempt_plan(work), EgressLog(d / LOG_NAME)
    request.egress = any(work.plan.phase(p).mode == "allowlist" for p in NETWORK_PHASES)
    stack = ExitStack()
    try:
        with work.timed("setup"):
            try:
                sandbox = stack.enter_context(lease(request))
            except DeadlineReached as exc:  # e.g. the image build ran past the whole-cell deadline
                work.agent_facts.not_started = str(exc)
                work.budget_exceeded = deadline[1] if deadline else "cell_timeout_sec"
                work.subject_outcome = SubjectOutcome(started=False)
                return
            finally:
                _book_slot_wait(work, request)
            work.isolation = IsolationFacts(
                sandbox.isolation(
                    agent_network=work.plan.agent.mode == "all", verifier_network=work.plan.verifier.mode == "all"
                )
            )
            with network_phase(sandbox, "setup", work.plan, work.egress) as setup:
                sandbox.put(d / "instruction.md", INSTRUCTION_FILE)
                if task.healthcheck is not None:  # the environment must be up before the agent starts
                    log_dir = d / "healthcheck"
                    log_dir.mkdir(parents=True, exist_ok=True)
                    env = base_env(task, image_env_of(sandbox))
                    until = deadline[0] if deadline else None
                    failed = wait_healthy(
                        sandbox, task.healthcheck, env=env, out_dir=log_dir, deadline=until, network=setup.network
                    )
                    if failed:
                        tail = last_line(log_dir)
                        raise InfraError(f"environment: {failed}" + (f": {tail}" if tail else ""))
        run_steps(work, sandbox, request, deadline)
    finally:
        with work.timed("teardown"):
            _close(stack, work)
        isolation = work.isolation
        if isolation.sandbox or isolation.teardown_error:
            isolation.network = network_record(work.plan, isolation.sandbox.get("network"), work.egress)


#: The timing a lease's wait for a shared slot is booked to (never ``setup``).
SLOT_WAIT = "slot_wait"

def _book_slot_wait(work: AttemptWork, request: LeaseRequest) -> None:
    """The lease's wait for a shared slot (``SharedCapacity``) is ``timings.slot_wait``, not setup:
    it is taken out of the setup time running now (``work.timed`` adds the whole block at its end)."""
    if request.slot_wait:
        work.add_time(SLOT_WAIT, request.slot_wait)
        work.add_time("setup", -request.slot_wait)
        request.slot_wait = None


def _close(stack: ExitStack, work: AttemptWork) -> None:
    """Release the lease; a cleanup failure after a verdict is noted, not fatal to the verdict."""
    try:
        stack.close()
    except Exception as e:
        if work.verifier_outcome is None:
            raise
        work.isolation.teardown_error = f"{type(e).__name__}: {e}"
