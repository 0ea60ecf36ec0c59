"""``maka worker``: the dask worker command it becomes, and one line for each bad argument.

The worker really joining a scheduler and running cells is covered by every cluster test:
their worker ``w1`` is started with ``maka worker`` (tests/cluster/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MAKA = [str(Path(sys.executable).with_name("maka"))]


def maka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MAKA, "worker", *args], capture_output=True, text=True, timeout=120)


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_dry_run_prints_the_dask_worker_command_with_the_settings_cells_need() -> None:
    done = maka("tcp://127.0.0.1:8786", "--cells", "6", "--host", "127.0.0.1", "--name", "gpu-1", "--dry-run")
    assert done.returncode == 0, done.stderr
    argv = done.stdout.split()
    # the maka script's own interpreter (its shebang may name python3 where this test runs as python)
    assert Path(argv[0]).resolve() == Path(sys.executable).resolve()
    assert argv[1:4] == ["-m", "distributed.cli.dask_worker", "tcp://127.0.0.1:8786"]
    assert after(argv, "--resources") == "cells=6" and after(argv, "--nthreads") == "6", "threads default to cells"
    assert after(argv, "--preload") == "pytest_maka.cluster.preload"
    assert after(argv, "--host") == "127.0.0.1" and after(argv, "--name") == "gpu-1"
    assert "--no-dashboard" in argv and "--no-nanny" in argv, "nothing listens that the user did not ask for"


def test_more_threads_nanny_dashboard_and_flags_after_the_double_dash() -> None:
    done = maka(
        "tls://10.0.0.5:8786", "--cells", "2", "--threads", "3", "--nanny", "--dashboard", "127.0.0.1:8790",
        "--port", "9000", "--dry-run", "--", "--memory-limit", "2GB",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    argv = done.stdout.split()
    assert after(argv, "--nthreads") == "3" and "--nanny" in argv and "--no-dashboard" not in argv
    assert after(argv, "--dashboard-address") == "127.0.0.1:8790"
    assert after(argv, "--worker-port") == "9000"
    assert argv[-2:] == ["--memory-limit", "2GB"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["localhost:8786"], "maka worker: SCHEDULER: expected a Dask scheduler address such as tcp://HOST:8786"),
        (["tcp://h:8786", "--cells", "0"], "maka worker: --cells: expected a whole number of cells >= 1, got 0"),
        (["tcp://h:8786", "--cells", "8", "--threads", "4"], "maka worker: --threads: 4 is fewer than --cells 8"),
        (["tcp://h:8786", "--port", "70000"], "maka worker: --port: expected a port number 1-65535, got 70000"),
        (["tcp://h:8786", "--cells", "many"], "argument --cells: invalid int value: 'many'"),
    ],
)
def test_bad_arguments_are_one_line_and_start_nothing(args: list[str], expected: str) -> None:
    done = maka(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert expected in done.stderr.strip().splitlines()[-1]
    assert done.stdout == ""
