"""pytest glue for --maka-concurrency: the option, the xdist scheduler, the per-process lookahead."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import pytest

from ..fixtures import MAKA_KEY
from .lookahead import Lookahead, SessionItems

if TYPE_CHECKING:
    from ..collect import CellItem

CONCURRENCY_KEY = pytest.StashKey[int]()
LOOKAHEAD_KEY = pytest.StashKey[Lookahead]()
#: Callables run while an item waits for its cell (the live view's redraw), set at configure.
WAIT_CALLBACKS_KEY = pytest.StashKey[list]()
#: Set when this session moved the objects of start-up and collection out of the collector's sight.
GC_FROZEN_KEY = pytest.StashKey[bool]()


def add_option(parser: pytest.Parser, flag: str, *, metavar: str, help: str, ini_default: str) -> None:
    """A ``--maka-X`` option in the maka group with its ini ``maka_x`` (the option wins)."""
    parser.getgroup("maka").addoption(flag, metavar=metavar, default=None, help=help)
    parser.addini(flag.lstrip("-").replace("-", "_"), f"default for {flag}", default=ini_default)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(
        parser,
        "--maka-concurrency",
        metavar="N",
        help="cells each pytest process (the controller, or each xdist worker) runs at once (default 1)",
        ini_default="1",
    )


def concurrency(config: pytest.Config) -> int:
    """The validated --maka-concurrency (or ini maka_concurrency) value."""
    if CONCURRENCY_KEY in config.stash:
        return config.stash[CONCURRENCY_KEY]
    option = config.getoption("maka_concurrency", None)
    raw, where = (option, "--maka-concurrency") if option is not None else (config.getini("maka_concurrency"), None)
    if where is None:
        where = f"{config.inipath or 'ini'}: maka_concurrency"
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise pytest.UsageError(f"{where}: expected a whole number of cells >= 1, got {raw!r}")
    config.stash[CONCURRENCY_KEY] = value
    return value


def pytest_maka_configure(config: pytest.Config) -> None:
    """Validate the option; on an xdist controller, keep workers enough items ahead."""
    n = concurrency(config)
    if n <= 1 or hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if not (getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)):
        return
    from .xdist import REFUSED_DIST, XdistScheduler

    dist = config.getvalue("dist")
    if dist in REFUSED_DIST:
        raise pytest.UsageError(f"--maka-concurrency {n} cannot be combined with --dist {dist}: {REFUSED_DIST[dist]}")
    config.pluginmanager.register(XdistScheduler(n), "maka-xdist-scheduler")


def lookahead(item: pytest.Item) -> Lookahead | None:
    """This process's Lookahead, made on first use; None when cells run one at a time."""
    config = item.config
    if LOOKAHEAD_KEY in config.stash:
        return config.stash[LOOKAHEAD_KEY]
    n = concurrency(config)
    if n <= 1:
        return None
    source: Any
    if hasattr(config, "workerinput"):
        from .xdist import WorkerItems

        source = WorkerItems(config, item.session)
    else:
        source = SessionItems(item.session)
    made = Lookahead(config.stash[MAKA_KEY], item.session, n, source)
    made.on_wait.extend(config.stash.get(WAIT_CALLBACKS_KEY, []))
    config.stash[LOOKAHEAD_KEY] = made
    return made


def run_item(item: CellItem) -> dict[str, Any]:
    """The record of ``item``'s cell: run here and now, or by the lookahead's pool."""
    ahead = lookahead(item)
    if ahead is not None:
        return ahead.record_for(item)
    funcargs = item.funcargs  # type: ignore[attr-defined]
    return item.maka.runner.run_cell(item.cell, funcargs["executor_lease"], funcargs["maka_workspace"])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Before the reporter writes: finish (after -x) or abort (Ctrl-C) the cells in flight."""
    ahead = session.config.stash.get(LOOKAHEAD_KEY, None)
    if ahead is not None:
        ahead.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED and not session.shouldfail)


class _Frozen:
    """Whether a cohort session of this process left its objects frozen when it ended."""

    left = False


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """A session that follows a cohort session in the same process (pytester in-process, a program
    calling ``pytest.main`` again): the objects the last one left frozen go back to the collector."""
    if _Frozen.left:
        _Frozen.left = False
        gc.unfreeze()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A cohort run: the objects made so far (modules, the spec, tasks, items) live until the
    end, so the cyclic garbage collector stops scanning them (``gc.freeze``). With hundreds
    of cells in flight a full collection over them held the GIL for ~100 ms each time."""
    config = session.config
    if MAKA_KEY in config.stash and not config.option.collectonly and not gc.get_freeze_count():
        gc.freeze()
        config.stash[GC_FROZEN_KEY] = True


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave the frozen objects frozen: the process usually ends now, and the full collections of
    its end (pytest's at unconfigure and cleanup, the interpreter's at exit) then skip them, which
    took a quarter of a second of the end of a 200-cell run. A later session of the same process
    hands them back (``pytest_configure``)."""
    if config.stash.get(GC_FROZEN_KEY, False):
        config.stash[GC_FROZEN_KEY] = False
        _Frozen.left = True
