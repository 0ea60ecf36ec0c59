"""An engine lost in the middle of a step: the attempt is infra_failure naming the step and the engine.

The executor reaches the real engine through a relay on 127.0.0.1 (tests/docker/cut_relay.py)
that drops every connection, and stops listening, once a given request has streamed some
of its answer: while a command's output is being read, and while the workdir is copied out.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from pytest_maka.executors.docker import labels as L

from ..conftest import PASS_TEST, Cohort
from .cut_relay import CutRelay, cut_relay

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"


@pytest.fixture
def relay(docker_api: docker.APIClient) -> Iterator[CutRelay]:
    """The relay, and afterwards the removal of what the cut attempt left on the real engine."""
    with cut_relay() as made:
        made.prefix = f"cut-{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
        yield made
    for c in docker_api.containers(all=True, filters={"label": f"{L.MANAGED}=1"}):
        if (c.get("Labels") or {}).get(L.CELL, "").startswith(made.prefix):  # type: ignore[attr-defined]
            with contextlib.suppress(docker.errors.NotFound):
                docker_api.remove_container(c["Id"], force=True, v=True)


def _run_cut(cohort: Cohort, relay: CutRelay, state_dir: Path, command: str) -> dict:
    cohort.task(f"{relay.prefix}-t", test=PASS_TEST)  # type: ignore[attr-defined]
    cohort.write(
        subjects=[{"name": "s", "kind": "command", "command": command}],
        executor={"kind": "docker", "engines": [relay.url], "default_image": IMAGE, "state_dir": str(state_dir)},
        retries={"infra": 0},
    )
    cohort.run("-p", "no:cacheprovider")
    assert relay.cut.is_set(), "the step never reached the relay's cut"
    (attempt,) = cohort.attempts()
    return attempt


def test_engine_lost_while_a_commands_output_streams(cohort: Cohort, relay: CutRelay, state_dir: Path) -> None:
    relay.cut_when("POST", "/start", after_bytes=1 << 20)  # an exec's start: its output follows
    attempt = _run_cut(cohort, relay, state_dir, "head -c 50000000 /dev/zero | tr '\\0' x; echo ok > /app/done.txt")
    assert "/exec/" in relay.cut_during, relay.cut_during
    assert attempt["status"] == "infra_failure", attempt
    message = attempt["error"]["message"]
    assert relay.url in message and "running a command" in message, message
    assert "streaming the command's output" in message or "exit code" in message, message


def test_engine_lost_while_the_workdir_is_copied_out(cohort: Cohort, relay: CutRelay, state_dir: Path) -> None:
    relay.cut_when("GET", "/archive?path=%2Fapp", after_bytes=1 << 20)
    command = "head -c 30000000 /dev/urandom > /app/big.bin; echo ok > /app/done.txt"
    attempt = _run_cut(cohort, relay, state_dir, command)
    assert attempt["status"] == "infra_failure", attempt
    message = attempt["error"]["message"]
    assert relay.url in message and "copying /app out of the container" in message, message
