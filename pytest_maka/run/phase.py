"""Per-phase facts of the environment: the user a phase runs as, and the task's healthcheck.

``phase_user`` runs a phase (agent, verifier, a step's) as the ``user`` its task names;
``wait_healthy`` polls a healthcheck with Docker's HEALTHCHECK semantics. Both raise
InfraError naming the user or the command: the platform could not give a fair start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import InfraError
from ..core.task import Healthcheck
from ..executors.base import PhaseUsers, Sandbox
from .health import wait_healthy as poll_health


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


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    *,
    env: Mapping[str, str],
    log_dir: Path,
    name: str = "environment",
    deadline: float | None = None,
    network: bool = False,
) -> None:
    """Poll ``check`` until it passes, as Docker does (``run.health``); unhealthy: InfraError
    naming the command, with the last probe's output."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failed = poll_health(sandbox, check, env=env, out_dir=log_dir, deadline=deadline, network=network)
    if failed:
        tail = _tail(log_dir / "healthcheck.stderr.txt") or _tail(log_dir / "healthcheck.stdout.txt")
        raise InfraError(f"{name}: {failed}" + (f": {tail}" if tail else ""))


def _tail(path: Path) -> str:
    try:
        lines = path.read_text("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""
