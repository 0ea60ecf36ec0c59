"""The user a phase runs as.

``phase_user`` runs a phase (agent, verifier, a step's) as the ``user`` its task names; it
raises InfraError naming the user: the platform could not give a fair start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..core.errors import InfraError
from ..executors.base import PhaseUsers, Sandbox


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
