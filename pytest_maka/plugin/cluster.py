"""pytest glue for --maka-cluster: connect to the Dask scheduler, run every attempt there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..core.spec import ClusterEntry, ExecutorEntry
from ..core.spec import cluster_address as validate_address
from .dask import DaskCluster
from .scale import CONCURRENCY_KEY, add_option, concurrency
from .session import MakaSession

CLIENT_KEY = pytest.StashKey[Any]()
#: Cells the controller keeps submitted to a cluster when --maka-concurrency is not given
#: (the scheduler queues them; worker resources decide how many run at once).
CLUSTER_IN_FLIGHT = 256


HELP = (
    "run every attempt on this Dask scheduler (tcp://HOST:PORT; needs pytest-maka[dask]); "
    "'off' runs here even when the spec's executor.cluster names one"
)
OFF = "off"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--maka-cluster", metavar="ADDRESS", help=HELP, ini_default="")


def cluster_address(config: pytest.Config, spec_path: Path, entry: ExecutorEntry) -> tuple[str | None, str]:
    """(the scheduler to use or None, where it was named): --maka-cluster, else the spec's
    executor.cluster, else ini maka_cluster; ``off`` in the option or the ini runs here."""
    option = config.getoption("maka_cluster", None)
    if option is None and entry.cluster is not None:
        return entry.cluster.address, f"{spec_path}: executor.cluster"  # validated with the spec
    value, where = (option, "--maka-cluster") if option is not None else (config.getini("maka_cluster"), "")
    where = where or f"{config.inipath or 'ini'}: maka_cluster"
    if not value.strip() or value.strip() == OFF:
        return None, where
    try:
        return validate_address(value), where
    except ValueError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def dask_strategy(config: pytest.Config, maka: MakaSession) -> DaskCluster | None:
    """The Dask strategy when a scheduler is named (connected to it, the spec shipped), else None."""
    if hasattr(config, "workerinput"):
        return None
    loaded = maka.cohort.loaded
    address, where = cluster_address(config, loaded.path, loaded.spec.executor)
    if address is None:
        return None
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None):
        raise pytest.UsageError(f"{where}: drop -n/--tx: the cluster's workers are the parallelism")
    try:
        from distributed import Client
    except ImportError:
        raise pytest.UsageError(
            f"{where}: a cluster needs Dask distributed, which is not installed: pip install 'pytest-maka[dask]'"
        ) from None
    try:
        client = Client(address, timeout=10, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise pytest.UsageError(f"{where}: no Dask scheduler answers at {address} ({exc})") from None
    config.stash[CLIENT_KEY] = client
    from ..cluster.runner import ClusterRunner
    from ..cluster.ship import BundleTooLarge, pack

    settings = loaded.spec.executor.cluster or ClusterEntry(address=address)
    sources = [loaded.source_path(source) for source in loaded.spec.tasks]
    try:
        bundle = pack(loaded.path, sources, (task.digest for task in maka.cohort.tasks))
    except BundleTooLarge as exc:  # the client is closed at unconfigure
        raise pytest.UsageError(f"{loaded.path}: tasks: {exc}") from None
    invocation = config.invocation_params.dir
    engine = maka.engine
    engine.use_runner(ClusterRunner.wrap(engine.runner, client, loaded.path, settings, invocation, bundle))
    if config.getoption("maka_concurrency", None) is None:
        config.stash[CONCURRENCY_KEY] = max(concurrency(config), CLUSTER_IN_FLIGHT)
    return DaskCluster(maka, concurrency(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    client = config.stash.get(CLIENT_KEY, None)
    if client is not None:
        client.close()
