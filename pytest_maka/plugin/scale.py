"""pytest glue for --maka-concurrency: the option and the end of the session's strategy (``strategy.py``)."""

from __future__ import annotations

import gc

import pytest

from .session import MAKA_KEY, MakaSession
from .strategy import WAIT_CALLBACKS_KEY, ExecutionStrategy, InProcessPool, Serial, XdistController, xdist_controller

__all__ = ["CONCURRENCY_KEY", "WAIT_CALLBACKS_KEY", "add_option", "concurrency", "local_strategy"]

CONCURRENCY_KEY = pytest.StashKey[int]()
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


def local_strategy(config: pytest.Config, maka: MakaSession) -> ExecutionStrategy:
    """Without a cluster: the xdist controller's, the pool's (--maka-concurrency N > 1) or serial."""
    n = concurrency(config)
    if xdist_controller(config):
        return XdistController(config, maka, n)
    return InProcessPool(maka, n) if n > 1 else Serial(maka)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Before the reporter writes: finish (after -x) or abort (Ctrl-C) the cells in flight."""
    maka = session.config.stash.get(MAKA_KEY, None)
    if maka is not None and maka.strategy is not None:
        maka.strategy.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED and not session.shouldfail)


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
