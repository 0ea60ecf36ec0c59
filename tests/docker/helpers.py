"""Small helpers shared by the Docker tests: tasks, lease requests, running a command."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pytest_maka.core.task import Task, digest_tree
from pytest_maka.executors.base import ExecResult, LeaseRequest, Sandbox
from pytest_maka.executors.docker import labels as L
from pytest_maka.testing.conformance import make_cell, make_task

_n = itertools.count()
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def task_with_dockerfile(root: Path, dockerfile: str, *, task_id: str = "docker-task", **fields: Any) -> Task:
    """A task whose environment is built from ``dockerfile``."""
    env = root / "environment"
    env.mkdir(parents=True, exist_ok=True)
    (env / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    tests = root / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    return Task(
        id=task_id,
        path=root,
        instruction="x",
        digest=digest_tree(root),
        environment_dir=env,
        dockerfile=env / "Dockerfile",
        tests_dir=tests,
        **fields,
    )


def plain_task(root: Path, *, task_id: str = "plain-task", **fields: Any) -> Task:
    """A task with no environment: it runs in the executor's default image."""
    root.mkdir(parents=True, exist_ok=True)
    return Task(id=task_id, path=root, instruction="x", digest=digest_tree(root), **fields)


def request(task: Task, tmp_path: Path, **kw: Any) -> LeaseRequest:
    n = next(_n)
    return LeaseRequest(
        cell=make_cell(task, tmp_path),
        attempt=1,
        attempt_dir=tmp_path / f"attempt-{n}",
        scratch_dir=tmp_path / f"scratch-{n}",
        **kw,
    )


def run(sandbox: Sandbox, command: str, tmp_path: Path, **kw: Any) -> tuple[ExecResult, str, str]:
    n = next(_n)
    out, err = tmp_path / f"o{n}", tmp_path / f"e{n}"
    kw.setdefault("timeout_sec", 60)
    result = sandbox.exec(command, env={"PATH": PATH}, stdout_path=out, stderr_path=err, **kw)
    return result, out.read_text(errors="replace"), err.read_text(errors="replace")


def containers_of(api: Any, task_id: str) -> list[dict[str, Any]]:
    """Containers (any state) this plugin made for ``task_id``."""
    return api.containers(all=True, filters={"label": [f"io.pytest-maka.task={task_id}"]})


FIRST_URL = "unix:///var/run/docker.sock"

#: ``python -c CRASH_IN_CHILD ROOT STATE TASK_ID [ENGINE_URL IMAGE]``: lease a container for TASK_ID,
#: print its id, and die as a crashed worker does (no finally runs); exit status 9.
CRASH_IN_CHILD = """
import os, sys
from pathlib import Path
from pytest_maka.executors.docker import DockerExecutor, DockerOptions
from tests.docker.helpers import plain_task, request
root, state, task_id, elsewhere = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
where = {"engines": elsewhere[:1], "default_image": elsewhere[1]} if elsewhere else {}
ex = DockerExecutor(DockerOptions(state_dir=state, slots_per_engine=1, **where))
with ex.lease(request(plain_task(root / "t", task_id=task_id), root)) as sb:
    print(sb.id, flush=True)
    os._exit(9)
"""


def lease_and_sleep(executor: Any, tmp_path: Path, seconds: float) -> str:
    """One attempt: lease, run ``sleep``, return the engine URL it ran on (or the error)."""
    from pytest_maka.core.errors import InfraError

    task = plain_task(tmp_path / "t")
    try:
        with executor.lease(request(task, tmp_path)) as sandbox:
            result, _, err = run(sandbox, f"sleep {seconds}", tmp_path)
            assert result.exit_code == 0, err
            return sandbox.engine.url
    except InfraError as exc:
        return f"error: {exc}"


def check_rotation(
    executor: Any,
    tmp_path: Path,
    second_url: str,
    *,
    kill: Callable[[], None],
    revive: Callable[[], None],
    retry_sec: float,
) -> None:
    """Two engines of 2 slots: both take work; the second dies mid-attempt (its attempts are
    infra errors, retries land on the first); once it answers again it rejoins the rotation."""
    with ThreadPoolExecutor(4) as pool:
        used = list(pool.map(lambda _: lease_and_sleep(executor, tmp_path, 1), range(8)))
    assert sorted(set(used)) == sorted([FIRST_URL, second_url]), used

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(lease_and_sleep, executor, tmp_path, 4) for _ in range(4)]
        deadline = time.monotonic() + 120  # kill once both of its slots run a leased container
        while _running_on(second_url) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        kill()
        outcomes = [f.result(timeout=120) for f in futures]
    failed = [o for o in outcomes if o.startswith("error:")]
    assert len(failed) == 2 and all(second_url in o for o in failed), outcomes
    assert outcomes.count(FIRST_URL) == 2, outcomes

    assert [e.url for e, _ in executor._candidates()] == [FIRST_URL]
    with ThreadPoolExecutor(2) as pool:
        retried = list(pool.map(lambda _: lease_and_sleep(executor, tmp_path, 0.2), range(2)))
    assert retried == [FIRST_URL, FIRST_URL]

    revive()
    time.sleep(retry_sec + 0.5)
    with ThreadPoolExecutor(4) as pool:
        used = list(pool.map(lambda _: lease_and_sleep(executor, tmp_path, 1), range(4)))
    assert second_url in used, used


