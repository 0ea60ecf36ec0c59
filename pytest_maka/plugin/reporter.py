"""Controller-side reporting: gathers cell records, reconciles crashes, writes derived files,
prints the terminal summary and applies the exit-code policy. Never runs on xdist workers."""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .. import __version__
from ..core.cell import Cell
from ..core.record_model import AttemptRecord
from ..core.records import attempt_record, cell_record, has_result, next_run, report_record, utc_iso
from ..core.taxonomy import HARNESS_SIDE, Status
from ..engine.tasks import ignored_key_lines, ignored_keys
from ..run.lifecycle import attempt_dir_for
from ..store.ledger import write_results
from ..store.lock import LOCK_FILE, write_lock
from .collect import collected_skips, skip_lines
from .session import COHORT_STARTED_KEY, MakaSession
from .strategy import WAIT_CALLBACKS_KEY

#: Seconds of waiting for cells after which the report's code is loaded ahead of the session's end.
WARM_AFTER_SEC = 2.0
EXIT_NO_OFFICIAL_RESULT = 7
EXIT_NOT_ALL_PASSED = 8
EXIT_COHORT_INCOMPLETE = 9


class MakaReporter:
    """Registered as a plugin on the controller (or the only process without xdist)."""

    def __init__(self, config: pytest.Config, maka: MakaSession) -> None:
        self.config = config
        self.maka = maka
        self.records: dict[str, AttemptRecord] = {}
        self.expected: set[str] | None = None  # cell node ids collected by xdist workers
        self.other_failures = 0
        self.not_run: dict[str, str] = {}  # cells of this run that never started, and why
        self.skipped: dict[str, str] = {}  # cells skipped at collection (unsupported, invalid), and why
        self.cells_by_id = maka.cohort.cell_by_id()
        self.run_started = time.time()
        self.ledger_problems = maka.ledger.scan().problems  # as found before this run wrote anything
        self._waiting_since: float | None = None
        self.rerun = bool(config.getoption("maka_rerun", False))
        self.final_code: int | None = None  # the exit code this plugin chose (set at the session's end)
        config.stash.setdefault(WAIT_CALLBACKS_KEY, []).append(self._warm_views)
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistHooks(self), "maka-xdist")

    def _warm_views(self) -> None:
        """While items wait for their cells: once the run has waited ``WARM_AFTER_SEC``, load
        and compile what the end-of-session views need (imports, the HTML template), so
        that work is done while the cells' subjects run instead of after the last cell."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since >= WARM_AFTER_SEC:
            self._waiting_since = float("inf")  # once
            with contextlib.suppress(Exception):  # only a head start: the end of the session reports a failure
                from ..report import warm

                warm()

    def set_expected(self, nodeids: list[str]) -> None:
        if self.expected is None:
            self.expected = {n for n in nodeids if self._cell(n) is not None}

    # -- reports -------------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = report_record(report)
        if record is not None:
            self.records[report.nodeid] = record
            return
        cell = self._cell(report.nodeid)
        if cell is None:
            if report.failed:
                self.other_failures += 1
            return
        if report.skipped:  # a skip is a skip on every -n: never reconciled as a lost worker
            self.skipped[report.nodeid] = _skip_reason(report)
            return
        if report.failed and report.when == "???" and report.nodeid not in self.records:
            self._reconcile(report.nodeid, cell, interrupted=False)  # xdist: the worker died

    def _cell(self, nodeid: str) -> Cell | None:
        """The cell behind a node id of the spec file, or None for any other test."""
        path, sep, name = nodeid.rpartition("::")
        if not sep or (self.config.rootpath / path).resolve() != self.maka.cohort.loaded.path:
            return None
        return self.cells_by_id.get(name)

    def _reconcile(self, nodeid: str, cell: Cell, *, interrupted: bool) -> None:
        """A cell whose report never came back: find out from the output directory what happened.

        - it recorded an attempt in this run (the process died after its ledger line): that stands;
        - it started an attempt (its attempt directory exists) and died before recording it: that
          attempt is recorded, as infra_failure, or agent_aborted when the run was interrupted;
        - otherwise it never started: nothing is written, it is counted as not run, and the next
          run into this directory runs it.
        """
        with self.maka.ledger.locked():
            mine = [r for r in self.maka.ledger.read() if r.cell_key == cell.key]
            number = max((r.attempt for r in mine), default=0) + 1
            attempt_dir = attempt_dir_for(self.maka.out_dir, cell, number)
            if _made_since(attempt_dir, self.run_started):
                status = Status.AGENT_ABORTED if interrupted else Status.INFRA_FAILURE
                why = (
                    "the run was interrupted and the process running this attempt ended before recording it"
                    if interrupted
                    else "the worker running this attempt crashed before recording it"
                )
                mine.append(self.maka.ledger.append(self._lost_attempt(cell, number, status, why, attempt_dir, mine)))
            elif not any(r.finished_at >= utc_iso(self.run_started) for r in mine):
                if self.rerun or not has_result(mine):  # a rerun's cell that never started: not run
                    self.not_run[nodeid] = "interrupted" if interrupted else "worker lost"
                    return
                self.records[nodeid] = cell_record(mine).updated(resumed=True)  # a resumed cell whose report was lost
                return
        self.records[nodeid] = cell_record(mine)

    def _lost_attempt(
        self, cell: Cell, number: int, status: Status, why: str, attempt_dir: Path, previous: list[AttemptRecord]
    ) -> AttemptRecord:
        started = attempt_dir.stat().st_mtime
        return attempt_record(
            cell,
            run=next_run(previous, rerun=self.rerun, session_started=self.maka.started),
            cohort=self.maka.cohort.name,
            attempt=number,
            status=status,
            started=started,
            finished=time.time(),
            artifacts={"dir": attempt_dir.relative_to(self.maka.out_dir).as_posix()},
            error={"type": status.value, "message": why},
        )

    # -- end of session ------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.config.option.collectonly:
            return
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop or session.shouldfail)
        if self.expected and _xdist_active(self.config):
            for nodeid in sorted(self.expected - set(self.records) - set(self.not_run) - set(self.skipped)):
                cell = self._cell(nodeid)
                if cell is not None:
                    self._reconcile(nodeid, cell, interrupted=interrupted)
        self.write_outputs()
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) and (
            self.records or self.skipped or self.not_run
        ):
            session.exitstatus = self.final_code = self.exit_code(session.exitstatus)

    def exit_code(self, current: int) -> int:
        policy = self.config.getoption("maka_exit") or self.config.getini("maka_exit")
        if self.other_failures:
            return current
        if policy == "never":
            return pytest.ExitCode.OK
        statuses = [r.status for r in self.records.values()]
        if self.not_run or any(s in HARNESS_SIDE for s in statuses):
            return EXIT_NO_OFFICIAL_RESULT
        if self.skipped or not self.records:
            return EXIT_COHORT_INCOMPLETE
        if policy == "pass" and any(s is not Status.AGENT_SUCCESS for s in statuses):
            return EXIT_NOT_ALL_PASSED
        return pytest.ExitCode.OK

    def cohort_records(self) -> list[AttemptRecord]:
        """One record per cell of the current cohort definition that has any attempt."""
        keys = [c.key for c in self.maka.cohort.cells]
        by_key = {r.cell_key: r for r in self.maka.ledger.cell_records(keys)}
        for record in self.records.values():  # resumed cells carry their flag
            if record.resumed and record.cell_key in by_key:
                by_key[record.cell_key] = by_key[record.cell_key].updated(resumed=True)
        order = {k: i for i, k in enumerate(keys)}
        return sorted(by_key.values(), key=lambda r: order.get(r.cell_key, 0))

    def write_outputs(self) -> None:
        from ..report import write_views

        out = self.maka.out_dir
        out.mkdir(parents=True, exist_ok=True)
        records = self.cohort_records()
        write_results(out, records)
        meta = self._provenance()
        note = write_lock(out / LOCK_FILE, meta)
        if note:
            self.ledger_problems.append(note)
        if records:
            write_views(out, records, cohort=self.maka.cohort.name, meta=meta)
        self.config.hook.pytest_maka_report(out_dir=out, records=records, cohort=self.maka.cohort)
        self.maka.redactor.top_files(out)  # the views too: results, report.html, summary.md

    def _provenance(self) -> dict[str, Any]:
        loaded = self.maka.cohort.loaded
        return {
            "cohort": self.maka.cohort.name,
            "spec": str(loaded.path),
            "executor": loaded.executor.kind,
            "started_at": utc_iso(self.run_started),
            "finished_at": utc_iso(time.time()),
            "argv": list(self.config.invocation_params.args),
            "versions": {
                "pytest_maka": __version__,
                "pytest": pytest.__version__,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            "cells": len(self.maka.cohort.cells),
            "tasks": len(self.maka.cohort.tasks),
            "subjects": [s.name for s in loaded.subjects],
            "repetitions": loaded.spec.repetitions,
            "skipped": {nodeid.rpartition("::")[2]: why for nodeid, why in sorted(self.skipped.items())},
            "ignored_keys": {t.id: ignored_keys(t) for t in self.maka.cohort.tasks if ignored_keys(t)},
            **({"rerun": True} if self.rerun else {}),
        }

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly:  # no marker is evaluated: the reasons are read here
            self.skipped.update(collected_skips(session.items))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from ..report.terminal import rerun_summary, terminal_lines

        records = [r for r in self.records.values()]
        ignored = ignored_key_lines(self.maka.cohort.tasks)
        if (
            not records
            and not self.not_run
            and not self.ledger_problems
            and not self.skipped
            and not ignored
            and not self.final_code
        ):
            return
        terminalreporter.section("pytest-maka", sep="=")
        for line in ignored:
            terminalreporter.write_line(line)
        if self.config.option.collectonly and self.skipped:
            spec = self.maka.cohort.loaded.path
            where = spec.relative_to(self.config.rootpath) if spec.is_relative_to(self.config.rootpath) else spec
            if terminalreporter.hasopt("s"):
                for line in skip_lines(self.skipped, str(where)):
                    terminalreporter.write_line(line)
            else:
                terminalreporter.write_line(f"{len(self.skipped)} cell(s) will be skipped: -rs shows why")
            return
        for line in terminal_lines(records):
            terminalreporter.write_line(line)
        resumed = sum(1 for r in records if r.resumed)
        if resumed:
            terminalreporter.write_line(
                f"{resumed} cell(s) reported from the ledger of an earlier run (not re-executed)"
            )
        rerun_line = rerun_summary(records)
        if rerun_line:
            terminalreporter.write_line(rerun_line)
        if self.not_run:
            terminalreporter.write_line(
                f"{len(self.not_run)} cell(s) not run ({', '.join(sorted(set(self.not_run.values())))}): "
                "nothing was recorded for them; the next run into this directory runs them"
            )
        if self.skipped:
            cells = [cell for cell in map(self._cell, self.skipped) if cell is not None]
            tasks = {cell.task.id for cell in cells}
            invalid = {cell.task.id for cell in cells if cell.task.invalid}
            dropped = f"; {len(invalid)} of these task(s) invalid, dropped" if invalid else ""
            terminalreporter.write_line(
                f"{len(self.skipped)} cell(s) of {len(tasks)} task(s) skipped, nothing run for them: "
                f"the reasons are in lock.json (runs[-1].skipped) and shown by pytest -rs{dropped}"
            )
        if self.final_code == EXIT_COHORT_INCOMPLETE:
            what = "no cell ran" if not records else "the results do not cover every selected cell"
            terminalreporter.write_line(
                f"maka: exit code {EXIT_COHORT_INCOMPLETE}: {what} (--maka-exit=never keeps 0; "
                "--maka-strict refuses invalid tasks before anything runs)",
                yellow=True,
            )
        for problem in dict.fromkeys([*self.ledger_problems, *self.maka.ledger.problems]):
            terminalreporter.write_line(f"maka: warning: {problem}", yellow=True)
        report = f"  report: {self.maka.out_dir_display}/report.html" if records else "  (no report: no cell ran)"
        terminalreporter.write_line(f"results: {self.maka.out_dir_display}/results.jsonl{report}")


class _XdistHooks:
    """xdist-only hooks, registered only when xdist is present (pluggy rejects unknown hooks)."""

    def __init__(self, reporter: MakaReporter) -> None:
        self.reporter = reporter

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[COHORT_STARTED_KEY] = self.reporter.maka.started

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.reporter.set_expected(ids)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def _made_since(path: Path, since: float) -> bool:
    """Whether directory ``path`` exists and was made during this run."""
    try:
        return path.stat().st_mtime >= since - 0.05  # file times lag time.time() by a clock tick
    except FileNotFoundError:
        return False


def _xdist_active(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or bool(getattr(config.option, "tx", None))
