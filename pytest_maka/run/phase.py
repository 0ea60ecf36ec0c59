"""The user a phase runs as, and the network a phase runs behind.

``phase_user`` runs a phase (agent, verifier, a step's) as the ``user`` its task names; it
raises InfraError naming the user: the platform could not give a fair start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..core.errors import InfraError
from ..egress.log import EgressLog
from ..egress.plan import NetworkPlan, PhasePlan
from ..executors.base import EgressSandbox, PhaseUsers, Sandbox


def is_default_user(user: str | int | None) -> bool:
    return user is None or str(user) in ("root", "0")


@contextmanager
def phase_user(sandbox: Sandbox, user: str | int | None, phase: str, owned: list[str]) -> Iterator[None]:
    """Commands of the block run as ``user``, who first gets the phase's ``owned`` directories."""
    if is_default_user(user):
        yield
        return
    if not isinstance(sandbox, PhaseUsers):
        raise InfraError(f"[{phase}] user {user!r}: this executor cannot run a phase as another user")
    sandbox.give(owned, user, phase)
    with sandbox.as_user(user, phase):
        yield


@contextmanager
def network_phase(sandbox: object, name: str, plan: NetworkPlan, log: EgressLog) -> Iterator[PhasePlan]:
    """Run the block under phase ``name`` of ``plan``; an allowlist the sandbox cannot enforce is an infra error."""
    phase = plan.phase(name)
    if phase.mode != "allowlist":
        yield phase
        return
    if not isinstance(sandbox, EgressSandbox):
        raise InfraError(f"this executor cannot enforce the {name} phase's egress allowlist (no egress proxy)")
    with sandbox.egress_phase(name, phase, log):
        yield phase
