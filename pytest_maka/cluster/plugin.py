"""pytest glue for --maka-cluster: connect to the Dask scheduler, run every attempt there."""

from __future__ import annotations

from typing import Any

import pytest

from ..fixtures import MAKA_KEY
from ..scale.plugin import CONCURRENCY_KEY, add_option, concurrency

CLIENT_KEY = pytest.StashKey[Any]()
#: Cells the controller keeps submitted to a cluster when --maka-concurrency is not given
#: (the scheduler queues them; worker resources decide how many run at once).
CLUSTER_IN_FLIGHT = 256


HELP = "run every attempt on this Dask scheduler (tcp://HOST:PORT); needs pytest-maka[dask]"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--maka-cluster", metavar="ADDRESS", help=HELP, ini_default="")


def pytest_maka_configure(config: pytest.Config) -> None:
    address = config.getoption("maka_cluster") or config.getini("maka_cluster")
    if not address or hasattr(config, "workerinput"):
        return
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None):
        raise pytest.UsageError("--maka-cluster: drop -n/--tx: the cluster's workers are the parallelism")
    try:
        from distributed import Client
    except ImportError:
        raise pytest.UsageError(
            "--maka-cluster needs Dask distributed, which is not installed: pip install 'pytest-maka[dask]'"
        ) from None
    try:
        client = Client(address, timeout=10, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise pytest.UsageError(f"--maka-cluster: no Dask scheduler answers at {address} ({exc})") from None
    config.stash[CLIENT_KEY] = client
    from .runner import ClusterRunner

    maka = config.stash[MAKA_KEY]
    maka.__dict__["runner"] = ClusterRunner.wrap(maka.runner, client, maka.cohort.loaded.path)
    if config.getoption("maka_concurrency", None) is None:
        config.stash[CONCURRENCY_KEY] = max(concurrency(config), CLUSTER_IN_FLIGHT)


def pytest_unconfigure(config: pytest.Config) -> None:
    client = config.stash.get(CLIENT_KEY, None)
    if client is not None:
        client.close()
