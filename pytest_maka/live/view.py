"""What the live view says, and two ways of showing it: in place on a terminal, or plain lines.

``Progress`` counts what the controller knows (cells selected, reported, their records);
``status_lines`` renders it with the running attempts (this process's and the workers'
published ones). ``TtyArea`` draws the lines below pytest's current output line and puts
the cursor back where pytest left it, so pytest's own dots keep flowing; it is erased
before pytest writes anything else. ``PlainLines`` prints them every so often, for logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..core.record_model import AttemptRecord
from .status import Running

#: Running cells shown by name; the rest are counted.
SHOW_RUNNING = 8


@dataclass
class Progress:
    """The controller's counts for the live view."""

    total: int = 0
    started: float = field(default_factory=time.time)
    done: int = 0
    executed: int = 0  # done, minus the cells reported from the ledger of an earlier run
    retries: int = 0
    per_subject: dict[str, list[int]] = field(default_factory=dict)  # name -> [passes, official]

    def add(self, record: AttemptRecord) -> None:
        self.done += 1
        if not record.resumed:
            self.executed += 1
            self.retries += max((record.attempt_count or 1) - 1, 0)
        tally = self.per_subject.setdefault(record.subject, [0, 0])
        if record.official:
            tally[1] += 1
            tally[0] += bool(record.passed)

    def eta(self, now: float) -> float | None:
        """Seconds left at the rate cells have been finishing in this run."""
        remaining = self.total - self.done
        elapsed = now - self.started
        if remaining <= 0:
            return 0.0
        if self.executed == 0 or elapsed <= 0:
            return None
        return remaining * elapsed / self.executed


def duration(value: float | None) -> str:
    if value is None:
        return "?"
    seconds = round(value)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def status_lines(progress: Progress, running: Sequence[Running], now: float) -> list[str]:
    """The summary line, then one line per running attempt (phase and time in the attempt)."""
    queued = max(progress.total - progress.done - len(running), 0)
    rates = ", ".join(
        f"{name} {passes}/{official}" for name, (passes, official) in sorted(progress.per_subject.items())
    )
    head = (
        f"maka: {progress.done}/{progress.total} done, {len(running)} running, {queued} queued, "
        f"ETA {duration(progress.eta(now))} | retries {progress.retries} | official passes: {rates or '-'}"
    )
    lines = [head]
    for r in sorted(running, key=lambda r: r.started)[:SHOW_RUNNING]:
        phase = f"{r.phase}: {r.detail}" if r.detail else r.phase
        again = f" (attempt {r.attempt})" if r.attempt > 1 else ""
        lines.append(f"  {r.cell_id}{again}  {phase}  {duration(now - r.started)}")
    if len(running) > SHOW_RUNNING:
        lines.append(f"  ... and {len(running) - SHOW_RUNNING} more running")
    return lines


def fit(line: str, width: int) -> str:
    """``line`` cut to fit a terminal of ``width`` columns (one column kept free: no wrap)."""
    room = max(width, 20) - 1
    return line if len(line) <= room else line[: room - 1] + "…"


class TtyArea:
    """Status lines drawn under the current terminal line; the cursor stays where pytest left it."""

    def __init__(self, file: TextIO, width: Callable[[], int], column: Callable[[], int]) -> None:
        self.file = file
        self.width = width  # () -> the terminal's width now (it may be resized)
        self.column = column  # () -> the column pytest's writer is at
        self.drawn = False

    def draw(self, lines: Sequence[str]) -> None:
        self.clear()
        col = int(self.column())
        width = self.width()
        body = "\n".join(fit(line, width) for line in lines)
        back = f"\x1b[{len(lines)}F" + (f"\x1b[{col}C" if col else "")
        self.file.write("\n" + body + back)
        self.file.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.file.write("\x1b[J")  # from the cursor (end of pytest's line) to the end of the screen
            self.file.flush()
            self.drawn = False


class PlainLines:
    """Status lines printed through pytest's terminal reporter (logs, CI); fitted to the width
    of the terminal when there is one (a log file has no width to fit: lines stay whole)."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self.terminal = bool(reporter.isatty())

    def draw(self, lines: Sequence[str]) -> None:
        if self.reporter._tw.width_of_current_line:
            self.reporter.write_line("")  # off the line of dots pytest is writing
        width = self.reporter._tw.fullwidth
        for line in lines:
            self.reporter.write_line(fit(line, width) if self.terminal else line)

    def clear(self) -> None:
        """Plain lines stay where they are."""