def _finished_on(out: Path, url: str) -> bool:
    """Whether an attempt has already passed on ``url`` (attempts.jsonl grows during the run)."""
    try:
        lines = (out / "attempts.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        try:
            attempt = json.loads(line)
        except ValueError:
            continue  # a line being written
        if attempt["status"] == "agent_success" and attempt["isolation"].get("engine") == url:
            return True
    return False


def _running_on(url: str) -> int:
    """How many leased containers (not idle spares) are running on the engine at ``url``."""
    import docker

    try:
        api = docker.APIClient(base_url=url, version="auto", timeout=10, use_ssh_client=url.startswith("ssh://"))
    except Exception:
        return 0
    try:
        found = api.containers(filters={"label": "io.pytest-maka.managed=1", "status": "running"})
    except Exception:
        return 0
    finally:
        api.close()
    # a spare taken by a lease keeps its "spare" label but is renamed after the cell
    return sum(
        (c.get("Labels") or {}).get("io.pytest-maka.cell") != "spare"
        or any(n.lstrip("/").startswith("maka-") for n in c.get("Names") or [])
        for c in found
    )


def check_cohort_survives_engine_loss(
    cohort: Any, second_url: str, *, kill: Callable[[], None], state_dir: Path, image: str, cells: int = 6
) -> None:
    """Through ``pytest -n 2``: cells run on the main engine and ``second_url``; the second is
    cut while a cell runs on it; every cell still ends ``agent_success``, the lost attempts
    recorded as infra failures naming that engine."""
    from ..conftest import PASS_TEST

    for i in range(cells):
        cohort.task(f"t{i}", test=PASS_TEST)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 10; echo ok > /app/done.txt"}],
        executor={
            "kind": "docker",
            "engines": [FIRST_URL, second_url],
            "slots_per_engine": 1,
            "default_image": image,
            "engine_retry_sec": 600,
            "state_dir": str(state_dir),
        },
        retries={"infra": 2},
    )
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-n", "2", "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
    )
    try:
        # once a cell has passed there and the next one runs there, cut it mid-run (states, not sleeps:
        # a loaded machine made a fixed 40 s + 1 s window miss the second engine altogether)
        deadline = time.monotonic() + 300
        while not _finished_on(cohort.out, second_url) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        while not _running_on(second_url) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        kill()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()[-3000:] + err.decode()[-2000:]
    assert set(cohort.status().values()) == {"agent_success"}
    attempts = cohort.attempts()
    engines = {a["isolation"].get("engine") for a in attempts if a["status"] == "agent_success"}
    assert FIRST_URL in engines and second_url in engines, engines
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert lost, "the cut engine had a cell running"
    assert all(second_url in a["error"]["message"] for a in lost), [a["error"] for a in lost]


def start_run(cohort: Any, *extra: str) -> subprocess.Popen[bytes]:
    """The cohort's pytest run in a session of its own (to be signalled as a group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *cohort.args(*extra)],
        cwd=cohort.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until(done: Callable[[], bool], timeout_sec: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Poll ``done`` until it holds, ``timeout_sec`` passes or ``proc`` exits; returns ``done()``."""
    deadline = time.monotonic() + timeout_sec
    while not done() and time.monotonic() < deadline and (proc is None or proc.poll() is None):
        time.sleep(0.2)
    return done()


EGRESS_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def egress_request(tmp_path: Path, name: str) -> LeaseRequest:
    """A lease request for a python:3.11-slim task whose plan has an allowlist phase."""
    root = tmp_path / name
    task = make_task(root / "task", id=f"{name}-{uuid.uuid4().hex[:6]}", docker_image="python:3.11-slim")
    (root / "a").mkdir(parents=True)
    return LeaseRequest(cell=make_cell(task, root), attempt=1, attempt_dir=root / "a", scratch_dir=root / "s",
                        egress=True)  # fmt: skip


def run_in(sandbox: Sandbox, tmp_path: Path, command: str, network: bool = True) -> str:
    """Run ``command`` in ``sandbox`` (with the phase's network by default): its output and errors."""
    out, err = tmp_path / f"o-{uuid.uuid4().hex[:6]}", tmp_path / f"e-{uuid.uuid4().hex[:6]}"
    sandbox.exec(command, env=EGRESS_ENV, timeout_sec=120, stdout_path=out, stderr_path=err, network=network)
    return out.read_text() + err.read_text()


#: A command fetching each URL given, printing its answer or why it failed.
FETCH = (
    'python3 -c "import sys, urllib.request as u\n'
    "for url in sys.argv[1:]:\n"
    "    try: print(url, u.urlopen(url, timeout=10).read().decode())\n"
    "    except Exception as e: print(url, 'FAILED', e)\" "
)


def egress_executor(state: Path, upstream: tuple[str, str, int]) -> dict[str, object]:
    """A Docker executor spec whose egress proxy reaches ``allowed.test`` on the upstream network."""
    network, ip, _ = upstream
    return {"kind": "docker", "state_dir": str(state), "egress_network": network, "egress_hosts": {"allowed.test": ip}}


def egress_leftovers(docker_api, cell_prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The egress networks, proxies and packet loggers still there for cells named ``cell_prefix``..."""
    # the listing's own labels: a network another test's lease removes meanwhile cannot be inspected
    nets = [
        n["Name"]
        for n in docker_api.networks(filters={"label": f"{L.ROLE}=egress"})
        if (n.get("Labels") or {}).get(L.CELL, "").startswith(cell_prefix)
    ]
    helpers = [
        c["Names"][0]
        for role in ("egress-proxy", "egress-guard")
        for c in docker_api.containers(all=True, filters={"label": f"{L.ROLE}={role}"})
        if c["Labels"].get(L.CELL, "").startswith(cell_prefix)
    ]
    return nets + helpers
