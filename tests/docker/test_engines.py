"""Several engines: leases spread by free capacity; an engine that stops answering leaves rotation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import PASS_TEST, Cohort
from .helpers import FIRST_URL, check_rotation
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


def test_leases_spread_over_two_engines_and_a_dead_engine_leaves_rotation(
    make_executor, second_engine: SecondEngine, tmp_path: Path
) -> None:
    executor = make_executor(
        engines=[FIRST_URL, second_engine.url], slots_per_engine=2, default_image=IMAGE, engine_retry_sec=3
    )
    assert second_engine.url.startswith("unix://")
    executor.check()
    check_rotation(
        executor, tmp_path, second_engine.url, kill=second_engine.kill, revive=second_engine.start, retry_sec=3
    )


def test_cells_spread_over_a_unix_and_a_tcp_engine_and_survive_one_dying(
    second_engine: SecondEngine, cohort: Cohort, state_dir: Path
) -> None:
    """Through pytest -n 2: cells run on both engines; the TCP one is killed mid-run; every
    cell still ends with an official result, its lost attempts recorded as infra failures."""
    for i in range(8):
        cohort.task(f"t{i}", test=PASS_TEST)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 3; echo ok > /app/done.txt"}],
        executor={
            "kind": "docker",
            "engines": [FIRST_URL, second_engine.tcp_url],
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
    assert FIRST_URL in engines and second_engine.tcp_url in engines, engines
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert lost, "the killed engine had a cell running"
    assert all(second_engine.tcp_url in a["error"]["message"] for a in lost), [a["error"] for a in lost]
    second_engine.start()  # for the module's clean shutdown
