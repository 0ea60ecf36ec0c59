"""Several engines: leases spread by free capacity; an engine that stops answering leaves rotation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_maka.core.errors import InfraError
from pytest_maka.executors.docker import DockerExecutor

from ..conftest import PASS_TEST, Cohort
from .helpers import plain_task, request, run
from .second_engine import SecondEngine

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"
DONE_TEST = (
    "mkdir -p /logs/verifier; if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


@pytest.fixture(scope="module")
def second_engine(docker_api) -> Iterator[SecondEngine]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("ip") is None:
        pytest.skip("starting a second dockerd needs root, dockerd and ip")
    engine = SecondEngine()
    try:
        engine.start()
        engine.load_from(docker_api, IMAGE)
        yield engine
    finally:
        engine.stop()


def _lease_and_sleep(executor: DockerExecutor, tmp_path: Path, seconds: float) -> str:
    """One attempt: lease, run ``sleep``, return the engine URL it ran on (or the error)."""
    task = plain_task(tmp_path / "t")
    try:
        with executor.lease(request(task, tmp_path)) as sandbox:
            result, _, err = run(sandbox, f"sleep {seconds}", tmp_path)
            assert result.exit_code == 0, err
            return sandbox.engine.url
    except InfraError as exc:
        return f"error: {exc}"


def test_leases_spread_over_two_engines_and_a_dead_engine_leaves_rotation(
    make_executor, second_engine: SecondEngine, tmp_path: Path
) -> None:
    first_url = "unix:///var/run/docker.sock"
    executor = make_executor(
        engines=[first_url, second_engine.url], slots_per_engine=2, default_image=IMAGE, engine_retry_sec=3
    )
    assert second_engine.url.startswith("unix://")
    executor.check()

    # both engines take work when four attempts run at once on 2 + 2 slots
    with ThreadPoolExecutor(4) as pool:
        used = list(pool.map(lambda _: _lease_and_sleep(executor, tmp_path, 1), range(8)))
    assert sorted(set(used)) == sorted([first_url, second_engine.url]), used

    # the second engine dies while attempts run on it: those attempts are infra errors
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(_lease_and_sleep, executor, tmp_path, 4) for _ in range(4)]
        time.sleep(2)
        second_engine.kill()
        outcomes = [f.result(timeout=120) for f in futures]
    failed = [o for o in outcomes if o.startswith("error:")]
    assert len(failed) == 2 and all(second_engine.url in o for o in failed), outcomes
    assert outcomes.count(first_url) == 2, outcomes

    # the retries land on the engine that still answers
    assert [e.url for e, _ in executor._candidates()] == [first_url]
    with ThreadPoolExecutor(2) as pool:
        retried = list(pool.map(lambda _: _lease_and_sleep(executor, tmp_path, 0.2), range(2)))
    assert retried == [first_url, first_url]

    # when it answers again it rejoins the rotation after engine_retry_sec
    second_engine.start()
    time.sleep(3.5)
    with ThreadPoolExecutor(4) as pool:
        used = list(pool.map(lambda _: _lease_and_sleep(executor, tmp_path, 1), range(4)))
    assert second_engine.url in used, used


def test_cells_spread_over_a_unix_and_a_tcp_engine_and_survive_one_dying(
    second_engine: SecondEngine, cohort: Cohort, state_dir: Path
) -> None:
    """Through pytest -n 2: cells run on both engines; the TCP one is killed mid-run; every
    cell still ends with an official result, its lost attempts recorded as infra failures."""
    first_url = "unix:///var/run/docker.sock"
    for i in range(8):
        cohort.task(f"t{i}", test=PASS_TEST)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 3; echo ok > /app/done.txt"}],
        executor={
            "kind": "docker",
            "engines": [first_url, second_engine.tcp_url],
            "slots_per_engine": 1,
            "default_image": IMAGE,
            "engine_retry_sec": 600,
            "state_dir": str(state_dir),
        },
        retries={"infra": 2},
    )
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-n", "2", "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
    )
    time.sleep(7)  # both workers are busy: one cell on each engine
    second_engine.kill()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out.decode()[-3000:] + err.decode()[-2000:]
    assert set(cohort.status().values()) == {"agent_success"}
    attempts = cohort.attempts()
    engines = {a["isolation"].get("engine") for a in attempts if a["status"] == "agent_success"}
    assert first_url in engines and second_engine.tcp_url in engines, engines
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert lost, "the killed engine had a cell running"
    assert all(second_engine.tcp_url in a["error"]["message"] for a in lost), [a["error"] for a in lost]
    second_engine.start()  # for the module's clean shutdown
