"""Usage metered from an agent's output as it streams, and a run that stops the agent at a budget.

Each preset that prints usage while it works names a ``stream_usage`` reader: one line of its
output in, the usage that line reports out (or None). ``UsageMeter`` sums those figures (a
line with a ``key`` replaces the earlier line of that key: claude-code repeats a message's
usage on each of its content blocks), prices them when the agent gives no cost, and says
which budget the sum crossed. ``metered_exec`` runs the agent as a live process, feeds the
meter line by line and stops the process tree the moment a budget is crossed; the figure
kept when the agent is stopped (or times out) is the meter's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ...core import cancel
from ...core.usage import TOKEN_KEYS, add, normalise, price_cost, tokens
from ...executors.base import ExecResult, Process, Sandbox
from ..base import RunContext

#: Seconds between two reads of the whole run's spend (the ledger) while an agent streams.
COHORT_CHECK_SEC = 1.0
#: Seconds a stopped agent gets between SIGTERM and SIGKILL.
STOP_GRACE_SEC = 1.0
_POLL_SEC = 0.5


@dataclass(frozen=True)
class StreamUsage:
    """The usage one line of an agent's output reports; a later line with the same ``key`` replaces it."""

    usage: Mapping[str, Any]
    key: str | None = None


StreamReader = Callable[[str], StreamUsage | None]


class UsageMeter:
    """The running sum of what an agent's stream reported, checked against the cell's budgets."""

    def __init__(
        self,
        reader: StreamReader | None,
        *,
        model: str | None,
        table: Mapping[str, Any],
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        cohort_cost_left: Callable[[], float | None] | None = None,
    ) -> None:
        self.reader = reader
        self.model, self.table = model, table
        self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd
        self._cohort_cost_left = cohort_cost_left
        self._cohort_left: float | None = None
        self._cohort_read = 0.0
        self._keyed: dict[str, dict[str, Any]] = {}
        self._summed: dict[str, Any] = {}
        self._lock = threading.Lock()
        #: Lines that reported usage.
        self.reports = 0
        #: The budget the sum crossed first, or None.
        self.exceeded: str | None = None

    @property
    def enforcing(self) -> bool:
        """True when a budget is watched while the agent runs (the run is then a live process)."""
        watched = self.max_tokens is not None or self.max_cost_usd is not None or self._cohort_cost_left is not None
        return self.reader is not None and watched

    def feed(self, line: str) -> str | None:
        """Take one line of output; the budget it made the sum cross, if this line did."""
        if self.reader is None or not line.strip():
            return None
        try:
            found = self.reader(line)
        except (ValueError, TypeError, AttributeError, KeyError):  # a reader never fails the run
            return None
        if found is None:
            return None
        usage = normalise(found.usage)
        if not usage:
            return None
        with self._lock:
            self.reports += 1
            if found.key is not None:
                self._keyed[found.key] = usage
            else:
                self._summed = add(self._summed, usage)
            if self.exceeded is None:
                self.exceeded = self._check()
                return self.exceeded
        return None

    def feed_text(self, text: str) -> None:
        """Take a whole output after the run (the agent ran without a live meter)."""
        for line in text.splitlines():
            self.feed(line)

    def total(self) -> dict[str, Any]:
        """Everything metered so far (tokens, and a cost where the stream carried one)."""
        with self._lock:
            return self._total()

    def _total(self) -> dict[str, Any]:
        out = dict(self._summed)
        for usage in self._keyed.values():
            out = add(out, usage)
        return {k: v for k, v in out.items() if k in (*TOKEN_KEYS, "cost_usd")}

    def _cost(self, total: Mapping[str, Any]) -> float | None:
        """The agent's cost, else the price table's for the metered tokens."""
        if total.get("cost_usd") is not None:
            return float(total["cost_usd"])
        return price_cost(total, self.model, self.table)

    def _check(self) -> str | None:
        total = self._total()
        used = tokens(total)
        if self.max_tokens is not None and used is not None and used > self.max_tokens:
            return "max_tokens"
        cost = self._cost(total)
        if self.max_cost_usd is not None and cost is not None and cost > self.max_cost_usd:
            return "max_cost_usd"
        left = self._cohort()
        if left is not None and ((cost or 0.0) > left or left <= 0):
            return "cohort_max_cost_usd"
        return None

    def _cohort(self) -> float | None:
        if self._cohort_cost_left is None:
            return None
        now = time.monotonic()
        if now - self._cohort_read >= COHORT_CHECK_SEC:
            self._cohort_left, self._cohort_read = self._cohort_cost_left(), now
        return self._cohort_left

    def recheck(self) -> str | None:
        """Check again without new output (the rest of the run may have spent the cohort's cap)."""
        with self._lock:
            if self.exceeded is None and self._cohort_cost_left is not None:
                self.exceeded = self._check()
            return self.exceeded


