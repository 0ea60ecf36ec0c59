"""Environments as images: built once per content digest, shared by workers, failures reported."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pytest_maka.core.cell import Cell
from pytest_maka.core.errors import DeadlineReached, InfraError
from pytest_maka.core.spec import Budgets, Policy, Retries, SubjectSpec
from pytest_maka.core.taxonomy import Status
from pytest_maka.run.lifecycle import CellRunner, RunSettings
from pytest_maka.store.ledger import Ledger
from pytest_maka.subjects.reference import NoOptions, Nop
from pytest_maka.verifiers.reward import RewardVerifier

from .helpers import plain_task, request, run, task_with_dockerfile
from .test_faults import wait_for

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


def _build_containers(api, token: str) -> list[str]:
    """Containers of a build step that runs ``sleep`` with ``token`` (the classic builder's)."""
    return [c["Id"] for c in api.containers(all=True) if token in (c.get("Command") or "")]


def test_cell_deadline_cancels_a_running_build(make_executor, docker_api, tmp_path: Path) -> None:
    """A silent build step past the whole-cell deadline: DeadlineReached, the build cancelled."""
    token = uuid.uuid4().hex
    task = task_with_dockerfile(tmp_path / "t", f"FROM debian:bookworm-slim\nRUN sleep 600 && echo {token}\n")
    executor = make_executor()
    req = request(task, tmp_path, deadline=time.time() + 6)
    with pytest.raises(DeadlineReached) as info, executor.lease(req):
        pytest.fail("the lease must not start")
    assert "while building its image" in str(info.value) and "RUN sleep 600" in str(info.value)
    assert "the whole-cell deadline passed" in (req.attempt_dir / "build.log").read_text()
    wait_for(lambda: not _build_containers(docker_api, token), 60, "the cancelled build's container to go")
    # the cancelled build is not a failed build: the next lease (no deadline) would build again
    assert not list(executor.images.dir.glob("*.failed"))


def test_cell_whose_build_outlasts_its_deadline_is_budget_exhausted(make_executor, tmp_path: Path) -> None:
    """Through the whole lifecycle: budget_exhausted, the subject never started, the cause named."""
    token = uuid.uuid4().hex
    root = tmp_path / "t"
    task = task_with_dockerfile(root, f"FROM debian:bookworm-slim\nRUN sleep 600 && echo {token}\n")
    (root / "instruction.md").write_text("x")
    spec = SubjectSpec(name="nop", kind="nop", options=NoOptions(), declared_in=tmp_path / "c.yaml", digest="0" * 64)
    out = tmp_path / "out"
    settings = RunSettings(
        cohort="deadline",
        out_dir=out,
        budgets=Budgets(cell_timeout_sec=6),
        policy=Policy(allow_unsandboxed=True),
        retries=Retries(infra=0),
    )
    executor = make_executor()
    runner = CellRunner(settings, executor, {"nop": Nop(spec)}, {"reward": RewardVerifier()}, Ledger(out))
    record = runner.run_cell(Cell(task=task, subject=spec, repetition=1), executor.lease, tmp_path)
    assert record.status is Status.BUDGET_EXHAUSTED and record.official is False, record
    assert record.error is not None and record.error.message is not None and record.agent is not None
    assert record.error.message.startswith("budget exhausted: cell_timeout_sec (task docker-task: the deadline")
    assert "while building its image" in record.error.message
    assert record.agent.extra("not_started")
