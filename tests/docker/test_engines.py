"""Several engines: leases spread by free capacity; an engine that stops answering leaves rotation."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from pytest_maka.executors.docker.cleanup import main as cleanup_main

from ..conftest import Cohort
from .helpers import CRASH_IN_CHILD, FIRST_URL, check_cohort_survives_engine_loss, check_rotation, containers_of
from .second_engine import SecondEngine, started_engine

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"
DONE_TEST = (
    "mkdir -p /logs/verifier; if [ -f /app/done.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


@pytest.fixture(scope="module")
def second_engine(docker_api) -> Iterator[SecondEngine]:
    with started_engine(docker_api, IMAGE) as engine:
        yield engine


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
    """Through pytest -n 2: cells run on both engines; the TCP one is killed mid-run."""
    check_cohort_survives_engine_loss(
        cohort, second_engine.tcp_url, kill=second_engine.kill, state_dir=state_dir, image=IMAGE
    )
    second_engine.start()  # for the module's clean shutdown


def test_cleanup_command_removes_containers_of_dead_processes(
    second_engine: SecondEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``maka docker-cleanup --engine URL``: --dry-run lists a dead worker's container and keeps
    it; without it, the container is removed and named. On an engine of its own, where no
    concurrent run's dead-owner sweep can remove the leftover first."""
    if second_engine.proc is None or second_engine.proc.poll() is not None:
        second_engine.start()  # an earlier test of the module killed it
    root = Path(__file__).resolve().parents[2]
    child = [str(tmp_path), str(tmp_path / "state"), "crashed-task", second_engine.url, IMAGE]
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_IN_CHILD, *child],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 9, proc.stderr
    api = docker.APIClient(base_url=second_engine.url, version="auto", timeout=30)
    try:
        assert containers_of(api, "crashed-task")
        assert cleanup_main(["--engine", second_engine.url, "--dry-run"]) == 0
        assert "would remove container" in capsys.readouterr().out
        assert containers_of(api, "crashed-task")
        assert cleanup_main(["--engine", second_engine.url]) == 0
        assert "crashed-task" in capsys.readouterr().out
        assert containers_of(api, "crashed-task") == []
    finally:
        api.close()
