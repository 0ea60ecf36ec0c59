"""A real Dask cluster for the tests: ``dask scheduler`` and workers, separate processes on 127.0.0.1.

One worker is started with ``maka worker`` (pytest-maka's command: cells resource, threads,
preload), the other with the documented ``dask worker`` flags, so both ways in are used by
every cluster test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:
    import distributed
except ImportError:  # the tests skip (each module imports it or skips)
    distributed = None

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    address: str
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def workers(self) -> dict[str, str]:
        """Worker name -> address, as the scheduler sees them."""
        with distributed.Client(self.address, timeout=30) as client:
            return {w["name"]: addr for addr, w in client.scheduler_info()["workers"].items()}

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM the workers, then the scheduler (a worker closes cleanly while it answers),
        waiting each time until the process group is empty: a wrapper such as bwrap may end
        before the worker it runs has finished closing. SIGKILL what is left after 60 s."""
        workers = [p for name, p in self.procs.items() if name != "scheduler"]
        for group in (workers, [p for name, p in self.procs.items() if name == "scheduler"]):
            for proc in group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            for proc in group:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(deadline - time.monotonic(), 0.1))
                while _group_alive(proc.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count: nobody may reap them)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _start(argv: Sequence[str], log: Path, cwd: Path | None, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv), stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd, env=env
    )


def worker_argv(name: str, address: str, cells: int, local_dir: Path | None) -> list[str]:
    """w1 through ``maka worker``, the others through ``dask worker`` with the documented flags."""
    if name == "w1":
        argv = [str(BIN / "maka"), "worker", address, "--cells", str(cells), "--host", "127.0.0.1", "--name", name]
        return argv + (["--local-directory", str(local_dir)] if local_dir else [])
    argv = [str(BIN / "dask"), "worker", address, "--host", "127.0.0.1", "--name", name, "--nthreads", str(cells)]
    argv += ["--resources", f"cells={cells}", "--no-nanny", "--no-dashboard"]
    return argv + (["--local-directory", str(local_dir)] if local_dir else [])


StartCluster = Callable[..., Cluster]

#: A conftest.py for a cluster cohort: each worker's session appends its pid to AGENTS when a
#: subject starts (the workers load the project's conftest.py, the controller does too).
AGENTS_CONFTEST = """
import os

side = {{}}

def pytest_maka_configure(config, cohort):
    side["controller"] = config is not None  # a Dask worker runs no pytest: config is None there

def pytest_maka_phase(cell, phase):
    if not side["controller"] and phase == "agent":
        with open({agents!r}, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
"""


def started_on(agents: Path, pid: int) -> int:
    """How many subjects the worker process ``pid`` has started (as AGENTS_CONFTEST records)."""
    return agents.read_text().split().count(str(pid)) if agents.exists() else 0


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid == ancestor:
            return True
    return False


def kill_once_started(
    proc: subprocess.Popen[bytes], victim: subprocess.Popen[bytes], agents: Path, n: int, sleeping: str | None = None
) -> None:
    """SIGKILL ``victim`` (and reap it, as its parent would) once it runs ``n`` subjects (with
    ``sleeping``: once ``n`` processes ``sleep SLEEPING`` run below it, i.e. its sandboxes are up)."""
    from ..plugin.test_concurrency_signals import sleepers

    def below() -> int:
        return sum(_descends_from(p, victim.pid) for p in sleepers(sleeping)) if sleeping else n

    deadline = time.monotonic() + 600
    while started_on(agents, victim.pid) < n or below() < n:
        assert time.monotonic() < deadline and proc.poll() is None, f"the worker never ran {n} subjects"
        time.sleep(0.1)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()  # an unreaped zombie would still look like a live owner of its containers


@pytest.fixture
def start_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartCluster]:
    """Start a scheduler and workers; ``wrap`` prefixes each worker's command (e.g. a bwrap
    that hides the controller's files), ``cwd``/``env``/``local_dir`` place the workers."""
    if distributed is None:
        pytest.skip("Dask is not installed: pip install 'pytest-maka[dask]'")
    made: list[Cluster] = []

    def start(
        workers: Sequence[str] = ("w1", "w2"),
        cells: int = 4,
        wrap: Sequence[str] = (),
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        local_dir: Path | None = None,
    ) -> Cluster:
        logs = tmp_path_factory.mktemp("cluster-logs")
        port = free_port()
        c = Cluster(f"tcp://127.0.0.1:{port}", logs)
        made.append(c)
        scheduler = [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
        c.procs["scheduler"] = _start(scheduler, logs / "scheduler.log", None, None)
        for name in workers:
            argv = [*wrap, *worker_argv(name, c.address, cells, local_dir)]
            c.procs[name] = _start(argv, logs / f"{name}.log", cwd, env)
        with distributed.Client(c.address, timeout=60) as client:  # the scheduler answers
            if workers:
                client.wait_for_workers(len(workers), timeout=180)
        return c

    yield start
    for c in made:
        c.stop()


@pytest.fixture
def cluster(start_cluster: StartCluster) -> Cluster:
    """``dask scheduler`` and two workers of four cells each, all on loopback."""
    return start_cluster()
