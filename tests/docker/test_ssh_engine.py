"""An ``ssh://`` engine, for real: a throwaway sshd on 127.0.0.1 in front of a second dockerd.

The ssh side is the SDK's shell-out client (``ssh ... docker system dial-stdio``); the engine
behind it is a distinct dockerd, so a lease that lands there really went through ssh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import PASS_TEST, Cohort
from .helpers import FIRST_URL, check_rotation
from .second_engine import SecondEngine
from .ssh_engine import SshEngine, missing_reason

pytestmark = pytest.mark.docker
IMAGE = "debian:bookworm-slim"


@pytest.fixture(scope="module")
def ssh_engine(docker_api) -> Iterator[SshEngine]:
    """sshd on loopback whose sessions' ``docker`` talks to a second dockerd."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("ip") is None:
        pytest.skip("starting a second dockerd needs root, dockerd and ip")
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    try:
        import paramiko  # noqa: F401
    except ImportError:  # a missing dependency, not a missing machine: fail loudly
        pytest.fail("ssh:// engines need paramiko (the docker SDK imports it even to shell out to ssh): 'docker[ssh]'")
    second = SecondEngine()
    ssh: SshEngine | None = None
    try:
        second.start()
        second.load_from(docker_api, IMAGE)
        ssh = SshEngine(second.url)
        ssh.start()
        yield ssh
    finally:
        if ssh is not None:
            ssh.stop()
        second.stop()


@pytest.fixture
def ssh_path(ssh_engine: SshEngine, monkeypatch: pytest.MonkeyPatch) -> SshEngine:
    """The engine, with its ``ssh`` wrapper first on ``$PATH`` (and sshd answering)."""
    monkeypatch.setenv("PATH", ssh_engine.path)
    if ssh_engine.proc is None:
        ssh_engine.start()
    return ssh_engine


def _finished_on(cohort: Cohort, url: str) -> bool:
    """Whether an attempt has already passed on ``url`` (attempts.jsonl grows during the run)."""
    try:
        lines = (cohort.out / "attempts.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        try:
            attempt = json.loads(line)
        except ValueError:  # a line being written
            continue
        if attempt.get("status") == "agent_success" and attempt.get("isolation", {}).get("engine") == url:
            return True
    return False


def test_leases_spread_over_a_unix_and_an_ssh_engine_and_a_dead_sshd_leaves_rotation(
    ssh_path: SshEngine, make_executor, tmp_path: Path
) -> None:
    ssh = ssh_path  # requested first: the executor is closed while the ssh wrapper is still on $PATH
    executor = make_executor(engines=[FIRST_URL, ssh.url], slots_per_engine=2, default_image=IMAGE, engine_retry_sec=2)
    executor.check()

    # the ssh engine is the second dockerd; killing sshd (and its sessions) takes it away
    check_rotation(executor, tmp_path, ssh.url, kill=ssh.kill, revive=ssh.start, retry_sec=2)


def test_cells_spread_over_a_unix_and_an_ssh_engine_and_survive_sshd_dying(
    ssh_path: SshEngine, cohort: Cohort, state_dir: Path
) -> None:
    """Through pytest -n 2 (workers inherit the ``ssh`` wrapper on ``$PATH``): cells run on
    both engines; sshd is killed mid-run; every cell still ends with an official result."""
    ssh = ssh_path
    for i in range(6):
        cohort.task(f"t{i}", test=PASS_TEST)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 3; echo ok > /app/done.txt"}],
        executor={
            "kind": "docker",
            "engines": [FIRST_URL, ssh.url],
            "slots_per_engine": 1,
            "default_image": IMAGE,
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
        # once a cell has passed over ssh, that worker's next cell is leased there: cut it mid-run
        deadline = time.monotonic() + 40
        while not _finished_on(cohort, ssh.url) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        ssh.kill()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()[-3000:] + err.decode()[-2000:]
    assert set(cohort.status().values()) == {"agent_success"}
    attempts = cohort.attempts()
    engines = {a["isolation"].get("engine") for a in attempts if a["status"] == "agent_success"}
    assert FIRST_URL in engines and ssh.url in engines, engines
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert lost, "the cut engine had a cell running"
    assert all(ssh.url in a["error"]["message"] for a in lost), [a["error"] for a in lost]
