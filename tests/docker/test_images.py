"""Environments as images: built once per content digest, shared by workers, failures reported."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pytest_maka.core.errors import InfraError

from .helpers import plain_task, request, run, task_with_dockerfile

pytestmark = pytest.mark.docker


def test_image_built_once_and_reused_across_leases_and_runs(make_executor, docker_api, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    task = task_with_dockerfile(
        tmp_path / "t",
        f"""\
        FROM debian:bookworm-slim
        RUN echo {token} > /token
        """,
    )
    executor = make_executor()
    for _ in range(3):
        with executor.lease(request(task, tmp_path)) as sandbox:
            assert run(sandbox, "cat /token", tmp_path)[1] == f"{token}\n"
    assert executor.images.builds == 1
    again = make_executor()  # a later run: a new executor finds the tagged image
    with again.lease(request(task, tmp_path)) as sandbox:
        assert run(sandbox, "cat /token", tmp_path)[1] == f"{token}\n"
    assert again.images.builds == 0
    tag = executor.images.tag(executor.images.env_digest(task.environment_dir, task.dockerfile))
    docker_api.remove_image(tag, force=True)


BUILD_IN_CHILD = """
import json, sys
from pathlib import Path
from pytest_maka.core.errors import InfraError
from pytest_maka.executors.docker import DockerExecutor, DockerOptions
from tests.docker.helpers import request, run, task_with_dockerfile
root, state, dockerfile, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
task = task_with_dockerfile(root / "task", dockerfile)
ex = DockerExecutor(DockerOptions(state_dir=state, slots_per_engine=4))
req = request(task, root / name)
try:
    with ex.lease(req) as sb:
        out, error = run(sb, "cat /token", root / name)[1], None
except InfraError as e:
    out, error = None, str(e)
log = req.attempt_dir / "build.log"
print(json.dumps({"builds": ex.images.builds, "out": out, "error": error,
                  "log": log.read_text() if log.exists() else None}))
"""


def _build_in_two_processes(tmp_path: Path, state_dir: Path, dockerfile: str) -> list[dict]:
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_IN_CHILD, str(tmp_path), str(state_dir), dockerfile, f"w{i}"],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_concurrent_builds_of_one_image_from_two_processes_build_once(
    make_executor, docker_api, state_dir: Path, tmp_path: Path
) -> None:
    token = uuid.uuid4().hex
    dockerfile = f"FROM debian:bookworm-slim\nRUN sleep 2 && echo {token} > /token\n"
    results = _build_in_two_processes(tmp_path, state_dir, dockerfile)
    assert sorted(r["builds"] for r in results) == [0, 1]
    assert all(r["out"] == f"{token}\n" for r in results)
    images = make_executor().images
    task = task_with_dockerfile(tmp_path / "task", dockerfile)
    docker_api.remove_image(images.tag(images.env_digest(task.environment_dir, task.dockerfile)), force=True)


def test_a_failed_build_is_reported_to_waiting_processes_without_a_rebuild(
    state_dir: Path, tmp_path: Path, docker_api
) -> None:
    dockerfile = f"FROM debian:bookworm-slim\nRUN sleep 2 && echo failing {uuid.uuid4().hex} && exit 1\n"
    results = _build_in_two_processes(tmp_path, state_dir, dockerfile)
    assert sorted(r["builds"] for r in results) == [0, 1]
    for r in results:
        assert "image build failed at Step 2/" in r["error"] and "RUN sleep 2" in r["error"]
        assert "failing" in r["log"]


def test_build_failure_is_infra_error_naming_task_and_step(make_executor, tmp_path: Path) -> None:
    task = task_with_dockerfile(
        tmp_path / "t",
        f"""\
        FROM debian:bookworm-slim
        RUN echo building {uuid.uuid4().hex}
        RUN echo about to fail && exit 3
        """,
        task_id="broken-env",
    )
    executor = make_executor()
    req = request(task, tmp_path)
    with pytest.raises(InfraError) as info, executor.lease(req):
        pytest.fail("the lease must not start")
    message = str(info.value)
    assert "broken-env" in message and "Step 3/" in message and ": RUN echo about to fail && exit 3:" in message
    assert str(req.attempt_dir / "build.log") in message
    log = (req.attempt_dir / "build.log").read_text()
    assert "about to fail" in log and "build failed" in log
    # the slot was released: another lease can run at once
    with make_executor(slots_per_engine=1).lease(request(plain_task(tmp_path / "p"), tmp_path)) as sandbox:
        assert run(sandbox, "true", tmp_path)[0].exit_code == 0


def test_missing_prebuilt_image_is_infra_error(make_executor, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t", task_id="prebuilt", docker_image="registry.invalid/none:1")
    with (
        pytest.raises(InfraError, match=r"prebuilt: image registry\.invalid/none:1 is not on engine"),
        make_executor().lease(request(task, tmp_path)),
    ):
        pass


def test_prebuilt_image_used(make_executor, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t", docker_image="debian:bookworm-slim")
    with make_executor().lease(request(task, tmp_path)) as sandbox:
        _, out, _ = run(sandbox, "command -v python3 || echo no-python", tmp_path)
        assert out == "no-python\n"
