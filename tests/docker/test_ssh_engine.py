"""An ``ssh://`` engine, for real: a throwaway sshd on 127.0.0.1 in front of a second dockerd.

The ssh side is the SDK's shell-out client (``ssh ... docker system dial-stdio``); the engine
behind it is a distinct dockerd, so a lease that lands there really went through ssh.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Cohort
from .helpers import FIRST_URL, check_cohort_survives_engine_loss, check_rotation
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
    check_cohort_survives_engine_loss(cohort, ssh_path.url, kill=ssh_path.kill, state_dir=state_dir, image=IMAGE)
