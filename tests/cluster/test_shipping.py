"""Workers that do not have the spec and the task directories: the controller ships them.

Each worker runs under a bubblewrap that lays an empty tmpfs over the controller's project
directory (spec, tasks, output), from a directory of its own: the only way it can run a
cell is from the bundle the controller scattered to the cluster. The bundle is unpacked
once per worker, not once per cell, and removed when the worker ends.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from pytest_maka.cluster import ship, untar

from ..conftest import Cohort, needs_bwrap
from .conftest import StartCluster
from .test_no_shared_output import worker_pid

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'pytest-maka[dask]'")


@pytest.mark.sandbox
@needs_bwrap
def test_workers_without_the_spec_run_from_the_shipped_copy(
    cohort: Cohort, start_cluster: StartCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("worker-home")
    local_dir = elsewhere / "dask"
    hide_project = [shutil.which("bwrap") or "bwrap", "--dev-bind", "/", "/", "--tmpfs", str(cohort.root), "--"]
    cluster = start_cluster(wrap=hide_project, cwd=elsewhere, local_dir=local_dir)
    for i in range(4):
        cohort.task(
            f"t{i}",
            solve="echo ok > /app/done.txt",
            test="test -f /app/done.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
        )
    cohort.write(executor={"kind": "local", "cluster": cluster.address})
    for name in ("w1", "w2"):  # the workers cannot read the spec or the tasks where the controller has them
        root = Path(f"/proc/{worker_pid(cluster.procs[name].pid)}/root")
        assert not (root / cohort.spec.relative_to("/")).exists()
        assert not (root / cohort.tasks.relative_to("/")).exists()
    result = cohort.run_subprocess(timeout=600)
    result.assert_outcomes(passed=4, failed=4)  # oracle solves with the shipped solution, nop does not
    attempts = cohort.attempts()
    assert len(attempts) == 8 and {a["worker"] for a in attempts} <= set(cluster.workers().values())
    assert {r["subject"]: r["status"] for r in cohort.results().values()} == {
        "oracle": "agent_success",
        "nop": "agent_failure",
    }
    copies = sorted(local_dir.rglob(f"{ship.SHIP_DIR}/*"))
    workers_used = {a["worker"] for a in attempts}
    assert len(copies) == len(workers_used), f"one unpacked copy per worker, not per cell: {copies}"
    for copy in copies:
        assert (copy / cohort.spec.relative_to("/")).is_file()
        assert not list(copy.rglob("out")), "the controller's output directory is not shipped"
    cluster.stop()
    assert not list(local_dir.rglob(f"{ship.SHIP_DIR}/*")), "a worker removes its copies when it ends"


def test_bundle_key_follows_content_and_unpacks_once(tmp_path: Path) -> None:
    spec = tmp_path / "proj" / "cohort.yaml"
    task = tmp_path / "proj" / "tasks" / "t0"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text("exit 0\n")
    (task / ".git").mkdir()
    (task / ".git" / "HEAD").write_text("ref\n")
    spec.write_text("name: t\n")
    bundle = ship.pack(spec, [tmp_path / "proj" / "tasks"], ["d1", "d2"])
    assert bundle.key == ship.pack(spec, [tmp_path / "proj" / "tasks"], ["d2", "d1"]).key
    assert bundle.key != ship.pack(spec, [tmp_path / "proj" / "tasks"], ["d1", "d3"]).key
    with tarfile.open(fileobj=io.BytesIO(bundle.data), mode="r:gz") as tar:
        names = tar.getnames()
    assert spec.relative_to("/").as_posix() in names
    assert (task / "tests" / "test.sh").relative_to("/").as_posix() in names
    assert not [n for n in names if ".git" in n], "what task digests leave out is not shipped"
    local = tmp_path / "worker"
    try:
        first = ship.local_spec(str(local), bundle.key, bundle.spec, bundle.data)
        assert Path(first).read_text() == "name: t\n"
        assert Path(first).parent.joinpath("tasks", "t0", "tests", "test.sh").is_file()
        assert ship.local_spec(str(local), bundle.key, bundle.spec, b"not a tar") == first, "unpacked once per key"
    finally:
        ship.remove_all()
    assert not list((local / ship.SHIP_DIR).iterdir())


def test_a_bundle_cannot_write_outside_its_root(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    try:
        with pytest.raises(untar.UnsafeMember):
            ship.local_spec(str(tmp_path / "w"), "k", "/x/cohort.yaml", buffer.getvalue())
    finally:
        ship.remove_all()
    assert not list(tmp_path.rglob("escaped.txt"))


def test_a_bundle_past_the_cap_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "cohort.yaml"
    spec.write_text("name: t\n")
    task = tmp_path / "tasks" / "big"
    task.mkdir(parents=True)
    (task / "data.bin").write_bytes(os.urandom(64 * 1024))  # random: gzip cannot shrink it below the cap
    assert ship.pack(spec, [tmp_path / "tasks"], ["d"], limit=128 * 1024).data
    with pytest.raises(ship.BundleTooLarge) as refused:
        ship.pack(spec, [tmp_path / "tasks"], ["d"], limit=32 * 1024)
    message = str(refused.value)
    assert "\n" not in message and "pack to 0.1 MiB, over the" in message and "a cluster ships" in message, message
