"""Every wait on the cluster ends: a cluster that cannot run a cell, or a scheduler that stops
answering, makes each attempt an infra failure that says why, and the run finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_maka.plugin.reporter import EXIT_NO_OFFICIAL_RESULT

from ..conftest import Cohort, needs_bwrap
from ..plugin.test_concurrency_signals import sleepers, unique_sleep
from .conftest import StartCluster

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def test_no_worker_that_can_run_a_cell_is_an_infra_failure_not_a_hang(
    cohort: Cohort, start_cluster: StartCluster
) -> None:
    cluster = start_cluster(workers=())  # a scheduler alone: no worker has the cells resource
    for i in range(3):
        cohort.task(f"t{i}")
    cohort.write(
        executor={"kind": "local", "cluster": {"address": cluster.address, "no_worker_timeout_sec": 1}},
        retries={"infra": 0},
    )
    result = cohort.run_subprocess(timeout=300)
    assert result.ret == EXIT_NO_OFFICIAL_RESULT, result.stdout.str()
    result.assert_outcomes(errors=6)
    attempts = cohort.attempts()
    assert len(attempts) == 6 and {a["status"] for a in attempts} == {"infra_failure"}
    for a in attempts:
        message = a["error"]["message"]
        assert "no worker of the Dask cluster" in message and "'cells' resource" in message, message
    assert set(cohort.status().values()) == {"infra_failure"}


def test_a_scheduler_that_stops_answering_ends_the_wait_with_a_clear_error(
    cohort: Cohort, start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = start_cluster(workers=("w1",), cells=2)
    token = unique_sleep()
    cohort.task("t0", agent_timeout=600)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": f"sleep {token}"}],
        executor={"kind": "local", "cluster": cluster.address},
        retries={"infra": 0},
    )
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
        stdout=(tmp_path / "stdout").open("wb"),
        stderr=subprocess.STDOUT,
    )
    scheduler = cluster.procs["scheduler"].pid
    try:
        deadline = time.monotonic() + 300
        while not sleepers(token):  # the attempt runs on the worker: the controller waits on the cluster
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "stdout").read_text()
            time.sleep(0.1)
        os.kill(scheduler, signal.SIGSTOP)  # connected, silent: Dask's own waits never end
        assert proc.wait(timeout=240) == EXIT_NO_OFFICIAL_RESULT, (tmp_path / "stdout").read_text()
    finally:
        os.kill(scheduler, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (attempt,) = cohort.attempts()
    assert attempt["status"] == "infra_failure"
    assert f"the Dask scheduler at {cluster.address} did not answer within" in attempt["error"]["message"]
    cluster.stop()
    assert not sleepers(token), "the subject the worker still ran is gone with the cluster"
