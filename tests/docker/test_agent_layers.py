"""An installed agent reaches the container as an image layer built once per (install, environment image),
or as a read-only mount; either way the protected-path restore leaves it alone."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest
import requests.exceptions

from pytest_maka.executors.docker.layers import layered_images

from .helpers import plain_task, request, run

pytestmark = pytest.mark.docker
AGENT_DIR = "/opt/maka/agent"


@pytest.fixture
def made_images(docker_api) -> Iterator[list[str]]:  # type: ignore[no-untyped-def]
    """Images to remove after the test's executors are closed (request it before ``make_executor``)."""
    made: list[str] = []
    yield made
    for image in made:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            docker_api.remove_image(image, force=True)


def _install(tmp_path: Path) -> tuple[Path, str]:
    token = uuid.uuid4().hex
    install = tmp_path / f"fake-agent-1.0-{token[:12]}"
    (install / "bin").mkdir(parents=True)
    (install / "bin" / "fake-agent").write_text(f"#!/bin/sh\necho {token}\n")
    (install / "bin" / "fake-agent").chmod(0o755)
    (install / "bin" / "alias").symlink_to("fake-agent")
    return install, token


def test_agent_layer_built_once_per_environment_and_reused(
    made_images, make_executor, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    install, token = _install(tmp_path)
    task = plain_task(tmp_path / "t")
    executor = make_executor()
    ids = set()
    for _ in range(2):
        with executor.lease(request(task, tmp_path, mounts={AGENT_DIR: install})) as sandbox:
            assert run(sandbox, f"{AGENT_DIR}/bin/alias", tmp_path)[1] == f"{token}\n"
            ids.add(sandbox._info["image"])
            assert sandbox._info["mounts"] == [f"{AGENT_DIR} (image layer, {install.name})"]
            report = sandbox.restore_protected(tmp_path)  # type: ignore[attr-defined]
            assert report["restored_count"] == 0, report
    again = make_executor()  # a later run finds the layered image on the engine
    with again.lease(request(task, tmp_path, mounts={AGENT_DIR: install})) as sandbox:
        ids.add(sandbox._info["image"])
    assert len(ids) == 1
    mine = [i for i in layered_images(docker_api) if install.name in i["layers"].values()]  # type: ignore[union-attr]
    assert len(mine) == 1 and mine[0]["layers"] == {AGENT_DIR: install.name}, mine
    assert mine[0]["env"] == docker_api.inspect_image("python:3.11-slim")["Id"]
    made_images.append(str(mine[0]["id"]))


def test_a_subject_that_edits_its_agent_layer_gets_it_back(
    made_images, make_executor, docker_api, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    install, token = _install(tmp_path)
    task = plain_task(tmp_path / "t")
    with make_executor().lease(request(task, tmp_path, mounts={AGENT_DIR: install})) as sandbox:
        run(sandbox, f"echo 'echo pwned' > {AGENT_DIR}/bin/fake-agent", tmp_path)
        report = sandbox.restore_protected(tmp_path)  # type: ignore[attr-defined]
        assert f"{AGENT_DIR}/bin/fake-agent" in str(report["restored"]), report
        assert run(sandbox, f"{AGENT_DIR}/bin/fake-agent", tmp_path)[1] == f"{token}\n"
        made_images.append(sandbox._info["image"])


def test_a_read_only_agent_mount_survives_the_restore(make_executor, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    install, token = _install(tmp_path)
    task = plain_task(tmp_path / "t")
    with make_executor(agent_install="mount").lease(request(task, tmp_path, mounts={AGENT_DIR: install})) as sandbox:
        assert sandbox._info["mounts"] == [f"{AGENT_DIR} (ro, {install.name})"]
        _, _, err = run(sandbox, f"touch {AGENT_DIR}/x; {AGENT_DIR}/bin/fake-agent", tmp_path)
        assert "Read-only file system" in err
        report = sandbox.restore_protected(tmp_path)  # type: ignore[attr-defined]
        assert report["restored_count"] == 0, report
        assert run(sandbox, f"{AGENT_DIR}/bin/fake-agent", tmp_path)[1] == f"{token}\n"
