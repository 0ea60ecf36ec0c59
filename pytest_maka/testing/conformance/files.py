"""Conformance: put/get/remove never follow planted links; the host stays untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from ...core.task import Task
from ...executors.base import Executor, Sandbox
from .base import SECRET_VALUE, ConformanceBase, _read_tree


class FileTests(ConformanceBase):
    """Conformance: put/get/remove never follow planted links; the host stays untouched."""

    # -- moving files and tampering ---------------------------------------------------------

    def test_put_overwrites_planted_tests(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        assert task.tests_dir is not None
        sandbox.put(task.tests_dir, "/tests")
        self.run(sandbox, "echo 'echo hacked' > /tests/test.sh; echo extra > /tests/planted.sh", tmp_path)
        sandbox.put(task.tests_dir, "/tests")
        run = self.run(sandbox, "cat /tests/test.sh; ls /tests", tmp_path)
        expected = (task.tests_dir / "test.sh").read_text()
        assert run.stdout == expected + "test.sh\n"

    def test_put_is_a_fresh_copy(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        source = tmp_path / "input.txt"
        source.write_text("v1\n")
        sandbox.put(source, f"{task.workdir}/input.txt")
        source.write_text("v2\n")
        self.run(sandbox, "echo changed-inside > input.txt", tmp_path)
        assert source.read_text() == "v2\n"
        sandbox.put(source, f"{task.workdir}/input.txt")
        assert self.run(sandbox, "cat input.txt", tmp_path).stdout == "v2\n"

    def test_put_does_not_follow_planted_symlinks(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        victim_dir, victim = self.plant_victim(tmp_path)
        self.run(sandbox, f"ln -s {victim} target; ln -s {victim_dir} dir", tmp_path)
        source = tmp_path / "fresh.txt"
        source.write_text("fresh\n")
        sandbox.put(source, f"{task.workdir}/target")
        sandbox.put(source, f"{task.workdir}/dir/file.txt")
        assert victim.read_text() == "host content\n"
        assert sorted(p.name for p in victim_dir.iterdir()) == ["file.txt"]
        assert self.run(sandbox, "cat target dir/file.txt", tmp_path).stdout == "fresh\nfresh\n"

    def test_get_copies_files_and_directories(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        self.run(
            sandbox, "echo r > /logs/verifier/reward.txt; mkdir -p /logs/agent/d; echo t > /logs/agent/d/t", tmp_path
        )
        assert self.read(sandbox, "/logs/verifier/reward.txt", tmp_path) == "r\n"
        assert sandbox.get("/logs/agent", tmp_path / "agent-logs")
        assert (tmp_path / "agent-logs" / "d" / "t").read_text() == "t\n"
        assert sandbox.get(f"{task.workdir}/sub", tmp_path / "sub-copy")
        assert (tmp_path / "sub-copy" / "nested.txt").read_text() == "nested\n"

    def test_get_absent_returns_false(self, sandbox: Sandbox, tmp_path: Path) -> None:
        assert sandbox.get("/logs/verifier/reward.txt", tmp_path / "none") is False
        assert not (tmp_path / "none").exists()

    def test_get_does_not_follow_planted_symlinks(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        secret_dir = tmp_path / "host-secrets"
        secret_dir.mkdir()
        (secret_dir / "key").write_text(SECRET_VALUE)
        self.run(
            sandbox,
            f"ln -s {secret_dir}/key leak; ln -s {secret_dir} leakdir; "
            f"ln -s {secret_dir}/key /logs/verifier/reward.txt",
            tmp_path,
        )
        for path in (
            f"{task.workdir}/leak",
            f"{task.workdir}/leakdir/key",
            "/logs/verifier/reward.txt",
            f"{task.workdir}/leakdir",
            task.workdir,
        ):
            dest = tmp_path / f"out-{next(self._counter)}"
            sandbox.get(path, dest)
            assert SECRET_VALUE not in _read_tree(dest), f"get({path}) followed a planted symlink"

    def test_remove(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        victim_dir = tmp_path / "victim"
        victim_dir.mkdir()
        (victim_dir / "file.txt").write_text("host content\n")
        self.run(
            sandbox,
            "echo 1 > /logs/verifier/reward.txt; mkdir -p d/e; echo x > d/e/f; chmod -R a-w d; "
            f"ln -s {victim_dir} vdir",
            tmp_path,
        )
        sandbox.remove("/logs/verifier/reward.txt")
        sandbox.remove(f"{task.workdir}/d")
        sandbox.remove(f"{task.workdir}/never-existed")
        sandbox.remove(f"{task.workdir}/vdir/file.txt")
        assert (victim_dir / "file.txt").read_text() == "host content\n", "remove followed a planted symlink"
        run = self.run(sandbox, "test -e /logs/verifier/reward.txt || test -e d || echo gone", tmp_path)
        assert run.stdout == "gone\n"
        assert sandbox.get("/logs/verifier/reward.txt", tmp_path / "r") is False

    def test_host_filesystem_not_writable(self, sandbox: Sandbox, tmp_path: Path) -> None:
        if not self.isolates_host_filesystem:
            pytest.skip("this executor does not isolate the host filesystem")
        outside = tmp_path / "outside"
        outside.mkdir()
        probes = [
            outside / "probe",
            Path("/etc/maka-conformance-probe"),
            Path("/usr/maka-conformance-probe"),
            Path("/root/maka-conformance-probe"),
            Path("/var/tmp/maka-conformance-probe"),
        ]
        command = "; ".join(f"echo x > {p} 2>/dev/null" for p in probes)
        self.run(sandbox, command + f"; mkdir -p {outside} && echo x > {outside}/probe", tmp_path)
        written = [str(p) for p in probes if p.exists()]
        for path in written:
            Path(path).unlink()
        assert not written, f"the command wrote to the host: {written}"

    def test_isolation_report(self, sandbox: Sandbox, executor: Executor) -> None:
        report = sandbox.isolation(agent_network=False, verifier_network=True)
        assert set(report["network"]) == {"agent", "verifier"}
        assert report["executor"]
        if executor.isolated:
            assert report["network"]["agent"] == "none"
