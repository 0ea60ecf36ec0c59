"""--maka-concurrency on the Docker executor: slots still bound containers; Ctrl-C removes them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import Cohort

docker = pytest.importorskip("docker", reason="the docker SDK is not installed: pip install 'docker>=7.1,<8'")

pytestmark = pytest.mark.docker

DONE_TEST = "if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
TASK_LABEL = "io.pytest-maka.task"


@pytest.fixture
def docker_api() -> docker.APIClient:
    try:
        client = docker.APIClient(version="auto", timeout=10)
        client.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine answers ({type(exc).__name__}); run ../shared/ci/provision-docker.sh")
    if not any("python:3.11-slim" in (i.get("RepoTags") or []) for i in client.images()):
        pytest.skip("the engine has no python:3.11-slim image; run ../shared/ci/provision-docker.sh")
    yield client
    client.close()


def test_slots_bound_containers_across_concurrent_cells(cohort: Cohort, docker_api, tmp_path) -> None:
    for i in range(6):
        cohort.task(f"conc-{i}", test=DONE_TEST, solve="sleep 1; echo ok > /app/done.txt\n")
    executor = {"kind": "docker", "state_dir": str(tmp_path / "state"), "slots_per_engine": 2}
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor=executor)
    cohort.pytester.makeconftest(
        """
        import threading

        lock = threading.Lock()
        inside = [0, 0]  # now, most
        two = threading.Barrier(2, timeout=120)

        def pytest_maka_phase(cell, phase):
            if phase == "agent":
                with lock:
                    inside[0] += 1
                    inside[1] = max(inside)
                    with open("most.txt", "w") as fh:
                        fh.write(str(inside[1]))
                two.wait()  # two containers really are in use at once

        def pytest_maka_attempt_finished(cell, record):
            with lock:
                inside[0] -= 1
        """
    )
    result = cohort.run_subprocess("--maka-concurrency", "6", timeout=300)
    result.assert_outcomes(passed=6)
    most = int((cohort.root / "most.txt").read_text())
    assert most == 2, "six cells at once, but never more than two containers"


def test_without_a_slot_count_the_engine_takes_as_many_cells_as_the_process_runs_at_once(
    cohort: Cohort, docker_api, tmp_path
) -> None:
    """No ``slots_per_engine``: the default is -n x --maka-concurrency, not -n (one slot for three cells)."""
    for i in range(3):
        cohort.task(f"conc-default-{i}", test=DONE_TEST, solve="echo ok > /app/done.txt\n")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}],
                 executor={"kind": "docker", "state_dir": str(tmp_path / "state")})  # fmt: skip
    cohort.pytester.makeconftest(
        """
        import threading

        three = threading.Barrier(3, timeout=60)

        def pytest_maka_phase(cell, phase):
            if phase == "agent":
                three.wait()  # three containers at once, or the barrier breaks
        """
    )
    result = cohort.run_subprocess("--maka-concurrency", "3", timeout=300)
    result.assert_outcomes(passed=3)


def test_ctrl_c_with_cells_in_flight_removes_every_container(cohort: Cohort, docker_api, tmp_path) -> None:
    for i in range(3):
        cohort.task(f"conc-slow-{i}", test=DONE_TEST, agent_timeout=300, solve="sleep 300\n")
    executor = {"kind": "docker", "state_dir": str(tmp_path / "state"), "slots_per_engine": 4}
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor=executor)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *cohort.args("--maka-concurrency", "3", "-p", "no:cacheprovider")],
        cwd=cohort.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running: list = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(running) < 3:
        running = [
            c
            for c in docker_api.containers(filters={"label": TASK_LABEL})
            if c["Labels"][TASK_LABEL].startswith("conc-slow-") and c["Labels"].get("io.pytest-maka.cell") != "spare"
        ]
        time.sleep(0.2)
    assert len(running) == 3, "the three cells never had their containers at once"
    wait = time.monotonic() + 60
    while len(list(cohort.out.glob("cells/*/attempt-1/agent.stdout.txt"))) < 3 and time.monotonic() < wait:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=180)
    ids = {c["Id"] for c in running}
    left = [c for c in docker_api.containers(all=True) if c["Id"] in ids]
    assert left == [], out.decode(errors="replace")[-3000:]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode(errors="replace")[-3000:]
    assert {a["status"] for a in cohort.attempts()} == {"agent_aborted"}
    assert len(cohort.attempts()) == 3
