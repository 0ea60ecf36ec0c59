"""The harness as a container's main process (PID 1 of its PID namespace): no zombie is left,
exit codes and signals pass through (pytest_maka.pid1). Run for real with ``unshare --pid``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from ..conftest import Cohort, read_jsonl

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="a PID namespace of its own needs root"
    ),
]

REPO = Path(__file__).resolve().parents[2]
#: Loaded into the run with -p: at its end, waits until no process of the namespace is a zombie
#: (an orphan's zombie is reaped as soon as its SIGCHLD is handled) and writes what it saw.
PROBE = """
import json, os, time

def zombies():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state == "Z":
            found.append({"pid": int(pid), "name": stat[stat.index("(") + 1 : stat.rindex(")")], "ppid": int(ppid)})
    return found

def pytest_unconfigure(config):
    deadline = time.monotonic() + 60
    while zombies() and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({"pid": os.getpid(), "zombies": zombies()}, out)
"""


def as_pid1(*args: str) -> list[str]:
    return [
        "unshare",
        "--pid",
        "--fork",
        "--mount-proc",
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *args,
    ]


def test_the_example_cohort_as_pid_1_leaves_no_zombie(tmp_path: Path) -> None:
    (tmp_path / "zombie_probe.py").write_text(textwrap.dedent(PROBE))
    out, probe_out = tmp_path / "out", tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PROBE_OUT": str(probe_out)}
    argv = as_pid1("--maka-spec=cohort.yaml", f"--maka-out={out}", "-p", "zombie_probe", "-q")
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(read_jsonl(out / "results.jsonl")) == 15
    seen = json.loads(probe_out.read_text())
    assert seen["pid"] == 2, "the harness runs as PID 2 under the init that stays PID 1"
    assert seen["zombies"] == [], seen


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _running(text: str) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 2), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_signals_sent_to_pid_1_reach_the_harness(cohort: Cohort, sig: signal.Signals, code: int) -> None:
    """``docker stop`` (SIGTERM) and ``docker kill -s INT`` go to PID 1: the harness gets them,
    and its exit code comes back."""
    mark = f"{61 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a sleep this long is this test's
    cohort.task("t", agent_timeout=300)
    cohort.write(subjects=[{"name": "slow", "kind": "command", "command": f"sleep {mark}"}])
    argv = as_pid1(*cohort.args())
    proc = subprocess.Popen(argv, cwd=cohort.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _running(f"sleep {mark}") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(f"sleep {mark}"), "the cell started"
        (init,) = _children(proc.pid)  # unshare's child: PID 1 of the new namespace
        os.kill(init, sig)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, output[-3000:]
    if sig == signal.SIGINT:
        assert cohort.status() == {"t[slow-r0]": "agent_aborted"}, output[-3000:]
    assert not _running(f"sleep {mark}"), "nothing of the cell is left"
