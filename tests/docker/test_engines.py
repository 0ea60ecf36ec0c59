"""Several engines: leases spread by free capacity; an engine that stops answering leaves rotation."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_maka.core.errors import InfraError
from pytest_maka.executors.docker import DockerExecutor

from .helpers import plain_task, request, run
from .second_engine import SecondEngine

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"


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
