"""Cells on Dask workers with the Docker executor: a worker SIGKILLed mid-cell is recorded, replaced, swept.

The workers run each attempt in a container of this host's engine (its image cache). When
one is killed, its containers outlive it; the worker that finds the lost attempt removes
them (they belong to a dead process), and the controller records the attempt as an infra
failure naming the dead worker, outside the official denominator, then runs it again.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import Cohort
from ..plugin.test_concurrency_docker import docker_api  # noqa: F401  (the fixture: skips without an engine)
from ..plugin.test_concurrency_signals import sleepers, unique_sleep
from .conftest import AGENTS_CONFTEST, StartCluster, kill_once_started

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")
docker = pytest.importorskip("docker", reason="the docker SDK is not installed: pip install 'docker>=7.1,<8'")

pytestmark = pytest.mark.docker
OWNER_PID = "io.pytest-maka.owner-pid"


def test_killed_worker_on_docker_is_recorded_replaced_and_leaves_no_container(
    cohort: Cohort, start_cluster: StartCluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    api: docker.APIClient = request.getfixturevalue("docker_api")  # skips when no engine answers
    cluster = start_cluster(cells=2)
    token, run = unique_sleep(), uuid.uuid4().hex[:6]
    task_ids = [f"dk-{run}-{i}" for i in range(4)]
    for task_id in task_ids:
        cohort.task(task_id, agent_timeout=20)
    executor = {"kind": "docker", "state_dir": str(tmp_path / "state"), "slots_per_engine": 4}
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": f"sleep {token}"}],
        executor={**executor, "cluster": cluster.address},
        retries={"infra": 1, "backoff_sec": 0},
    )
    victim, victim_address = cluster.procs["w1"], cluster.workers()["w1"]
    seen, agents = cohort.root / "victim-containers.txt", cohort.root / "agents.txt"
    cohort.pytester.makeconftest(
        AGENTS_CONFTEST.format(agents=str(agents))
        + f"""
def pytest_maka_attempt_finished(cell, record):
    if side["controller"] and record.status == "infra_failure":  # the loss arrived: the victim's containers?
        import docker

        api = docker.APIClient(version="auto")
        found = api.containers(all=True, filters={{"label": ["{OWNER_PID}={victim.pid}"]}})
        with open({str(seen)!r}, "a") as fh:
            fh.write(f"{{len(found)}}\\n")
"""
    )
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-p", "no:cacheprovider")], stdin=subprocess.DEVNULL
    )
    try:
        kill_once_started(proc, victim, agents, 2)  # both of the victim's cells are in their agent phase
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = out.decode()[-3000:] + err.decode()[-2000:]
    results = cohort.results()
    assert Counter(r["status"] for r in results.values()) == {"agent_incomplete": 4}, report
    assert all(r["official"] for r in results.values()), "the lost attempts do not deflate the denominator"
    attempts = cohort.attempts()
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert len(lost) == 2, "the killed worker's two attempts are recorded, none dropped"
    assert all(victim_address in a["error"]["message"] and a["official"] is False for a in lost)
    finals = [a for a in attempts if a["status"] != "infra_failure"]
    assert Counter(a["cell_id"] for a in finals) == Counter(list(results)), "exactly one final attempt per cell"
    assert all(results[a["cell_id"]]["attempt_count"] == 2 for a in lost)
    assert {a["worker"] for a in finals} >= {cluster.workers()["w2"]}
    assert all(a["isolation"]["executor"] == "docker" for a in finals), "ran in containers"
    assert seen.read_text().split() == ["0", "0"], "the dead worker's containers were gone when its loss arrived"
    assert not sleepers(token), "no subject survives its worker"
    assert api.containers(all=True, filters={"label": [f"{OWNER_PID}={victim.pid}"]}) == [], "none left"
