"""pytest glue for the live view: options, the per-process tracker, the controller's display.

Every process registers a ``RunningCells`` (the attempt hooks feed it); xdist workers
publish theirs under ``<out>/.live/``. The controller registers a ``LiveView``: it counts
reports, prints the resume header once the selection is known, and redraws the status
while an item waits for its cell (--maka-concurrency), after each report, and at the end.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import nullcontext
from typing import Any

import pytest

from ..core.records import group_by_cell, has_result
from ..fixtures import MAKA_KEY
from ..scale.plugin import WAIT_CALLBACKS_KEY
from .status import LIVE_DIR, RunningCells, read_published
from .view import PlainLines, Progress, TtyArea, status_lines

MODES = ("auto", "tty", "plain", "off")
DEFAULT_INTERVAL = {"tty": 1.0, "plain": 30.0}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("maka")
    group.addoption(
        "--maka-live",
        choices=MODES,
        default=None,
        help="live status while cells run: 'tty' (redrawn in place), 'plain' (periodic lines), 'off'; "
        "'auto' (default): tty on a terminal, plain when stdout is not one or CI is set",
    )
    group.addoption(
        "--maka-live-interval",
        metavar="SEC",
        type=float,
        default=None,
        help="seconds between live status updates (default 1 on a terminal, 30 for plain lines)",
    )
    parser.addini("maka_live", "default for --maka-live", default="auto")


def pytest_maka_configure(config: pytest.Config) -> None:
    maka = config.stash[MAKA_KEY]
    worker = getattr(config, "workerinput", {}).get("workerid")
    live = maka.out_dir / LIVE_DIR
    if worker is None:
        shutil.rmtree(live, ignore_errors=True)  # what an earlier run's workers left
    running = RunningCells(publish_to=live / f"{worker}.json" if worker else None)
    config.pluginmanager.register(running, "maka-running")
    if worker is not None:
        return
    view = LiveView(config, running)
    config.pluginmanager.register(view, "maka-live")
    config.stash.setdefault(WAIT_CALLBACKS_KEY, []).append(view.tick)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistLive(view), "maka-live-xdist")


class LiveView:
    """The controller's live status (a plugin)."""

    def __init__(self, config: pytest.Config, running: RunningCells) -> None:
        self.config = config
        self.maka = config.stash[MAKA_KEY]
        self.running = running
        self.progress = Progress()
        self.mode = self._mode()
        self.interval = config.getoption("maka_live_interval") or DEFAULT_INTERVAL.get(self.mode, 30.0)
        self.display: TtyArea | PlainLines | None = None
        self.last_draw = time.monotonic()
        self.announced = False

    def _mode(self) -> str:
        mode = self.config.getoption("maka_live") or self.config.getini("maka_live")
        if mode not in MODES:
            raise pytest.UsageError(f"maka_live: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode != "auto":
            return mode
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        tty = reporter is not None and reporter.isatty() and os.environ.get("TERM") != "dumb"
        return "tty" if tty and not os.environ.get("CI") else "plain"

    def _reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _display(self) -> TtyArea | PlainLines | None:
        if self.display is None and self.mode != "off" and self._reporter() is not None:
            reporter = self._reporter()
            tw = reporter._tw
            if self.mode == "tty":
                self.display = TtyArea(tw._file, tw.fullwidth, lambda: tw.width_of_current_line)
            else:
                self.display = PlainLines(reporter)
        return self.display

    # -- what is selected, the resume header -------------------------------------------
    def selected(self, nodeids: list[str]) -> None:
        """The cells this run will report (after -k, --lf, node ids): once, on the controller."""
        if self.announced:
            return
        self.announced = True
        reporter_cells = self.config.pluginmanager.get_plugin("maka-reporter")
        cells = [c for c in (reporter_cells._cell(n) for n in nodeids) if c is not None] if reporter_cells else []
        self.progress.total = len(cells)
        groups = group_by_cell(self.maka.ledger.read())
        final = {key for key, attempts in groups.items() if has_result(attempts)}
        have = sum(1 for c in cells if c.key in final)
        reporter = self._reporter()
        if not have or reporter is None:
            return
        where = f"{have} of {len(cells)} cells already have results in {self.maka.out_dir_display}"
        if self.config.getoption("maka_rerun", False):
            reporter.write_line(
                f"maka: rerunning: {where}; running all {len(cells)}, those {have} as a new run "
                "(--maka-rerun: the earlier runs stay in attempts.jsonl and in each record's runs)"
            )
        else:
            reporter.write_line(
                f"maka: resuming: {where}; running {len(cells) - have} "
                "(--maka-rerun runs them again as a new run, keeping the earlier results)"
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not _xdist_active(self.config):
            self.selected([item.nodeid for item in session.items])

    # -- updates -----------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self) -> None:
        self._clear()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._clear()
        record = getattr(report, "maka", None)
        if record is not None and report.when == "call":
            self.progress.add(record)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self) -> None:
        self.tick()

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self) -> None:
        self._clear()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self._clear()

    def tick(self) -> None:
        """Redraw if the interval has passed (called from the main thread only)."""
        display = self._display()
        now = time.monotonic()
        if display is None or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        running = self.running.snapshot()
        if _xdist_active(self.config):
            running += read_published(self.maka.out_dir)
        lines = status_lines(self.progress, running, time.time())
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else nullcontext():  # mid-test: past the capture
            display.draw(lines)

    def _clear(self) -> None:
        if self.display is not None:
            self.display.clear()


class _XdistLive:
    """xdist-only hooks of the live view (registered only when xdist is present)."""

    def __init__(self, view: LiveView) -> None:
        self.view = view

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.view.selected(ids)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker that ended (or died) runs nothing any more: forget what it published."""
        worker = getattr(node, "workerinput", {}).get("workerid")
        if worker:
            (self.view.maka.out_dir / LIVE_DIR / f"{worker}.json").unlink(missing_ok=True)


def _xdist_active(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or bool(getattr(config.option, "tx", None))
