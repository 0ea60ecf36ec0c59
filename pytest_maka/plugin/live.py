"""pytest glue for the live view: options, the per-process tracker, the controller's display.

Every process registers a ``RunningCells`` (the attempt hooks feed it); xdist workers
publish theirs under ``<out>/.live/``. The controller registers a ``LiveView``: it counts
reports, prints the resume header once the selection is known, and redraws the status
while an item waits for its cell (--maka-concurrency), after each report, and at the end.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest

from ..core.progress import INSTALL_PHASE
from ..core.records import group_by_cell, has_result, report_record
from ..live.status import LIVE_DIR, RunningCells, read_published
from ..live.view import PlainLines, Progress, TtyArea, status_lines
from .session import MAKA_KEY
from .strategy import WAIT_CALLBACKS_KEY

MODES = ("auto", "tty", "plain", "off")
#: Seconds between the ticks of the live view under xdist (each redraws once its interval passed).
TICK_SEC = 1.0
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
        self._installs_told: set[str] = set()
        self._lines_lock = threading.Lock()
        self._lines: list[str] = []  # one-off lines to print on the main thread (agent installs)
        self.ticker: XdistTicker | None = None

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
                self.display = TtyArea(tw._file, lambda: tw.fullwidth, lambda: tw.width_of_current_line)
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
        record = report_record(report) if report.when == "call" else None
        if record is not None:
            self.progress.add(record)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self) -> None:
        self.tick()

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self) -> None:
        self._clear()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
        self._clear()

    def pytest_unconfigure(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()

    def pytest_maka_phase(self, cell: Any, phase: str, attempt: int, detail: str | None) -> None:
        """An agent being installed gets a line of its own (once per install), at once when
        this is the main thread (a cell run without concurrency), else at the next tick
        (called on the thread that runs the attempt)."""
        if phase == INSTALL_PHASE:
            self._tell_install(detail)
            if threading.current_thread() is threading.main_thread():
                self._print_lines()

    def _tell_install(self, detail: str | None) -> None:
        with self._lines_lock:
            if detail and detail not in self._installs_told:
                self._installs_told.add(detail)
                self._lines.append(f"maka: {INSTALL_PHASE} {detail}")

    def _print_lines(self) -> None:
        """The one-off lines queued so far (main thread only)."""
        with self._lines_lock:
            lines, self._lines = self._lines, []
        reporter = self._reporter()
        if not lines or reporter is None or self.mode == "off":
            return
        self._clear()
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else nullcontext():  # mid-test: past the capture
            if reporter._tw.width_of_current_line:
                reporter.write_line("")
            for line in lines:
                reporter.write_line(line)

    def tick(self) -> None:
        """Print the one-off lines due, and redraw if the interval has passed (main thread only).

        This process's agent installs arrive through ``pytest_maka_phase``; the workers' are
        found in what they publish (read at every tick under xdist, once a second)."""
        published = read_published(self.maka.out_dir) if _xdist_active(self.config) else []
        for r in published:
            if r.phase == INSTALL_PHASE:
                self._tell_install(r.detail)
        self._print_lines()
        display = self._display()
        now = time.monotonic()
        if display is None or now - self.last_draw < self.interval:
            return
        self.last_draw = now
        running = self.running.snapshot() + published
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
        if self.view.ticker is None and self.view.mode != "off":
            self.view.ticker = XdistTicker.start(self.view.config, self.view.tick)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """A worker that ended (or died) runs nothing any more: forget what it published."""
        worker = getattr(node, "workerinput", {}).get("workerid")
        if worker:
            (self.view.maka.out_dir / LIVE_DIR / f"{worker}.json").unlink(missing_ok=True)


class XdistTicker:
    """Ticks the live view under xdist, where the controller's main thread runs no cell: it
    waits in xdist's event loop, and wakes only for the workers' events (a report can be
    minutes away). A thread puts a ``maka_tick`` event into that loop's queue every
    ``TICK_SEC``; the loop calls ``worker_maka_tick`` on its own thread, so the view draws on
    the main thread between pytest's own writes, as after a report. Where the loop is not
    the one this was written against (pytest-xdist 3.6 - 3.8), nothing is started: the view
    then updates after each report, as before."""

    def __init__(self, events: queue.Queue[Any]) -> None:
        self._events = events
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maka-live-ticker", daemon=True)

    @classmethod
    def start(cls, config: pytest.Config, tick: Callable[[], None]) -> XdistTicker | None:
        dsession = config.pluginmanager.get_plugin("dsession")
        events = getattr(dsession, "queue", None)
        if dsession is None or not isinstance(events, queue.Queue) or not hasattr(dsession, "loop_once"):
            return None
        dsession.worker_maka_tick = tick  # the loop dispatches event "maka_tick" to worker_maka_tick()
        ticker = cls(events)
        ticker._thread.start()
        return ticker

    def _run(self) -> None:
        while not self._stopped.wait(TICK_SEC):
            self._events.put(("maka_tick", {}))

    def stop(self) -> None:
        self._stopped.set()


def _xdist_active(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or bool(getattr(config.option, "tx", None))
