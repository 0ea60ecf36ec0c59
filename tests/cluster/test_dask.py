"""--maka-cluster: a real Dask scheduler and two workers, separate processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from ..conftest import Cohort, needs_bwrap
from ..plugin.test_concurrency_signals import sleepers, unique_sleep
from .conftest import AGENTS_CONFTEST, Cluster, kill_once_started

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def wait_for_subjects(token: str, count: int, controller: subprocess.Popen[bytes]) -> None:
    """Until ``count`` subjects run ``sleep TOKEN`` (bounded; fails if the controller ends first)."""
    deadline = time.monotonic() + 300
    while len(sleepers(token)) < count:
        assert time.monotonic() < deadline and controller.poll() is None, f"{count} subjects never ran at once"
        time.sleep(0.05)


def test_cells_spread_over_both_workers_and_the_controller_records_them(cohort: Cohort, cluster: Cluster) -> None:
    for i in range(8):
        cohort.task(f"t{i}", solve="sleep 1; echo ok > /app/done.txt\n")
    subjects = [{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}]
    cohort.write(subjects=subjects, executor={"kind": "local", "cluster": cluster.address})  # the spec names it
    phases = cohort.root / "phases.txt"
    cohort.pytester.makeconftest(
        f"""
        import threading

        lock, where = threading.Lock(), {{}}

        def pytest_maka_configure(config, cohort):
            where["side"] = "worker" if config is None else "controller"  # no pytest on a Dask worker

        def pytest_maka_phase(cell, phase, attempt):
            with lock, open({str(phases)!r}, "a") as fh:
                fh.write(f"{{where['side']}}\\t{{cell.id}}\\t{{attempt}}\\t{{phase}}\\n")
        """
    )
    result = cohort.run_subprocess(timeout=600)
    result.assert_outcomes(passed=8, failed=8)
    seen = [tuple(line.split("\t")) for line in phases.read_text().splitlines()]
    cells = set(cohort.status())
    for side in ("controller", "worker"):  # the workers load the project's conftest.py too
        for phase in ("queued on the cluster", "agent", "verify"):
            if side == "worker" and phase == "queued on the cluster":
                continue
            assert {c for s, c, a, p in seen if s == side and p == phase} == cells, (side, phase)
    attempts = cohort.attempts()
    assert len(attempts) == 16, "each cell ran once"
    assert {a["worker"] for a in attempts} == set(cluster.workers().values()), "both workers ran cells"
    for a in attempts:  # the controller received every attempt's artifacts
        assert (cohort.out / a["artifacts"]["agent_log"]).is_file()
        assert (cohort.out / a["artifacts"]["verifier_output"]).is_file()
    assert sorted(set(cohort.status().values())) == ["agent_failure", "agent_success"]


def test_killed_worker_its_attempts_are_recorded_and_replaced(cohort: Cohort, cluster: Cluster) -> None:
    token = unique_sleep()
    for i in range(8):
        cohort.task(f"t{i}", agent_timeout=20, verifier_timeout=120)  # load must not time the verdict out
    cohort.write(subjects=[{"name": "sleeper", "kind": "command", "command": f"sleep {token}"}], retries={"infra": 1})
    victim = cluster.procs["w1"]
    victim_address = cluster.workers()["w1"]
    agents = cohort.root / "agents.txt"
    cohort.pytester.makeconftest(AGENTS_CONFTEST.format(agents=str(agents)))
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("--maka-cluster", cluster.address, "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
    )
    try:
        kill_once_started(proc, victim, agents, 4, sleeping=token)  # the victim runs four subjects
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    results = cohort.results()
    assert len(results) == 8, out.decode()[-3000:] + err.decode()[-2000:]
    assert Counter(r["status"] for r in results.values()) == {"agent_incomplete": 8}, "every cell got a final record"
    attempts = cohort.attempts()
    lost = [a for a in attempts if a["status"] == "infra_failure"]
    assert len(lost) == 4, "the killed worker's four attempts are recorded, none lost"
    assert all(victim_address in a["error"]["message"] for a in lost), "each names the worker"
    assert Counter(a["cell_id"] for a in attempts if a["status"] != "infra_failure") == Counter(list(results)), (
        "exactly one final attempt per cell"
    )
    assert all(results[a["cell_id"]]["attempt_count"] == 2 for a in lost)
    assert not sleepers(token), "nothing is left behind"


def test_ctrl_c_aborts_the_cells_running_on_the_cluster(cohort: Cohort, cluster: Cluster) -> None:
    token = unique_sleep()
    for i in range(4):
        cohort.task(f"t{i}", agent_timeout=300)
    cohort.write(subjects=[{"name": "sleeper", "kind": "command", "command": f"sleep {token}"}])
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("--maka-cluster", cluster.address, "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_subjects(token, 4, proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()[-3000:] + err.decode()[-2000:]
    attempts = cohort.attempts()
    assert sorted(a["cell_id"] for a in attempts) == [f"t{i}[sleeper-r0]" for i in range(4)]
    assert {a["status"] for a in attempts} == {"agent_aborted"}
    deadline = time.monotonic() + 60  # the workers learn of the cancel through the scheduler
    while sleepers(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sleepers(token), "the workers stopped the cancelled attempts: nothing is left running"
