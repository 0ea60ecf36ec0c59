"""A local sandbox's command set up ahead (``exec_ahead``): the same command, the same isolation
and limits as a fresh one, nothing of it before its ``exec``, never used when what it binds changed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from pytest_maka.core import progress
from pytest_maka.core.cell import Cell
from pytest_maka.executors.base import ExecResult
from pytest_maka.executors.local import LocalOptions, LocalSandbox, limits
from pytest_maka.executors.local.ahead import AheadRequest, AheadWorker
from pytest_maka.executors.local.stoppers import namespace_pids
from pytest_maka.testing import make_task

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.needs("bwrap"),
]

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/logs/.verifier-home", "MARK": "ahead"}


@pytest.fixture
def sandbox(tmp_path: Path) -> LocalSandbox:
    box = LocalSandbox(make_task(tmp_path / "task"), tmp_path / "scratch", LocalOptions(kill_grace_sec=0.5))
    yield box
    box.close()


def ready(box: LocalSandbox, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while box._ahead.state == "pending" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert box._ahead.state == "ready"


def run(box: LocalSandbox, command: str, out: Path, timeout: float = 60.0) -> ExecResult:
    return box.exec(command, env=ENV, timeout_sec=timeout, stdout_path=out / "o", stderr_path=out / "e")


def test_the_command_set_up_ahead_runs_as_a_fresh_one_would(sandbox: LocalSandbox, tmp_path: Path) -> None:
    command = "echo $MARK; pwd; ls -A /tmp | wc -l; cat /proc/self/status | grep -E '^(Cap(Eff|Bnd)|NoNewPrivs)'; ls /"
    sandbox.exec_ahead(command, env=ENV)
    ready(sandbox)
    ahead = run(sandbox, command, tmp_path / "a")
    fresh = run(sandbox, command, tmp_path / "b")
    assert ahead.set_up_ahead and not fresh.set_up_ahead
    assert ahead.exit_code == fresh.exit_code == 0
    assert (tmp_path / "a" / "o").read_text() == (tmp_path / "b" / "o").read_text()
    assert (tmp_path / "a" / "o").read_text().startswith("ahead\n/app\n0\n")


def test_nothing_of_the_command_runs_before_its_exec(sandbox: LocalSandbox, tmp_path: Path) -> None:
    sandbox.exec_ahead("touch /logs/ran; echo started", env=ENV)
    ready(sandbox)
    time.sleep(0.3)
    assert not (sandbox.files.logs / "ran").exists()
    result = run(sandbox, "touch /logs/ran; echo started", tmp_path)
    assert result.set_up_ahead and (sandbox.files.logs / "ran").exists()


def test_tests_put_after_the_set_up_are_what_it_sees(sandbox: LocalSandbox, tmp_path: Path) -> None:
    sandbox.exec_ahead("cat /tests/t.txt", env=ENV, puts=["/tests"])
    ready(sandbox)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "t.txt").write_text("hidden until now\n")
    sandbox.put(tests, "/tests")
    result = run(sandbox, "cat /tests/t.txt", tmp_path)
    assert result.set_up_ahead and result.exit_code == 0
    assert (tmp_path / "o").read_text() == "hidden until now\n"


def test_the_subject_never_sees_the_tests_directory_made_for_it(sandbox: LocalSandbox, tmp_path: Path) -> None:
    sandbox.exec_ahead("cat /tests/t.txt", env=ENV, puts=["/tests"])
    ready(sandbox)
    result = run(sandbox, "ls -d /tests || echo absent", tmp_path)  # a command of the subject's meanwhile
    assert not result.set_up_ahead
    assert (tmp_path / "o").read_text().strip() == "absent"


def test_a_replaced_bound_directory_is_never_used(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """The directory it binds was removed and made anew: it would see the old one, so it is discarded."""
    sandbox.exec_ahead("cat /tests/t.txt", env=ENV, puts=["/tests"])
    ready(sandbox)
    stale = sandbox.files.mounts / "tests"
    os.rmdir(stale)
    stale.mkdir()
    (stale / "t.txt").write_text("old\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "t.txt").write_text("new\n")
    sandbox.remove("/tests")
    sandbox.put(tests, "/tests")
    result = run(sandbox, "cat /tests/t.txt", tmp_path)
    assert not result.set_up_ahead
    assert (tmp_path / "o").read_text() == "new\n"


def test_a_prepared_sandbox_that_died_before_its_turn_is_not_used(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """bwrap reports the sandbox before it sets it up, so it may still fail (a bound directory gone
    meanwhile): the command then starts as usual, never an error."""
    sandbox.exec_ahead("echo fresh", env=ENV)
    ready(sandbox)
    prepared = sandbox._ahead._request._prepared  # type: ignore[union-attr]
    os.kill(prepared.stopper.pid1, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while prepared.stopper.pid1_alive() and time.monotonic() < deadline:  # a signal is delivered asynchronously
        time.sleep(0.005)
    result = run(sandbox, "echo fresh", tmp_path)
    assert not result.set_up_ahead and result.exit_code == 0
    assert (tmp_path / "o").read_text() == "fresh\n"


def test_another_command_leaves_it_and_the_lease_end_kills_it(tmp_path: Path) -> None:
    box = LocalSandbox(make_task(tmp_path / "task"), tmp_path / "scratch", LocalOptions())
    try:
        box.exec_ahead("echo verifier", env=ENV)
        ready(box)
        prepared = box._ahead._request._prepared  # type: ignore[union-attr]
        assert prepared is not None
        namespace = f"pid:[{os.stat(f'/proc/{prepared.stopper.pid1}/ns/pid').st_ino}]"
        other = run(box, "echo subject", tmp_path)
        assert not other.set_up_ahead and box._ahead.state == "ready"
    finally:
        box.close()
    assert prepared.proc.poll() is not None
    assert namespace_pids(namespace) == []
    assert not (tmp_path / "scratch").exists()


def test_its_timeout_counts_from_its_exec(sandbox: LocalSandbox, tmp_path: Path) -> None:
    sandbox.exec_ahead("sleep 30", env=ENV)
    ready(sandbox)
    time.sleep(1.2)  # set up long before: the time waited is not the command's
    started = time.monotonic()
    result = run(sandbox, "sleep 30", tmp_path, timeout=1.0)
    assert result.set_up_ahead and result.timed_out and result.exit_code is None
    assert 1.0 <= result.duration_s < 5 and time.monotonic() - started < 8


@pytest.mark.skipif(limits.mechanism() == "rlimit", reason="no cgroup can be made here: pids are not limited")
def test_it_runs_under_the_lease_limits(tmp_path: Path) -> None:
    box = LocalSandbox(make_task(tmp_path / "task"), tmp_path / "scratch", LocalOptions(pids_limit=16))
    command = "for i in $(seq 40); do sleep 2 & done 2>/dev/null; wait; echo done"
    try:
        box.exec_ahead(command, env=ENV)
        ready(box)
        result = run(box, command, tmp_path)
    finally:
        box.close()
    assert result.set_up_ahead
    assert "pids" in result.limits_hit, result


def test_the_worker_waits_until_every_attempt_waits_on_its_subject() -> None:
    idle = threading.Event()
    worker = AheadWorker(idle=idle.is_set)
    ran = threading.Event()
    request = AheadRequest("k", lambda: ran.set())  # type: ignore[arg-type, func-returns-value]
    worker.submit(request)
    time.sleep(0.2)
    assert not ran.is_set() and request.state == "pending"
    idle.set()
    assert ran.wait(5)


def test_a_request_taken_before_its_turn_is_never_prepared() -> None:
    worker = AheadWorker(idle=lambda: False)
    made: list[int] = []
    request = AheadRequest("k", lambda: made.append(1))  # type: ignore[arg-type, func-returns-value]
    worker.submit(request)
    assert request.take() is None
    worker._idle = lambda: True
    time.sleep(0.2)
    assert made == []


def test_all_waiting_follows_the_phases_of_open_attempts() -> None:
    assert progress.all_waiting()
    cell = Cell.__new__(Cell)
    entered = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with progress.attempt_scope(None, cell, 1):
            progress.phase("setup")
            entered.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(5)
    with progress.attempt_scope(None, cell, 1):
        progress.phase("agent")
        assert not progress.all_waiting()  # the other attempt is in its setup
    leave.set()
    thread.join()
    with progress.attempt_scope(None, cell, 1):
        progress.phase("agent")
        assert progress.all_waiting()
    assert progress.all_waiting()


def test_the_verdict_channel_set_up_ahead_is_the_verifications_alone(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """Set up ahead inside the verdict channel: it sees the tests and writes a reward that only the
    harness reads; a command of the subject's meanwhile sees neither, and what it writes at
    /logs/verifier is not what is read."""
    command = "cat /tests/t.txt; echo 0 > /logs/verifier/reward.txt"
    sandbox.exec_ahead(command, env=ENV, puts=["/tests"], verdict=True)
    ready(sandbox)
    subject = run(sandbox, "ls -A /tests 2>&1; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt", tmp_path)
    assert not subject.set_up_ahead and "No such file" in (tmp_path / "o").read_text()
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "t.txt").write_text("hidden until now\n")
    sandbox.open_verdict(tests, tmp_path)
    verifier = run(sandbox, command, tmp_path / "v")
    assert verifier.set_up_ahead and (tmp_path / "v" / "o").read_text() == "hidden until now\n"
    assert sandbox.get("/logs/verifier", tmp_path / "got")
    assert (tmp_path / "got" / "reward.txt").read_text() == "0\n"
    assert not (sandbox.files.logs / "verifier" / "reward.txt").exists(), "the channel is not the environment's"
    sandbox.close_verdict()
    after = run(sandbox, "ls -A /tests /logs/verifier 2>&1", tmp_path / "after")
    assert after.exit_code != 0 and "No such file" in (tmp_path / "after" / "o").read_text()


def test_a_removed_verdict_mount_point_is_never_used(sandbox: LocalSandbox, tmp_path: Path) -> None:
    """The subject removes /logs/verifier while the verifier waits set up: that detaches the private
    mount in the waiting sandbox, which would then write the lease's /logs/verifier. It is discarded."""
    command = "echo 0 > /logs/verifier/reward.txt"
    sandbox.exec_ahead(command, env=ENV, verdict=True)
    ready(sandbox)
    run(sandbox, "rm -rf /logs/verifier; mkdir /logs/verifier", tmp_path / "s")
    sandbox.open_verdict(None, tmp_path)
    verifier = run(sandbox, command, tmp_path / "v")
    assert not verifier.set_up_ahead and verifier.exit_code == 0
    assert sandbox.get("/logs/verifier", tmp_path / "got")
    assert (tmp_path / "got" / "reward.txt").read_text() == "0\n"
