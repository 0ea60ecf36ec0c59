"""A step's healthcheck polled in a real bubblewrap sandbox with Docker's semantics; and the
local sandbox facts multi-step tasks lean on (a removed upload dir, a replaced upload)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from pytest_maka.core.task import Healthcheck
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.local import LocalExecutor, LocalOptions, LocalSandbox
from pytest_maka.run.health import wait_healthy
from pytest_maka.testing import make_cell, make_task

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.needs("bwrap"),
]

ENV = {"PATH": "/usr/bin:/bin"}
#: Fails until it has been run ``$1`` times (a counter in the workdir), then succeeds.
NTH = "n=$(cat /app/count 2>/dev/null || echo 0); n=$((n+1)); echo $n > /app/count; [ $n -ge {} ]"


class Clock:
    """A fake clock the fake sleep advances: the poll's timing rules without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def lease(tmp_path: Path, uploads: dict[str, Path] | None = None) -> AbstractContextManager[LocalSandbox]:
    task = make_task(tmp_path / "task")
    request = LeaseRequest(
        cell=make_cell(task, tmp_path),
        attempt=1,
        attempt_dir=tmp_path / "attempt",
        scratch_dir=tmp_path / "scratch",
        uploads=uploads or {},
    )
    return LocalExecutor(LocalOptions(kill_grace_sec=0.5)).lease(request)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[LocalSandbox]:
    with lease(tmp_path) as box:
        yield box


def poll(sandbox: LocalSandbox, check: Healthcheck, tmp_path: Path, clock: Clock) -> str | None:
    return wait_healthy(sandbox, check, env=ENV, cwd="/app", out_dir=tmp_path, clock=clock, sleep=clock.sleep)


def test_healthy_once_a_probe_succeeds(sandbox: LocalSandbox, tmp_path: Path) -> None:
    clock = Clock()
    check = Healthcheck(command=NTH.format(3), interval_sec=2.0, retries=3)
    assert poll(sandbox, check, tmp_path, clock) is None
    assert sandbox.read_file("/app/count", 10) == b"3\n"
    assert clock.pauses == [2.0, 2.0]


def test_unhealthy_after_retries_consecutive_failures_naming_the_command(sandbox: LocalSandbox, tmp_path: Path) -> None:
    clock = Clock()
    check = Healthcheck(command="echo probing; exit 4", interval_sec=1.0, retries=2)
    assert poll(sandbox, check, tmp_path, clock) == (
        "the healthcheck 'echo probing; exit 4' failed 2 times in a row (2 probe(s), the last: exit code 4)"
    )
    assert (tmp_path / "healthcheck.stdout.txt").read_text() == "probing\n"


def test_failures_in_the_start_period_do_not_count(sandbox: LocalSandbox, tmp_path: Path) -> None:
    clock = Clock()
    check = Healthcheck(
        command=NTH.format(5), interval_sec=5.0, start_period_sec=3.0, start_interval_sec=1.0, retries=2
    )
    # Probes at t=0,1,2 fall in the start period (1 s apart); then 5 s apart, 2 failures allowed.
    assert poll(sandbox, check, tmp_path, clock) is None
    assert clock.pauses == [1.0, 1.0, 1.0, 5.0]


def test_a_probe_past_its_timeout_is_a_failure(sandbox: LocalSandbox, tmp_path: Path) -> None:
    clock = Clock()
    check = Healthcheck(command="sleep 30", timeout_sec=0.5, retries=1)
    assert poll(sandbox, check, tmp_path, clock) == (
        "the healthcheck 'sleep 30' failed 1 time in a row (1 probe(s), the last: timed out after 0.5 s)"
    )


def test_a_removed_upload_dir_does_not_break_the_next_command(sandbox: LocalSandbox, tmp_path: Path) -> None:
    src = tmp_path / "tests-src"
    src.mkdir()
    (src / "t.sh").write_text("x")
    sandbox.put(src, "/tests")
    sandbox.remove("/tests")  # between two steps: the last step's hidden tests leave
    out = tmp_path / "o"
    result = sandbox.exec("test ! -e /tests", env=ENV, timeout_sec=30, stdout_path=out, stderr_path=tmp_path / "e")
    assert result.exit_code == 0, (tmp_path / "e").read_text()
    sandbox.put(src, "/tests")
    result = sandbox.exec("cat /tests/t.sh", env=ENV, timeout_sec=30, stdout_path=out, stderr_path=tmp_path / "e")
    assert out.read_text() == "x"


def test_an_upload_the_harness_replaces_is_not_reported_as_changed(tmp_path: Path) -> None:
    first, second = tmp_path / "s1", tmp_path / "s2"
    for d, text in ((first, "one"), (second, "two")):
        d.mkdir()
        (d / "solve.sh").write_text(text)
    with lease(tmp_path, {"/solution": first}) as box:
        box.exec("true", env=ENV, timeout_sec=30, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e")
        box.put(second, "/solution")  # the next step's solution
        assert box.restore_protected(tmp_path / "r")["changed"] == []
        out, err = tmp_path / "o", tmp_path / "e"
        box.exec("echo x > /solution/solve.sh", env=ENV, timeout_sec=30, stdout_path=out, stderr_path=err)
        report = box.restore_protected(tmp_path / "r")
        assert report["changed"] == ["/solution/solve.sh"] and report["restored"] == ["/solution"]
        assert box.read_file("/solution/solve.sh", 10) == b"two", "put back as the harness last placed it"
