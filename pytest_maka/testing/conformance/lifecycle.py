"""Conformance: fresh environments, leases, workspace, logs, uploads."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from ...core.task import Task
from ...executors.base import Executor, Sandbox
from .base import WORKSPACE_FILES, ConformanceBase


class LifecycleTests(ConformanceBase):
    """Conformance: fresh environments, leases, workspace, logs, uploads."""

    # -- lifecycle ------------------------------------------------------------------------

    def test_workspace_initial_files_at_workdir(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        run = self.run(sandbox, "pwd; cat hello.txt sub/nested.txt", tmp_path)
        assert run.result.exit_code == 0, run.stderr
        assert run.stdout == f"{task.workdir}\nhello from the task\nnested\n"

    def test_exit_code_and_separate_streams(self, sandbox: Sandbox, tmp_path: Path) -> None:
        run = self.run(sandbox, "echo out; echo err >&2; exit 3", tmp_path)
        assert (run.result.exit_code, run.result.timed_out) == (3, False)
        assert (run.stdout, run.stderr) == ("out\n", "err\n")

    def test_cwd(self, sandbox: Sandbox, tmp_path: Path) -> None:
        assert self.run(sandbox, "pwd", tmp_path, cwd="/logs").stdout == "/logs\n"

    def test_logs_layout(self, sandbox: Sandbox, tmp_path: Path) -> None:
        run = self.run(sandbox, "cd /logs && ls -d agent verifier artifacts", tmp_path)
        assert sorted(run.stdout.split()) == ["agent", "artifacts", "verifier"]

    def test_fresh_environment_per_lease(
        self, open_lease: Callable[..., AbstractContextManager[Sandbox]], task: Task, tmp_path: Path
    ) -> None:
        with open_lease() as first:
            tmp_probe = "echo x > /tmp/x; " if self.isolates_host_filesystem else ""
            run = self.run(
                first,
                f"echo x > new.txt; echo changed > hello.txt; echo x > /logs/agent/x; {tmp_probe}rm sub/nested.txt",
                tmp_path,
            )
            assert run.result.exit_code == 0, run.stderr
        with open_lease() as second:
            leftovers = "new.txt /logs/agent/x" + (" /tmp/x" if self.isolates_host_filesystem else "")
            probe = f"for f in {leftovers}; do test -e $f && echo LEFT $f; done; cat hello.txt sub/nested.txt"
            run = self.run(second, probe, tmp_path)
            assert run.stdout == "hello from the task\nnested\n"
        assert task.workspace_dir is not None
        assert (task.workspace_dir / "hello.txt").read_text() == WORKSPACE_FILES["hello.txt"]

    def test_lease_cleans_up_on_interrupt(
        self,
        open_lease: Callable[..., AbstractContextManager[Sandbox]],
        executor: Executor,
        task: Task,
        tmp_path: Path,
    ) -> None:
        request = self.request_for(task, tmp_path, {})
        with pytest.raises(KeyboardInterrupt), executor.lease(request) as sandbox:
            self.run(
                sandbox, "mkdir -p ro/deep && echo x > ro/deep/f && chmod -R a-w ro && chmod a-w /logs/agent", tmp_path
            )
            raise KeyboardInterrupt
        scratch = request.scratch_dir
        assert not scratch.exists() or not any(scratch.iterdir()), "the lease left scratch files"

    def test_uploads_present_at_start(
        self, open_lease: Callable[..., AbstractContextManager[Sandbox]], tmp_path: Path
    ) -> None:
        tool = tmp_path / "tool"
        (tool / "bin").mkdir(parents=True)
        (tool / "bin" / "hello").write_text("#!/bin/sh\necho uploaded tool\n")
        (tool / "bin" / "hello").chmod(0o755)
        with open_lease(uploads={"/maka-tool": tool}) as sandbox:
            assert self.run(sandbox, "/maka-tool/bin/hello", tmp_path).stdout == "uploaded tool\n"

    def test_workspace_snapshot_and_baseline(self, sandbox: Sandbox, tmp_path: Path) -> None:
        self.run(sandbox, "echo new > added.txt", tmp_path)
        snapshot = sandbox.workspace_snapshot(tmp_path / "snapshot")
        assert (snapshot / "added.txt").read_text() == "new\n"
        baseline = sandbox.baseline_workspace()
        if baseline is not None:
            assert (baseline / "hello.txt").read_text() == WORKSPACE_FILES["hello.txt"]
            assert not (baseline / "added.txt").exists()
