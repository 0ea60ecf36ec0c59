"""A local sandbox bwrap could not set up is the host's failure (infra_failure), never the
command's: bwrap reports an exit code on ``--json-status-fd`` only for a command that ran."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.core.errors import InfraError
from pytest_maka.egress import tunguard
from pytest_maka.egress.log import EgressLog
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.local import LocalExecutor, LocalOptions, LocalSandbox
from pytest_maka.testing import make_cell, make_task

pytestmark = [pytest.mark.sandbox, pytest.mark.needs("bwrap")]

ENV = {"PATH": "/usr/bin:/bin"}


@pytest.fixture
def vanishing(tmp_path: Path) -> Iterator[tuple[LocalSandbox, Path]]:
    """A lease with a read-only bind whose host directory the test can remove."""
    tool = tmp_path / "tool"
    tool.mkdir()
    executor = LocalExecutor(LocalOptions(kill_grace_sec=0.5, ro_binds=[str(tool)]))
    executor.check()
    task = make_task(tmp_path / "task")
    request = LeaseRequest(
        cell=make_cell(task, tmp_path),
        attempt=1,
        attempt_dir=tmp_path / "attempt",
        scratch_dir=tmp_path / f"scratch-{time.monotonic_ns()}",
    )
    with executor.lease(request) as sandbox:
        assert isinstance(sandbox, LocalSandbox)
        yield sandbox, tool


def _exec(sandbox: LocalSandbox, command: str, tmp_path: Path) -> tuple[int | None, str]:
    result = sandbox.exec(command, env=ENV, timeout_sec=30, stdout_path=tmp_path / "out", stderr_path=tmp_path / "err")
    return result.exit_code, (tmp_path / "err").read_text()


def test_a_sandbox_that_could_not_be_set_up_is_an_infra_error(vanishing, tmp_path: Path) -> None:
    sandbox, tool = vanishing
    assert _exec(sandbox, "true", tmp_path)[0] == 0
    for _ in range(2):  # the command set up ahead, then the one started as usual
        shutil.rmtree(tool)
        with pytest.raises(InfraError, match=r"could not be set up: bwrap: Can't find source path .*tool"):
            _exec(sandbox, "touch /app/ran", tmp_path)
        tool.mkdir()
    assert not (sandbox.files.workspace / "ran").exists()
    assert _exec(sandbox, "echo back", tmp_path)[0] == 0


def test_a_command_that_says_what_bwrap_says_still_failed_itself(vanishing, tmp_path: Path) -> None:
    """Hostile: bwrap's words on stderr and exit 1 do not move a failure out of the denominator."""
    sandbox, _ = vanishing
    code, err = _exec(sandbox, 'echo "bwrap: Can\'t find source path /x: No such file" >&2; exit 1', tmp_path)
    assert code == 1 and err.startswith("bwrap: ")


def test_a_spawned_process_whose_sandbox_could_not_be_set_up(vanishing) -> None:
    sandbox, tool = vanishing
    proc = sandbox.spawn("echo up", env=ENV)
    assert proc.stdout.read() == b"up\n" and proc.wait(10) == 0
    shutil.rmtree(tool)
    proc = sandbox.spawn("echo up", env=ENV)
    with pytest.raises(InfraError, match="could not be set up"):
        proc.wait(10)
    with pytest.raises(InfraError, match="could not be set up"):  # asked again: the same answer
        proc.wait(10)
    tool.mkdir()
    killed = sandbox.spawn("sleep 30", env=ENV)
    killed.kill(0.5)  # stopped by the harness: no exit code of its own, and no infra error
    assert killed.wait(5) is not None


def test_a_cell_whose_sandbox_could_not_be_set_up_is_an_infra_failure(cohort, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.mkdir()
    cohort.task("t")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}],
        executor={"kind": "local", "ro_binds": [str(tool)]},
    )
    cohort.pytester.makeconftest(
        f"""
        import shutil

        def pytest_maka_attempt_started(cell, attempt):
            shutil.rmtree({str(tool)!r}, ignore_errors=True)
        """
    )
    result = cohort.run("-p", "no:randomly")
    record = cohort.results()["t[oracle-r0]"]
    assert record["status"] == "infra_failure", record
    assert "could not be set up: bwrap: Can't find source path" in record["error"]["message"]
    assert record["attempt_count"] == 3  # the platform's failure: retried, never counted
    result.stdout.fnmatch_lines(["*could not be set up: bwrap: Can't find source path*"])


@pytest.mark.skipif(tunguard.unavailable() is not None, reason=f"no TUN guard here: {tunguard.unavailable()}")
def test_a_command_of_an_allowlist_phase_whose_sandbox_could_not_be_set_up(vanishing, tmp_path: Path) -> None:
    """The TUN guard owns bwrap's status there: the same answer comes through it."""
    sandbox, tool = vanishing
    log = EgressLog(tmp_path / "egress.log")
    with sandbox.egress_phase("agent", PhasePlan("allowlist", hostpattern.parse_all(["allowed.test:80"])), log):
        result = sandbox.exec(
            "echo ran", env=ENV, timeout_sec=30, network=True, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e"
        )
        assert (result.exit_code, (tmp_path / "o").read_text()) == (0, "ran\n")
        shutil.rmtree(tool)
        with pytest.raises(InfraError, match="could not be set up: bwrap: Can't find source path"):
            sandbox.exec(
                "echo ran",
                env=ENV,
                timeout_sec=30,
                network=True,
                stdout_path=tmp_path / "o",
                stderr_path=tmp_path / "e",
            )
        proc = sandbox.spawn("echo up", env=ENV, network=True)
        with pytest.raises(InfraError, match="could not be set up"):
            proc.wait(10)
