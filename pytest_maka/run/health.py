"""A healthcheck polled in a sandbox with Docker's HEALTHCHECK semantics.

Probes run every ``start_interval_sec`` during the start period (failures there do not
count) and every ``interval_sec`` after it; each probe is limited to ``timeout_sec``; the
check fails after ``retries`` consecutive failures past the start period. A probe that
succeeds makes it healthy at once. The environment's healthcheck (run/attempt.py, where a
failure is InfraError) and each step's (run/steps.py, where it is the step's problem) are
polled here; ``last_line`` gives the last probe's output for the message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..core.task import Healthcheck
from ..executors.base import Sandbox


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    *,
    env: Mapping[str, str],
    cwd: str | None = None,
    out_dir: Path,
    deadline: float | None = None,
    network: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """None once a probe succeeds; else one line naming the command and how it failed.

    ``deadline`` (a ``time.time()`` value) ends the polling early: the cell's deadline.
    ``network``: the probes get the setup phase's network (the caller runs them under it).
    Each probe's output goes to ``out_dir/healthcheck.{stdout,stderr}.txt`` (the last kept).
    """
    started = clock()
    failures = 0
    probes = 0
    last = ""
    while True:
        probes += 1
        result = sandbox.exec(
            check.command,
            env=env,
            timeout_sec=check.timeout_sec,
            stdout_path=out_dir / "healthcheck.stdout.txt",
            stderr_path=out_dir / "healthcheck.stderr.txt",
            cwd=cwd,
            network=network,
        )
        if result.exit_code == 0 and not result.timed_out:
            return None
        last = f"timed out after {check.timeout_sec:g} s" if result.timed_out else f"exit code {result.exit_code}"
        in_start = clock() - started < check.start_period_sec
        if not in_start:
            failures += 1
            if failures >= check.retries:
                times = "time" if failures == 1 else "times"
                return (
                    f"the healthcheck {check.command!r} failed {failures} {times} in a row "
                    f"({probes} probe(s), the last: {last})"
                )
        pause = check.start_interval_sec if in_start else check.interval_sec
        if deadline is not None and time.time() + pause >= deadline:
            return f"the healthcheck {check.command!r} was not healthy before the cell's deadline (the last: {last})"
        sleep(pause)


def last_line(out_dir: Path) -> str:
    """The last line the last probe printed (stderr first), at most 200 characters; "" if none."""
    for name in ("healthcheck.stderr.txt", "healthcheck.stdout.txt"):
        try:
            lines = (out_dir / name).read_text("utf-8", "replace").strip().splitlines()
        except OSError:
            continue
        if lines:
            return lines[-1][:200]
    return ""
