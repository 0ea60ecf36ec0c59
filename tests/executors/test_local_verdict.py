"""The local sandbox's verdict channel (``open_verdict``): a process that runs through the whole
verification (a spawned one lives until the lease ends) neither sees nor writes the
verification's /tests and /logs/verifier, while it does write the lease's own /logs/verifier."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from pytest_maka.executors.base import ExecResult
from pytest_maka.executors.local import LocalOptions, LocalSandbox
from pytest_maka.testing import make_task

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
]

ENV = {"PATH": "/usr/bin:/bin"}
#: Rewrites the reward to a pass and every test file it can see, and says what it sees.
DAEMON = (
    "while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    ' for f in /tests/*; do [ -f "$f" ] && echo \'echo 1 > /logs/verifier/reward.txt\' > "$f"; done;'
    " ls /tests > /logs/agent/daemon-sees-tests.txt 2>&1; sleep 0.01; done"
)


@pytest.fixture
def sandbox(tmp_path: Path) -> LocalSandbox:
    box = LocalSandbox(make_task(tmp_path / "task"), tmp_path / "scratch", LocalOptions(kill_grace_sec=0.5))
    yield box
    box.close()


def run(box: LocalSandbox, command: str, out: Path) -> ExecResult:
    out.mkdir(parents=True, exist_ok=True)
    return box.exec(command, env=ENV, timeout_sec=60, stdout_path=out / "o", stderr_path=out / "e")


def test_a_process_running_through_the_verification_cannot_reach_its_channel(
    sandbox: LocalSandbox, tmp_path: Path
) -> None:
    daemon = sandbox.spawn(DAEMON, env=ENV)
    try:
        deadline = time.monotonic() + 30
        while not (sandbox.files.logs / "verifier" / "reward.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (sandbox.files.logs / "verifier" / "reward.txt").exists(), "the daemon runs and writes the lease's"
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "test.sh").write_text("sleep 0.5; echo 0 > /logs/verifier/reward.txt; sleep 0.5\n")
        sandbox.open_verdict(tests, tmp_path)
        result = run(sandbox, "sh /tests/test.sh; cat /tests/test.sh", tmp_path / "v")
        assert result.exit_code == 0
        assert "sleep 0.5" in (tmp_path / "v" / "o").read_text(), "the tests ran as copied in"
        assert sandbox.get("/logs/verifier", tmp_path / "got")
        assert (tmp_path / "got" / "reward.txt").read_text() == "0\n", "only the verification wrote its reward"
        sandbox.close_verdict()
        lease_reward = sandbox.files.logs / "verifier" / "reward.txt"
        lease_reward.unlink()  # the daemon writes it again if it still runs (a read mid-write sees "": poll)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (lease_reward.exists() and lease_reward.read_text() == "1\n"):
            time.sleep(0.02)
        assert lease_reward.read_text() == "1\n", "the daemon still ran"
        assert "test.sh" not in (sandbox.files.logs / "agent" / "daemon-sees-tests.txt").read_text()
    finally:
        daemon.kill(0.5)
