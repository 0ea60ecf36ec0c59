"""The executor conformance suite: lifecycle, isolation and tamper properties, against a real executor.

Subclass ``ExecutorConformance`` in a test module (name the subclass ``Test...``) and
provide an ``executor`` fixture. Override ``make_task`` when the executor needs more from a
task (e.g. a ``docker_image``), and the class attributes below to declare what the executor
does not offer. Commands are POSIX ``sh``; the network probes also need ``python3`` inside.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from ..core.cell import Cell
from ..core.spec import SubjectSpec
from ..core.task import Task, digest_tree
from ..executors.base import ExecResult, Executor, LeaseRequest, Sandbox
from .servers import tcp_server

WORKSPACE_FILES = {"hello.txt": "hello from the task\n", "sub/nested.txt": "nested\n"}
SECRET_NAME = "MAKA_TEST_SECRET"
SECRET_VALUE = "maka-host-secret-value-7f3a"
TOKEN = b"maka-conformance-token"


class _NoOptions(BaseModel):
    pass


def make_task(root: Path, **overrides: Any) -> Task:
    """A minimal task in ``root``: two workspace files and a tests directory."""
    workspace = root / "environment" / "workspace"
    for rel, text in WORKSPACE_FILES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    tests = root / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test.sh").write_text("#!/bin/sh\necho reward 1 > /logs/verifier/reward.txt\n")
    fields: dict[str, Any] = {
        "id": "conformance-task",
        "path": root,
        "instruction": "conformance",
        "digest": digest_tree(root),
        "environment_dir": root / "environment",
        "workspace_dir": workspace,
        "tests_dir": tests,
    }
    fields.update(overrides)
    return Task(**fields)


def make_cell(task: Task, root: Path) -> Cell:
    """A cell of ``task`` with a placeholder subject."""
    subject = SubjectSpec(
        name="conformance", kind="nop", options=_NoOptions(), declared_in=root / "cohort.yaml", digest="0" * 64
    )
    return Cell(task=task, subject=subject, repetition=1)


@dataclass(frozen=True)
class Run:
    """One exec and what it printed."""

    result: ExecResult
    stdout: str
    stderr: str
    wall_s: float


class ExecutorConformance:
    """Lifecycle, isolation and tamper tests every executor must pass."""

    #: network=True reaches a server on the host's 127.0.0.1 (host networking).
    supports_host_network: ClassVar[bool] = True
    #: network=False really cuts the network (False only for executors without isolation).
    isolates_network: ClassVar[bool] = True
    #: The executor keeps commands from writing to the host filesystem.
    isolates_host_filesystem: ClassVar[bool] = True
    #: The executor stops a setsid'd daemon and background jobs (False: those tests are skipped,
    #: since the probes they start would outlive the test).
    kills_whole_tree: ClassVar[bool] = True
    #: Generous bound for stopping a timed-out command, on top of timeout and grace.
    stop_slack_sec: ClassVar[float] = 20.0
    #: PATH given to every command.
    path_env: ClassVar[str] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    _counter = itertools.count()

    # -- fixtures and helpers subclasses may override -------------------------------------

    @pytest.fixture
    def executor(self) -> Executor:
        """Subclasses return a ready executor (and skip when it cannot run here)."""
        raise NotImplementedError("subclass ExecutorConformance and provide an `executor` fixture")

    def make_task(self, root: Path) -> Task:
        """The task every test leases; override to add what the executor needs."""
        return make_task(root)

    @pytest.fixture
    def task(self, tmp_path: Path) -> Task:
        return self.make_task(tmp_path / "task")

    @pytest.fixture
    def open_lease(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> Callable[..., AbstractContextManager[Sandbox]]:
        """A factory: ``open_lease(uploads={...})`` leases a fresh sandbox for ``task``."""
        executor.prepare([task])

        def _open(uploads: Mapping[str, Path] | None = None) -> AbstractContextManager[Sandbox]:
            return executor.lease(self.request_for(task, tmp_path, uploads or {}))

        return _open

    def request_for(self, task: Task, tmp_path: Path, uploads: Mapping[str, Path]) -> LeaseRequest:
        n = next(self._counter)
        return LeaseRequest(
            cell=make_cell(task, tmp_path),
            attempt=1,
            attempt_dir=tmp_path / f"attempt-{n}",
            scratch_dir=tmp_path / f"scratch-{n}",
            uploads=dict(uploads),
        )

    @pytest.fixture
    def sandbox(self, open_lease: Callable[..., AbstractContextManager[Sandbox]]) -> Iterator[Sandbox]:
        with open_lease() as sandbox:
            yield sandbox

    @pytest.fixture
    def host_server(self) -> Iterator[int]:
        """A TCP server on the host's 127.0.0.1 that greets every client with TOKEN."""
        with tcp_server(greeting=TOKEN + b"\n") as server:
            yield server.port

    def run(
        self,
        sandbox: Sandbox,
        command: str,
        tmp_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        timeout_sec: float | None = 60,
        **kwargs: Any,
    ) -> Run:
        """Exec ``command`` with a plain PATH and return what it printed."""
        n = next(self._counter)
        out, err = tmp_path / f"out-{n}.txt", tmp_path / f"err-{n}.txt"
        started = time.monotonic()
        result = sandbox.exec(
            command,
            env=dict(env) if env is not None else {"PATH": self.path_env},
            timeout_sec=timeout_sec,
            stdout_path=out,
            stderr_path=err,
            **kwargs,
        )
        wall = time.monotonic() - started
        return Run(result, out.read_text(errors="replace"), err.read_text(errors="replace"), wall)

    def read(self, sandbox: Sandbox, path: str, tmp_path: Path) -> str | None:
        """The text at ``path`` in the sandbox, via ``get`` (None when absent)."""
        dest = tmp_path / f"got-{next(self._counter)}"
        return dest.read_text() if sandbox.get(path, dest) else None

    def assert_stops_changing(self, sandbox: Sandbox, path: str, tmp_path: Path) -> None:
        first = self.read(sandbox, path, tmp_path)
        assert first is not None, f"the probe never wrote {path}"
        time.sleep(0.6)
        assert self.read(sandbox, path, tmp_path) == first, f"a process still rewrites {path}"

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

    # -- environment and network ------------------------------------------------------------

    def test_env_contains_only_what_was_passed(
        self, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
        env = {"PATH": self.path_env, "MAKA_GIVEN": "a value with spaces = and equals"}
        run = self.run(sandbox, "env", tmp_path, env=env)
        assert SECRET_VALUE not in run.stdout and SECRET_NAME not in run.stdout
        seen = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        assert seen["MAKA_GIVEN"] == env["MAKA_GIVEN"]
        shell_or_runtime = {"PWD", "OLDPWD", "SHLVL", "_", "HOME", "HOSTNAME", "PATH", "TERM"}
        leaked = {k for k in seen if k in os.environ and k not in env and k not in shell_or_runtime}
        assert not leaked, f"host variables reached the command: {sorted(leaked)}"

    def _probe(self, port: int) -> str:
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    s=socket.create_connection(('127.0.0.1',{port}),timeout=3)\n"
            "    print(s.recv(100).decode().strip())\n"
            "except OSError as e:\n"
            "    print('unreachable', e); sys.exit(1)\n"
        )
        return f"python3 -c \"$(cat <<'EOF'\n{code}EOF\n)\""

    def test_network_off_cannot_reach_host_loopback(self, sandbox: Sandbox, tmp_path: Path, host_server: int) -> None:
        if not self.isolates_network:
            pytest.skip("this executor does not isolate the network")
        run = self.run(sandbox, self._probe(host_server), tmp_path, network=False)
        assert TOKEN.decode() not in run.stdout
        assert run.result.exit_code == 1, f"the probe did not run: {run.stdout} {run.stderr}"

    def test_network_on_reaches_host_loopback(self, sandbox: Sandbox, tmp_path: Path, host_server: int) -> None:
        if not self.supports_host_network:
            pytest.skip("this executor does not offer host networking")
        run = self.run(sandbox, self._probe(host_server), tmp_path, network=True)
        assert run.stdout.strip() == TOKEN.decode(), run.stdout + run.stderr

    # -- stopping -----------------------------------------------------------------------------

    #: Writes a counter to /app-relative ``beat`` forever from a setsid'd daemon that ignores SIGTERM.
    DAEMON = (
        "setsid sh -c 'trap \"\" TERM; i=0; while :; do i=$((i+1)); echo $i > {beat}; sleep 0.05; done' "
        "</dev/null >/dev/null 2>&1 &\n"
    )
    #: A background child that ignores SIGTERM and keeps the command's stdout open.
    HOLDER = "sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' &\n"

    def _wait_for(self, path: str) -> str:
        return f"while [ ! -s {path} ]; do sleep 0.01; done\n"

    def _require_tree_kill(self) -> None:
        if not self.kills_whole_tree:
            pytest.skip("this executor does not stop setsid'd daemons")

    def test_timeout_kills_everything(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        self._require_tree_kill()
        beat = f"{task.workdir}/beat"
        command = (
            "trap '' TERM\n"
            + self.DAEMON.format(beat=beat)
            + self.HOLDER
            + self._wait_for(beat)
            + "echo ready\nwhile :; do sleep 0.1; done\n"
        )
        run = self.run(sandbox, command, tmp_path, timeout_sec=1.5)
        assert run.result.timed_out and run.result.exit_code is None
        assert run.stdout == "ready\n"
        assert run.wall_s < 1.5 + self.stop_slack_sec
        self.assert_stops_changing(sandbox, beat, tmp_path)

    def test_no_survivors_after_normal_exit(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        self._require_tree_kill()
        beat = f"{task.workdir}/beat"
        command = self.DAEMON.format(beat=beat) + self.HOLDER + self._wait_for(beat) + "echo done\n"
        run = self.run(sandbox, command, tmp_path, timeout_sec=60)
        assert (run.result.exit_code, run.result.timed_out, run.stdout) == (0, False, "done\n")
        assert run.wall_s < self.stop_slack_sec, "exec waited for background processes"
        self.assert_stops_changing(sandbox, beat, tmp_path)

    def test_output_capped_and_flagged(self, sandbox: Sandbox, tmp_path: Path) -> None:
        run = self.run(
            sandbox,
            "head -c 300000 /dev/zero | tr '\\0' a; head -c 10 /dev/zero | tr '\\0' b >&2",
            tmp_path,
            max_output_bytes=1000,
        )
        assert run.result.exit_code == 0
        assert run.result.stdout_truncated and len(run.stdout) <= 1000
        assert not run.result.stderr_truncated and run.stderr == "b" * 10

    def test_endless_output_neither_blocks_nor_fills_disk(self, sandbox: Sandbox, tmp_path: Path) -> None:
        run = self.run(sandbox, "yes maka", tmp_path, timeout_sec=1.5, max_output_bytes=4096)
        assert run.result.timed_out and run.result.stdout_truncated
        assert len(run.stdout) <= 4096
        assert run.wall_s < 1.5 + self.stop_slack_sec

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
        victim_dir = tmp_path / "victim"
        victim_dir.mkdir()
        victim = victim_dir / "file.txt"
        victim.write_text("host content\n")
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


def _read_tree(path: Path) -> str:
    """Every regular file's text below ``path`` without following links (empty if absent)."""
    if path.is_symlink() or not path.exists():
        return ""
    if path.is_file():
        return path.read_text(errors="replace")
    return "".join(_read_tree(child) for child in sorted(path.iterdir()))
