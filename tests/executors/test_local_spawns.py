"""How many programs a local sandbox's command costs: no PATH search for bwrap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_maka.executors.local import bwrap

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.needs("bwrap", "strace"),
]

SCRIPT = """
import sys
from pathlib import Path
from pytest_maka.core.task import Task
from pytest_maka.executors.local import LocalOptions, LocalSandbox
root = Path(sys.argv[1])
sandbox = LocalSandbox(Task(id="t", path=root, instruction="", digest=""), root / "scratch", LocalOptions())
try:
    result = sandbox.exec("true", env={}, timeout_sec=60, stdout_path=root / "out", stderr_path=root / "err")
finally:
    sandbox.close()
sys.exit(result.exit_code)
"""


def test_bwrap_is_named_by_absolute_path() -> None:
    prefix = bwrap.isolated_prefix(bwrap.host_layout(), Path("/nonexistent"), [], 1 << 20)
    assert os.path.isabs(prefix[0]) and os.access(prefix[0], os.X_OK) and os.path.basename(prefix[0]) == "bwrap"


def test_a_command_execs_bwrap_once_without_a_path_search(tmp_path: Path) -> None:
    """The gate's sh execs bwrap directly: every execve of bwrap in the trace succeeds."""
    trace = tmp_path / "trace"
    argv = ["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), sys.executable, "-c", SCRIPT, str(tmp_path)]
    subprocess.run(argv, check=True, timeout=120)
    lines = trace.read_text().splitlines()
    tries = [line for line in lines if 'bwrap", ["' in line and "execve(" in line]
    assert len(tries) == 1, "\n".join(tries)
    assert tries[0].rstrip().endswith("= 0") or "<unfinished ...>" in tries[0]
    failed = [line for line in lines if "execve(" in line and "ENOENT" in line and "bwrap" in line]
    assert not failed, failed
