"""Workers that cannot see the controller's output directory: every attempt's files come back through Dask.

Each worker runs under a bubblewrap that lays an empty tmpfs over the controller's ``--maka-out``
directory, starts in a directory of its own and keeps its files (Dask's and its attempts')
in a local directory of its own. Whatever lands in the controller's output directory was
sent by a worker as bytes, under the spec's ``max_transfer_bytes``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..conftest import Cohort, needs_bwrap
from .conftest import StartCluster

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")

pytestmark = [pytest.mark.sandbox, needs_bwrap]

BIG = 20_000  # bytes the subject prints: its agent log is past the cap, every other file is far below it
CAP = 8192


def worker_pid(bwrap_pid: int) -> int:
    """The process bubblewrap runs (its only child), whose view of the filesystem is the worker's."""
    children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_attempt_files_travel_back_and_past_the_cap_are_listed(
    cohort: Cohort, start_cluster: StartCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("worker-home")
    local_dir = elsewhere / "dask"
    cohort.out.mkdir()
    hide_out = [shutil.which("bwrap") or "bwrap", "--dev-bind", "/", "/", "--tmpfs", str(cohort.out), "--"]
    cluster = start_cluster(wrap=hide_out, cwd=elsewhere, local_dir=local_dir)
    for i in range(4):
        cohort.task(f"t{i}")
    loud = f"yes x | head -c {BIG}; echo ok > /app/done.txt"
    cohort.write(
        subjects=[{"name": "loud", "kind": "command", "command": loud}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "local", "cluster": {"address": cluster.address, "max_transfer_bytes": CAP}},
    )
    result = cohort.run_subprocess(timeout=600)
    result.assert_outcomes(passed=4, failed=4)
    attempts = cohort.attempts()
    # every attempt came from a worker of this cluster; that cells spread over both workers is
    # test_dask.py's (with 8 quick cells the scheduler may give one worker all of them, as in test_shipping)
    assert len(attempts) == 8 and {a["worker"] for a in attempts} <= set(cluster.workers().values())
    for a in attempts:
        transfer, files = a["transfer"], a["artifacts"]
        assert (cohort.out / files["verifier_output"]).is_file(), "the verifier's output came back"
        assert transfer["cap_bytes"] == CAP and transfer["bytes"] <= CAP
        agent_log = Path(files["agent_log"]).relative_to(files["dir"]).as_posix()
        if a["subject"] == "loud":
            assert not (cohort.out / files["agent_log"]).exists(), "a file past the cap is not sent"
            assert transfer["dropped_count"] == 1 and transfer["dropped"][0].startswith(f"{agent_log} (")
        else:
            assert (cohort.out / files["agent_log"]).is_file() and "dropped" not in transfer
    assert {r["status"] for r in cohort.results().values()} == {"agent_success", "agent_failure"}
    for name in ("w1", "w2"):  # what the worker sees at the controller's output directory: nothing
        seen = Path(f"/proc/{worker_pid(cluster.procs[name].pid)}/root{cohort.out}")
        assert list(seen.iterdir()) == [] and any(cohort.out.iterdir())
    left = [p for p in local_dir.rglob("attempt-*")]
    assert not left, f"a worker kept attempt files after sending them: {left}"
    cluster.stop()
    kept = [p for p in local_dir.rglob("*") if p.is_file() and "maka-" in p.as_posix()]
    assert not kept, f"the workers' cohort sessions are removed when they stop: {kept}\n" + "\n".join(
        cluster.log(name)[-2000:] for name in ("w1", "w2")
    )
