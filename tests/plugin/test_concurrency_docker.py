"""--maka-concurrency on the Docker executor: slots still bound containers, also across independent runs
on the host (served in order, the wait booked as ``timings.slot_wait``); Ctrl-C removes them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import Cohort, read_jsonl

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


def test_without_a_slot_count_the_engine_takes_the_hosts_default_at_once(cohort: Cohort, docker_api, tmp_path) -> None:
    """No ``slots_per_engine``: the host's default (``$MAKA_DOCKER_MAX_CONTAINERS``, else twice the
    CPUs, at least 4), not -n (one slot for three cells)."""
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


#: Each run notes its phases; run "a" holds its container in the agent phase until run "b" waits for a slot.
TWO_RUNS_CONFTEST = """
import os, pathlib, time

ROOT, NAME = pathlib.Path(os.environ["SLOT_TEST_DIR"]), os.environ["RUN_NAME"]

def pytest_maka_phase(cell, phase):
    with open(ROOT / "phases.txt", "a") as fh:
        fh.write(f"{NAME} {phase}\\n")
    if phase == "waiting for a container slot":
        (ROOT / f"{NAME}-waiting").touch()
    if phase == "agent" and NAME == "a":
        deadline = time.time() + 120
        while not (ROOT / "b-waiting").exists() and time.time() < deadline:
            time.sleep(0.05)
"""


def test_two_independent_runs_share_the_hosts_slots_and_the_wait_is_slot_wait(
    cohort: Cohort, docker_api, tmp_path
) -> None:
    """Two pytest runs on one host, one slot between them: the second waits for the first's container
    (live phase "waiting for a container slot"), and its record books the wait as ``slot_wait``."""
    cohort.task("shared-slot", test=DONE_TEST, solve="echo ok > /app/done.txt\n")
    executor = {"kind": "docker", "state_dir": str(tmp_path / "state"), "slots_per_engine": 1, "prestart": False}
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor=executor)
    cohort.pytester.makeconftest(TWO_RUNS_CONFTEST)
    phases = cohort.root / "phases.txt"

    def start(name: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "pytest", f"--maka-spec={cohort.spec}", f"--maka-out={cohort.root / name}"]
        env = {**os.environ, "SLOT_TEST_DIR": str(cohort.root), "RUN_NAME": name}
        pipe, both = subprocess.PIPE, subprocess.STDOUT
        return subprocess.Popen([*argv, "-p", "no:cacheprovider"], cwd=cohort.root, env=env, stdout=pipe, stderr=both)

    first = start("a")
    deadline = time.monotonic() + 180
    while "a agent" not in (phases.read_text() if phases.exists() else ""):
        assert first.poll() is None and time.monotonic() < deadline, "run a never reached its agent phase"
        time.sleep(0.05)
    second = start("b")
    out_a, _ = first.communicate(timeout=240)
    out_b, _ = second.communicate(timeout=240)
    assert first.returncode == 0, out_a.decode(errors="replace")[-3000:]
    assert second.returncode == 0, out_b.decode(errors="replace")[-3000:]
    records = {name: read_jsonl(cohort.root / name / "results.jsonl")[0] for name in ("a", "b")}
    assert records["a"]["passed"] and records["b"]["passed"]
    assert "slot_wait" not in records["a"]["timings"], records["a"]["timings"]
    timings = records["b"]["timings"]
    assert timings["slot_wait"] > 0 and timings["setup"] >= 0, timings
    b_phases = [line[2:] for line in phases.read_text().splitlines() if line.startswith("b ")]
    assert b_phases[:3] == ["setup", "waiting for a container slot", "setup"], b_phases
