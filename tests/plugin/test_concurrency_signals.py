"""--maka-concurrency with N cells in flight: Ctrl-C, and an xdist worker killed mid-run."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def unique_sleep() -> str:
    """A sleep duration no other process on the machine uses (found in /proc to see what is left)."""
    return f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"


def sleepers(token: str) -> list[int]:
    """Pids of live processes running ``sleep TOKEN`` (the subjects' own processes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argv[:2] == [b"sleep", token.encode()] and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_for(predicate: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting for the cells to be in flight"
        time.sleep(0.05)


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_ctrl_c_aborts_every_cell_in_flight_and_leaves_nothing(cohort: Cohort, xdist: list[str]) -> None:
    token = unique_sleep()
    for i in range(4):
        cohort.task(f"t{i}", agent_timeout=300)
    cohort.write(subjects=[{"name": "sleeper", "kind": "command", "command": f"sleep {token}"}])
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-p", "no:cacheprovider", "--maka-concurrency", "4", *xdist)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in a terminal signals the whole foreground group
    )
    try:
        wait_for(lambda: len(sleepers(token)) == 4)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = out.decode() + err.decode()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert not sleepers(token), "every subject process was killed"
    assert (cohort.out / "attempts.jsonl").exists(), output
    attempts = cohort.attempts()
    assert sorted(a["cell_id"] for a in attempts) == [f"t{i}[sleeper-r0]" for i in range(4)]
    assert {a["status"] for a in attempts} == {"agent_aborted"}, "every running cell ended agent_aborted"
    assert not list(Path(cohort.root).glob("**/a1-*")), "no scratch directory is left"


KILL_CONFTEST = """
import os, signal, threading, time
from pathlib import Path

MARK = Path(__file__).parent / "killed"
TOKEN = b"@TOKEN@"
started = threading.Lock()

def _ancestors(pid):
    chain = []
    for _ in range(8):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        chain.append(pid)
    return chain

def _mine():
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\\0")[:2] == [b"sleep", TOKEN]:
                count += os.getpid() in _ancestors(int(entry.name))
        except OSError:
            pass
    return count

def _watch():
    while not MARK.exists():
        if _mine() >= 4:
            try:
                with open(MARK, "x") as fh:
                    fh.write(os.environ["PYTEST_XDIST_WORKER"])
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)  # this worker dies with four subjects running
        time.sleep(0.05)

def pytest_maka_phase(cell, phase):
    if os.environ.get("PYTEST_XDIST_WORKER") and not MARK.exists() and started.acquire(blocking=False):
        threading.Thread(target=_watch, daemon=True).start()
"""


def test_killed_worker_every_cell_ends_with_exactly_one_record(cohort: Cohort) -> None:
    token = unique_sleep()
    for i in range(4):
        cohort.task(f"t{i}", agent_timeout=4)
    sleeper = {"name": "sleeper", "kind": "command", "command": f"sleep {token}"}
    cohort.write(subjects=[sleeper], repetitions=2, retries={"infra": 0})
    cohort.pytester.makeconftest(KILL_CONFTEST.replace("@TOKEN@", token))
    result = cohort.run_subprocess("-n", "2", "--maka-concurrency", "4", timeout=300)
    assert (cohort.root / "killed").exists(), "a worker was killed with four cells in flight"
    assert not sleepers(token), "the killed worker's subjects died with it"
    results = cohort.results()
    assert len(results) == 8, "every cell has a result"
    statuses = Counter(r["status"] for r in results.values())
    assert statuses == {"agent_incomplete": 7, "infra_failure": 1}, statuses
    lost = next(r for r in results.values() if r["status"] == "infra_failure")
    assert "crashed" in lost["error"]["message"]
    attempts = cohort.attempts()
    assert Counter(a["cell_id"] for a in attempts) == Counter(list(results)), "no cell ran twice, none was lost"
    assert result.ret == 7
