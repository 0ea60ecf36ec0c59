"""Fixtures for tests against a real Docker engine; every test here skips when none answers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

docker = pytest.importorskip("docker", reason="the docker SDK is not installed: pip install 'docker>=7.1,<8'")

from pytest_maka.core.hostreqs import COMPONENTS  # noqa: E402
from pytest_maka.executors.docker import DockerExecutor, DockerOptions  # noqa: E402
from pytest_maka.executors.docker.engines import Engine  # noqa: E402

BASE_IMAGE = "python:3.11-slim"


def _engine_reason() -> str | None:
    options = DockerOptions()
    engine = Engine(options.engine_list()[0], slots=1, state_dir=Path("/nonexistent"), retry_sec=0)
    reason = engine.ping()
    if reason is not None:
        install = COMPONENTS["docker-engine"].install
        return f"no Docker engine answers at {engine.url} ({reason}): {install} (CI: ../shared/ci/provision-docker.sh)"
    return None


@pytest.fixture(scope="session")
def docker_api() -> Iterator[docker.APIClient]:
    """A client of the default engine; skips the test when no engine answers."""
    reason = _engine_reason()
    if reason:
        pytest.skip(reason)
    client = docker.APIClient(version="auto")
    names = {t for img in client.images() for t in img.get("RepoTags") or []}
    if f"{BASE_IMAGE}" not in names:
        pytest.skip(f"the engine has no {BASE_IMAGE} image; run ../shared/ci/provision-docker.sh")
    yield client
    client.close()


@pytest.fixture
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docker-state")


@pytest.fixture
def make_executor(docker_api: docker.APIClient, state_dir: Path) -> Iterator:
    """``make_executor(**options)`` -> a DockerExecutor with a private state directory."""
    made: list[DockerExecutor] = []

    def _make(**options: object) -> DockerExecutor:
        options.setdefault("state_dir", state_dir)
        options.setdefault("slots_per_engine", 4)
        executor = DockerExecutor(DockerOptions(**options))
        made.append(executor)
        return executor

    yield _make
    for executor in made:
        executor.close()


@pytest.fixture(scope="session")
def egress_upstream(docker_api: docker.APIClient) -> Iterator[tuple[str, str, int]]:
    """An HTTP + UDP test server in a container on a network of its own: (network, ip, port).

    The egress proxy joins that network as its egress side, so egress tests send traffic
    only to containers they created.
    """
    from pytest_maka.testing.servers import EGRESS_SERVER

    name = f"maka-test-upstream-{uuid.uuid4().hex[:8]}"
    labels = {"io.pytest-maka.test": "egress-upstream"}
    net = docker_api.create_network(name, driver="bridge", internal=True, labels=labels)["Id"]
    cid = docker_api.create_container(
        BASE_IMAGE,
        ["python3", "-u", "-c", EGRESS_SERVER, "8080"],
        labels=labels,
        host_config=docker_api.create_host_config(network_mode=name),
    )["Id"]
    try:
        docker_api.start(cid)
        ip = docker_api.inspect_container(cid)["NetworkSettings"]["Networks"][name]["IPAddress"]
        yield name, ip, 8080
    finally:
        docker_api.remove_container(cid, force=True)
        docker_api.remove_network(net)
