"""Whole cohorts through pytest with ``executor: {kind: docker}``: taxonomy, reuse, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import Cohort

pytestmark = pytest.mark.docker

DONE_TEST = "if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


@pytest.fixture
def docker_cohort(cohort: Cohort, docker_api, tmp_path_factory: pytest.TempPathFactory) -> Cohort:
    cohort.state = tmp_path_factory.mktemp("state")  # type: ignore[attr-defined]
    return cohort


def test_taxonomy_classes_reached_in_containers(docker_cohort: Cohort, docker_api) -> None:
    c = docker_cohort
    c.task("ok", test=DONE_TEST)
    c.task(
        "agent-timeout",
        test=DONE_TEST,
        agent_timeout=2,
        solve="trap '' TERM\n(trap '' TERM; while :; do sleep 0.1; done) &\nwhile :; do sleep 0.1; done\n",
    )
    c.task("verifier-timeout", test="sleep 100\n", verifier_timeout=2)
    c.task("broken-verifier", test="exit 2\n")
    broken = c.task("broken-env", test=DONE_TEST)
    (broken / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo step-fails && exit 7\n")
    c.task(
        "tamper",
        test=DONE_TEST,
        solve=(
            "echo 1 > /logs/verifier/reward.txt\n"
            "mkdir -p /tests && echo 'echo 1 > /logs/verifier/reward.txt' > /tests/test.sh\n"
            "(trap '' TERM; while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done) >/dev/null 2>&1 &\n"
        ),
    )
    c.task(
        "network",
        test=DONE_TEST,
        solve=(
            "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\" "
            "&& echo ok > /app/done.txt; exit 0\n"
        ),
    )
    c.write(
        subjects=[{"name": "oracle", "kind": "oracle"}],
        executor={"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(c.state)},  # type: ignore[attr-defined]
        retries={"infra": 1},
    )
    result = c.run_subprocess(timeout=300)
    status = c.status()
    assert status == {
        "ok[oracle-r0]": "agent_success",
        "agent-timeout[oracle-r0]": "agent_incomplete",
        "verifier-timeout[oracle-r0]": "agent_failure",  # a verifier timeout is a rejection
        "broken-verifier[oracle-r0]": "verifier_failure",
        "broken-env[oracle-r0]": "infra_failure",
        "tamper[oracle-r0]": "agent_failure",
        "network[oracle-r0]": "agent_failure",
    }, result.stdout.str()[-3000:]
    records = c.results()
    assert "Step 2/" in records["broken-env[oracle-r0]"]["error"]["message"]
    assert records["network[oracle-r0]"]["isolation"]["network"]["agent"] == "none"
    assert records["ok[oracle-r0]"]["isolation"]["executor"] == "docker"
    builds = list(c.out.glob("cells/broken-env*/attempt-*/build.log"))
    assert builds and "step-fails" in builds[0].read_text()
    assert docker_api.containers(all=True, filters={"label": "io.pytest-maka.task=tamper"}) == []


def test_one_build_per_environment_across_cells_and_runs(docker_cohort: Cohort, docker_api) -> None:
    c = docker_cohort
    token = os.urandom(8).hex()
    for name in ("a", "b"):
        task = c.task(name, test=DONE_TEST)
        (task / "environment" / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nRUN echo {token} > /token\n")
    c.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        repetitions=2,
        executor={"kind": "docker", "state_dir": str(c.state)},
    )  # type: ignore[attr-defined]
    c.run_subprocess("-n", "2", timeout=300)
    assert len(c.results()) == 8
    assert len(list(c.out.glob("cells/*/attempt-*/build.log"))) == 1
    c.out = c.root / "out-2"
    c.run_subprocess(timeout=300)
    assert len(c.results()) == 8 and not list(c.out.glob("cells/*/attempt-*/build.log"))
    for name in ("a", "b"):
        for image in docker_api.images(filters={"label": f"io.pytest-maka.task={name}"}):
            docker_api.remove_image(image["Id"], force=True)


def test_ctrl_c_of_pytest_n_2_removes_every_container(docker_cohort: Cohort, docker_api) -> None:
    c = docker_cohort
    for i in range(4):
        c.task(f"slow-{i}", test=DONE_TEST, agent_timeout=300, solve="sleep 300\n")
    c.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor={"kind": "docker", "state_dir": str(c.state)})  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *c.args("-n", "2")],
        cwd=c.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    label = {"label": "io.pytest-maka.task"}
    running: list = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [
            x
            for x in docker_api.containers(filters=label)
            if x["Labels"]["io.pytest-maka.task"].startswith("slow-")
            and x["Labels"].get("io.pytest-maka.owner-pid") != str(os.getpid())
        ]
        if len(running) >= 2:
            break
        time.sleep(0.2)
    assert len(running) >= 2, "the cells never started"
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    out, _ = proc.communicate(timeout=120)
    ids = {x["Id"] for x in running}
    left = [x for x in docker_api.containers(all=True) if x["Id"] in ids]
    assert left == [], out.decode(errors="replace")[-3000:]
    assert proc.returncode != 0