def metered_exec(sandbox: Sandbox, command: str, *, cwd: str, ctx: RunContext, meter: UsageMeter) -> ExecResult:
    """``ctx.run(sandbox, command)`` as a live process whose output feeds ``meter``; stopped on a budget.

    Output goes to ``ctx.stdout_path`` / ``ctx.stderr_path`` with the same cap as an exec;
    the timeout and a cancel (Ctrl-C) stop the whole tree as an exec does.
    """
    started = time.monotonic()
    proc = sandbox.spawn(command, env=dict(ctx.env), cwd=cwd, network=ctx.network)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    stop = threading.Event()
    out = _Pump(proc.stdout, ctx.stdout_path, ctx.max_output_bytes, meter, stop)
    err = _Pump(proc.stderr, ctx.stderr_path, ctx.max_output_bytes, None, None)
    deadline = None if ctx.timeout_sec is None else started + ctx.timeout_sec
    timed_out, code = False, None
    try:
        with cancel.on_cancel(lambda: proc.kill(STOP_GRACE_SEC)):
            code, timed_out = _wait(proc, stop, deadline, meter)
    except BaseException:
        proc.kill(STOP_GRACE_SEC)
        raise
    finally:
        out.join(10)
        err.join(10)
    return ExecResult(
        exit_code=None if timed_out else code,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )


def _wait(proc: Process, stop: threading.Event, deadline: float | None, meter: UsageMeter) -> tuple[int | None, bool]:
    """Wait for the agent's end, a crossed budget or the deadline: (exit code, timed out)."""
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            proc.kill(STOP_GRACE_SEC)
            return None, True
        stop.wait(_POLL_SEC if left is None else min(_POLL_SEC, left))
        if meter.exceeded or meter.recheck():
            proc.kill(STOP_GRACE_SEC)
            return proc.wait(5), False
        code = proc.wait(0)
        if code is not None:
            return code, False
        if stop.is_set():  # end of output: the process is on its way out
            stop.clear()
            code = proc.wait(min(_POLL_SEC, left) if left is not None else _POLL_SEC)
            if code is not None:
                return code, False


class _Pump(threading.Thread):
    """Copies one stream into its file (capped) and, for stdout, feeds the meter line by line."""

    def __init__(
        self, stream: IO[bytes], path: Path, cap: int, meter: UsageMeter | None, stop: threading.Event | None
    ) -> None:
        super().__init__(name="maka-meter", daemon=True)
        self.stream, self.path, self.cap = stream, path, cap
        self.meter, self.stop = meter, stop
        self.truncated = False
        self.start()

    def run(self) -> None:
        written, pending = 0, b""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "wb") as out:
            while True:
                try:
                    data = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
                except (OSError, ValueError):
                    data = b""
                if not data:
                    break
                if written < self.cap:
                    out.write(data[: self.cap - written])
                    out.flush()
                if written + len(data) > self.cap:
                    self.truncated = True
                written += len(data)
                if self.meter is not None:
                    pending = self._lines(pending + data)
            if self.meter is not None and pending:
                self._feed(pending)
        if self.stop is not None:
            self.stop.set()

    def _lines(self, data: bytes) -> bytes:
        *lines, rest = data.split(b"\n")
        for line in lines:
            self._feed(line)
        if len(rest) > 16 * 1024 * 1024:  # one line past any sane event: drop it
            return b""
        return rest

    def _feed(self, line: bytes) -> None:
        assert self.meter is not None
        if self.meter.feed(line.decode("utf-8", errors="replace")) and self.stop is not None:
            self.stop.set()
