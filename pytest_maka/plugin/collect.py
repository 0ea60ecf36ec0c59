"""Cohort spec file → one pytest item per cell, with ids ``TASK[SUBJECT-rN]``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..core.cell import Cell
from ..core.record_model import AttemptRecord
from ..core.taxonomy import MEANING, PYTEST_OUTCOME, Status
from . import compat

if TYPE_CHECKING:
    from .session import MakaSession

CELL_FIXTURES = ("maka_workspace", "executor_lease")


class CellFailed(Exception):
    """The subject did not succeed (agent_failure, agent_incomplete, budget_exhausted)."""


class CellError(Exception):
    """No fair verdict: verifier, infra or policy failure (shown as a pytest error)."""


class CohortFile(pytest.File):
    """The spec given with --maka-spec; its children are the cells of the cohort."""

    maka: MakaSession

    def collect(self) -> Any:
        info = None
        for cell in self.maka.cohort.cells:
            item = CellItem.from_parent(self, cell=cell, fixtureinfo=info)
            info = item._fixtureinfo
            reason = self.maka.skip_reason(cell)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
            yield item


class CellItem(pytest.Item):
    """One (task, subject, repetition). Runs the cell lifecycle in ``runtest``."""

    def __init__(self, *, cell: Cell, parent: CohortFile, fixtureinfo: Any = None, **kw: Any) -> None:
        nodeid = compat.cell_nodeid(parent, cell.task.id, cell.params)
        super().__init__(name=cell.id, parent=parent, nodeid=nodeid, **kw)
        self.cell = cell
        self.maka: MakaSession = parent.maka
        self.maka_record: AttemptRecord | None = None
        self.extra_keyword_matches.update({cell.task.id, cell.subject.name, cell.subject.kind, f"r{cell.repetition}"})
        self.add_marker(pytest.mark.usefixtures(*CELL_FIXTURES))
        compat.setup_fixtures(self, fixtureinfo or compat.fixture_info(self))

    def setup(self) -> None:
        compat.fill_fixtures(self)

    def runtest(self) -> None:
        strategy = self.maka.strategy  # one cell now, or many at once: chosen at configure time
        assert strategy is not None, "pytest_maka.plugin chooses the strategy at configure time"
        record = strategy.run(self)
        self.maka_record = record
        stop = self.maka.runner.stop_reason()
        if stop:
            self.session.shouldstop = stop
        outcome = PYTEST_OUTCOME[record.status]
        if outcome == "failed":
            raise CellFailed(record)
        if outcome == "error":
            raise CellError(record)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (CellFailed, CellError)):
            record = excinfo.value.args[0]
            text = describe(record, self.maka.out_dir_display)
            tails = output_tails(record, self.maka.out_dir, self.maka.out_dir_display, self.maka.redactor.text)
            return "\n".join([text, *tails])
        return super().repr_failure(excinfo, style)  # type: ignore[arg-type]

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, 0, f"maka cell {self.cell.id}"


def describe(record: AttemptRecord, out_dir: str) -> str:
    """The few lines a reader needs to know whose fault a red cell is and where to look."""
    status = record.status
    error = (record.error.message if record.error is not None else None) or ""
    lines = [f"{status.value}: {error}" if error else status.value, f"  meaning: {MEANING[status]}"]
    if record.score is not None:
        lines.append(f"  score: {record.score}")
    if (record.attempt_count or 1) > 1:
        history = ", ".join(f"#{a.attempt} {a.status}" for a in record.attempts or [])
        lines.append(f"  attempts: {history}")
    if record.resumed:
        lines.append("  (reported from the ledger of an earlier run into this output directory)")
    if record.artifacts is not None and record.artifacts.dir:
        lines.append(f"  artifacts: {out_dir}/{record.artifacts.dir}")
    return "\n".join(lines)



def collected_skips(items: Iterable[pytest.Item]) -> dict[str, str]:
    """The skip reason of each cell collected with one (``--collect-only`` evaluates no marker)."""
    out = {}
    for item in items:
        marker = item.get_closest_marker("skip") if isinstance(item, CellItem) else None
        if marker is not None:
            out[item.nodeid] = str(marker.kwargs.get("reason", ""))
    return out


def skip_lines(skips: dict[str, str], where: str) -> list[str]:
    """``SKIPPED [n] spec: reason`` as ``-rs`` prints them, one line per distinct reason."""
    counts: dict[str, int] = {}
    for reason in skips.values():
        counts[reason] = counts.get(reason, 0) + 1
    return [f"SKIPPED [{n}] {where}: {reason}" for reason, n in counts.items()]


#: Lines of each output file shown under a red cell, and bytes read from its end to find them.
TAIL_LINES = 12
TAIL_READ_BYTES = 8192
TAIL_LINE_CHARS = 400
#: The outputs shown: the verifier's for every red cell; the agent's first when it did not finish.
VERIFIER_OUTPUTS = (("verifier_stderr", "verifier stderr"), ("verifier_output", "verifier stdout"))
AGENT_OUTPUTS = (("agent_stderr", "agent stderr"), ("agent_log", "agent stdout"))


def output_tails(
    record: AttemptRecord, out_dir: Path, out_display: str, redact: Callable[[str], str] = str
) -> list[str]:
    """The last lines of the verifier's (and, for an incomplete cell, the agent's) stderr and
    stdout, redacted: the cause of a red cell where the user looks, not only in a file."""
    from ..report.artifacts import read_tail  # safe reading: below out_dir, no symlinks, no escapes

    status = record.status
    artifacts = record.artifacts
    wanted = (*AGENT_OUTPUTS, *VERIFIER_OUTPUTS) if status is Status.AGENT_INCOMPLETE else VERIFIER_OUTPUTS
    lines: list[str] = []
    for key, label in wanted:
        rel = artifacts.get(key) if artifacts is not None else None
        text = read_tail(out_dir, rel, TAIL_READ_BYTES) if isinstance(rel, str) else None
        if not text or not text.strip():
            continue
        body = text.rstrip("\n").split("\n")
        if body[0].startswith("[... ") and len(body) > TAIL_LINES:
            body = body[1:]
        body = body[-TAIL_LINES:]
        lines.append(f"  {label} (last {len(body)} lines of {out_display}/{rel}):")
        for line in body:
            line = redact(line)
            lines.append(f"    | {line[:TAIL_LINE_CHARS]}{'…' if len(line) > TAIL_LINE_CHARS else ''}")
    return lines
