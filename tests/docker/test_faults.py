"""Faults on Docker: a killed worker or a lost engine leaves no container, spare or shim, and
a lost engine is waited for instead of burning every attempt of every cell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from pytest_maka.executors.docker import labels as L

from ..conftest import PASS_TEST, Cohort
from .second_engine import SecondEngine, started_engine

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"

RECORD_PIDS_AND_DIE = """
import contextlib, os, signal

ROLE = {}

def pytest_configure(config):
    ROLE["worker"] = hasattr(config, "workerinput")
    if ROLE["worker"]:
        with open(PIDS, "a") as fh:
            fh.write(f"{os.getpid()}\\n")

@contextlib.contextmanager
def _die_inside(lease):
    with lease as sandbox:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies holding a started container
        yield sandbox

def pytest_maka_acquire_lease(executor, request):
    if ROLE["worker"] and request.cell.task.id.endswith("-t3"):
        return _die_inside(executor.lease(request))
    return None
"""


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def managed(api: docker.APIClient, **label_values: str) -> list[dict]:
    found = api.containers(all=True, filters={"label": f"{L.MANAGED}=1"})
    return [c for c in found if all((c.get("Labels") or {}).get(k) == v for k, v in label_values.items())]


def test_killed_worker_leaves_no_container_or_spare(docker_api, cohort: Cohort, state_dir: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    for i in range(6):
        cohort.task(f"{tag}-t{i}", test=PASS_TEST)
    pids = cohort.root / "worker-pids.txt"
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "default_image": IMAGE, "state_dir": str(state_dir), "prestart": True},
        retries={"infra": 0},
    )
    cohort.pytester.makeconftest(f"PIDS = {str(pids)!r}\n" + RECORD_PIDS_AND_DIE)
    result = cohort.run_subprocess("-n", "2", "-p", "no:randomly", timeout=300)
    statuses = cohort.status()
    killed = [cid for cid, status in statuses.items() if status == "infra_failure"]
    assert killed and all(cid.startswith(f"{tag}-t3[") for cid in killed), statuses
    assert len(cohort.attempts()) == len(statuses), "one attempt per recorded cell, no phantom"
    owners = set(pids.read_text().split())
    assert len(owners) >= 2, "the crashed worker and at least one other (a replacement) ran cells"
    left = [c for c in managed(docker_api) if (c.get("Labels") or {}).get(L.OWNER_PID) in owners]
    assert left == [], [(c["Names"], c["Labels"].get(L.CELL)) for c in left]
    assert result.ret == 7


@pytest.fixture
def lone_engine(docker_api) -> Iterator[SecondEngine]:
    with started_engine(docker_api, IMAGE) as engine:
        yield engine


def _shims_of(engine: SecondEngine) -> list[int]:
    """containerd-shim processes serving containers of ``engine``."""
    return engine._pids(lambda cmd: b"containerd-shim" in cmd)


def test_restarted_engine_is_waited_for_and_leaves_nothing(
    lone_engine: SecondEngine, cohort: Cohort, state_dir: Path
) -> None:
    """The only engine restarts mid-run: leases wait for it, each cell loses at most the attempt
    that was running, every cell ends agent_success, no container or spare is left behind."""
    for i in range(4):
        cohort.task(f"t{i}", test=PASS_TEST)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 2; echo ok > /app/done.txt"}],
        executor={
            "kind": "docker",
            "engines": [lone_engine.url],
            "default_image": IMAGE,
            "engine_retry_sec": 1,
            "engine_wait_sec": 240,
            "state_dir": str(state_dir),
        },
        retries={"infra": 3, "backoff_sec": 0.5, "backoff_max_sec": 2},
    )
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-n", "2", "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
    )
    ledger = cohort.out / "attempts.jsonl"
    try:
        wait_for(lambda: ledger.exists() and '"agent_success"' in ledger.read_text(), 180, "a first pass")
        wait_for(lambda: bool(_shims_of(lone_engine)), 60, "a running container")
        lone_engine.restart()
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()[-3000:] + err.decode()[-2000:]
    assert set(cohort.status().values()) == {"agent_success"}
    attempts = [json.loads(line) for line in ledger.read_text().splitlines()]
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert len(lost) <= 2, "at most the attempts running when the engine went were lost"
    assert max(a["attempt"] for a in attempts) <= 2, "no cell burned its retries while the engine was away"
    api = docker.APIClient(base_url=lone_engine.url, version="auto", timeout=30)
    try:
        assert managed(api) == [], "no container or spare outlives the run"
    finally:
        api.close()


def test_killed_engine_leaves_no_shim_or_container_process(lone_engine: SecondEngine, make_executor, tmp_path) -> None:
    """SIGKILL the engine while a lease runs a command: once the executor closes, no shim of that
    container (and so none of its processes) is left on this host, though the engine never returned."""
    from .helpers import plain_task, request

    executor = make_executor(engines=[lone_engine.url], default_image=IMAGE, prestart=False, engine_wait_sec=0)
    executor.check()
    task = plain_task(tmp_path / "task")
    with pytest.raises(RuntimeError, match="the engine is gone"), executor.lease(request(task, tmp_path)):
        wait_for(lambda: bool(_shims_of(lone_engine)), 60, "the container's shim")
        lone_engine.kill()
        raise RuntimeError("the engine is gone")
    assert _shims_of(lone_engine), "the shim outlived its engine (the fault this test is about)"
    executor.close()
    assert _shims_of(lone_engine) == []


def test_second_engines_claim_distinct_subnets() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("bridges need root and ip")
    from .second_engine import _claim_subnet

    claims = [_claim_subnet() for _ in range(3)]
    try:
        assert len({n for n, _ in claims}) == 3
    finally:
        for _, fd in claims:
            os.close(fd)


def test_output_reader_error_is_surfaced_not_swallowed(make_executor, tmp_path: Path) -> None:
    """The reader cannot write the command's stdout file: the result says the output is incomplete
    and the stderr file says why."""
    from .helpers import PATH, plain_task, request

    executor = make_executor(default_image=IMAGE, prestart=False)
    task = plain_task(tmp_path / "task")
    stdout_path = tmp_path / "stdout-is-a-directory"
    stdout_path.mkdir()
    stderr_path = tmp_path / "stderr.txt"
    with executor.lease(request(task, tmp_path)) as sandbox:
        result = sandbox.exec(
            "echo hello", env={"PATH": PATH}, timeout_sec=60, stdout_path=stdout_path, stderr_path=stderr_path
        )
    assert result.exit_code == 0 and result.stdout_truncated and result.stderr_truncated
    note = stderr_path.read_text()
    assert "reading this command's output failed: IsADirectoryError" in note, note


def test_slot_wait_past_the_cell_deadline_is_the_cells_budget_not_an_infra_retry(make_executor, tmp_path) -> None:
    """Every slot is held: a lease whose cell deadline comes before the lease timeout ends at
    that deadline with DeadlineReached (recorded as budget_exhausted, final), not InfraError
    (which would be retried and leave the official denominator)."""
    from dataclasses import replace

    from pytest_maka.core.errors import DeadlineReached, InfraError

    from .helpers import plain_task, request

    executor = make_executor(default_image=IMAGE, prestart=False, slots_per_engine=1, lease_timeout_sec=600)
    task = plain_task(tmp_path / "task")
    with executor.lease(request(task, tmp_path)):
        started = time.monotonic()
        late = replace(request(task, tmp_path), deadline=time.time() + 1.0)
        with pytest.raises(DeadlineReached, match="waiting for a container slot"), executor.lease(late):
            pass
        assert time.monotonic() - started < 300  # it stopped at the deadline, not at lease_timeout_sec
        executor_short = make_executor(default_image=IMAGE, prestart=False, slots_per_engine=1, lease_timeout_sec=1)
        # no deadline: the lease timeout is infra
        with pytest.raises(InfraError, match="no free container slot"), executor_short.lease(request(task, tmp_path)):
            pass
