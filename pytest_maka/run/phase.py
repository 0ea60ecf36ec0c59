"""Per-phase facts of the environment: the user a phase runs as, and the task's healthcheck.

``phase_user`` runs a phase (agent, verifier, a step's) as the ``user`` its task names;
``wait_healthy`` polls a healthcheck with Docker's HEALTHCHECK semantics. Both raise
InfraError naming the user or the command: the platform could not give a fair start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..core.errors import InfraError
from ..core.task import Healthcheck
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


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    *,
    env: Mapping[str, str],
    log_dir: Path,
    name: str = "environment",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll ``check`` until it passes, as Docker does; returns the number of probes run.

    Probes run every ``start_interval_sec`` during ``start_period_sec`` (their failures do not
    count), then every ``interval_sec``; each probe is cut at ``timeout_sec``; ``retries``
    consecutive counted failures make it unhealthy: InfraError naming the command.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    started = clock()
    failures, probes = 0, 0
    last = ""
    while True:
        probes += 1
        out, err = log_dir / f"healthcheck-{probes}.stdout.txt", log_dir / f"healthcheck-{probes}.stderr.txt"
        result = sandbox.exec(check.command, env=env, timeout_sec=check.timeout_sec, stdout_path=out, stderr_path=err)
        if result.exit_code == 0 and not result.timed_out:
            return probes
        last = f"timed out after {check.timeout_sec:g} s" if result.timed_out else f"exit {result.exit_code}"
        tail = _tail(err) or _tail(out)
        if tail:
            last += f": {tail}"
        in_start = clock() - started < check.start_period_sec
        if not in_start:
            failures += 1
            if failures >= max(1, check.retries):
                raise InfraError(
                    f"{name} healthcheck {check.command!r} failed {failures} times in a row (last: {last})"
                )
        sleep(check.start_interval_sec if in_start else check.interval_sec)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""
