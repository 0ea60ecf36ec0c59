"""A deterministic image build failure is remembered for its context digest across runs."""

from __future__ import annotations

import pytest

from pytest_maka.executors.docker.images import base_images

from ..conftest import PASS_TEST, Cohort
from ..docker.test_image_run import harbor_task
from .conftest import docker_executor

BROKEN = "FROM debian:bookworm-slim\nRUN echo step-fails && exit 7\n"


@pytest.mark.docker
@pytest.mark.usefixtures("docker_engine")
def test_a_deterministic_build_failure_is_not_rebuilt_by_the_next_run(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dockerfile step that exits non-zero fails the same way every time: the next run into the
    same state directory reports it (with its log) without building it again. Editing the
    context is a new digest, built anew."""
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)  # each inner run its own run id
    task = harbor_task(cohort.tasks, "broken-step", dockerfile=BROKEN, solve="true\n", test=PASS_TEST)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor=docker_executor(cohort.root))
    cohort.run_subprocess(timeout=600)
    first = cohort.results()["broken-step[oracle-r0]"]
    assert first["status"] == "infra_failure" and "deterministic: not retried" in first["error"]["message"]
    assert "remembered" not in first["error"]["message"]
    cohort.run_subprocess(timeout=600)
    attempts = [a for a in cohort.attempts() if a["cell_id"] == "broken-step[oracle-r0]"]
    assert len(attempts) == 2, attempts
    second = attempts[-1]["error"]["message"]
    assert "remembered from an earlier run for this context digest" in second, second
    logs = sorted(cohort.out.glob("cells/broken-step*/attempt-2/build.log"))
    assert len(logs) == 1 and "step-fails" in logs[0].read_text(), "the earlier build's log, copied"
    (task / "environment" / "Dockerfile").write_text(BROKEN.replace("exit 7", "exit 8"))
    cohort.run_subprocess(timeout=600)
    third = [a for a in cohort.attempts() if a["cell_id"] == "broken-step[oracle-r0]"][-1]["error"]["message"]
    assert "remembered" not in third and "deterministic: not retried" in third, third


def test_the_base_images_a_failure_is_remembered_with() -> None:
    dockerfile = (
        "FROM python:3.11-slim AS b\nRUN x\nFROM --platform=linux/amd64 debian:bookworm\nFROM b\nFROM scratch\n"
    )
    assert base_images(dockerfile) == ["python:3.11-slim", "debian:bookworm"]
    assert base_images("ARG V=3.11\nFROM python:${V}-slim\n") is None, "a computed base: never remembered"
