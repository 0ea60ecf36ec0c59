"""Several engines: leases spread by free capacity; an engine that stops answering leaves rotation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Cohort
from .helpers import FIRST_URL, check_cohort_survives_engine_loss, check_rotation
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
