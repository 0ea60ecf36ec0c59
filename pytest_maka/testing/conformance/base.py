"""Base of the executor conformance suite: task and cell builders, fixtures, helpers, capability flags."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from ...core.cell import Cell
from ...core.spec import SubjectSpec
from ...core.task import Task, digest_tree
from ...executors.base import ExecResult, Executor, LeaseRequest, Sandbox
from ..servers import tcp_server

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


class ConformanceBase:
    """Fixtures, helpers and capability flags shared by the conformance test groups."""

    #: network=True reaches a server on the host's 127.0.0.1 (host networking).
    supports_host_network: ClassVar[bool] = True
    #: network=False really cuts the network (False only for executors without isolation).
    isolates_network: ClassVar[bool] = True
    #: The executor keeps commands from writing to the host filesystem.
    isolates_host_filesystem: ClassVar[bool] = True
    #: The executor stops a setsid'd daemon and background jobs (False: those tests are skipped,
    #: since the probes they start would outlive the test).
    kills_whole_tree: ClassVar[bool] = True
    #: The environment stays live between commands (a container): what a command detached
    #: (``setsid``, a background job orphaned when it exits) keeps running, as in Harbor, and
    #: only the command's own tree ends on its timeout. False: every command's processes end
    #: with it (the local sandbox: a new namespace per command).
    keeps_detached: ClassVar[bool] = False
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

    def plant_victim(self, tmp_path: Path) -> tuple[Path, Path]:
        """A host directory with one file a planted symlink will point at: (directory, file)."""
        victim_dir = tmp_path / "victim"
        victim_dir.mkdir()
        victim = victim_dir / "file.txt"
        victim.write_text("host content\n")
        return victim_dir, victim

    def assert_keeps_changing(self, sandbox: Sandbox, path: str, tmp_path: Path) -> None:
        first = self.read(sandbox, path, tmp_path)
        assert first is not None, f"the probe never wrote {path}"
        for _ in range(100):  # a loaded engine may take a while to schedule it
            time.sleep(0.2)
            if self.read(sandbox, path, tmp_path) != first:
                return
        raise AssertionError(f"nothing rewrites {path} any more: the process was stopped")

    def assert_stops_changing(self, sandbox: Sandbox, path: str, tmp_path: Path) -> None:
        first = self.read(sandbox, path, tmp_path)
        assert first is not None, f"the probe never wrote {path}"
        time.sleep(0.6)
        assert self.read(sandbox, path, tmp_path) == first, f"a process still rewrites {path}"


def _read_tree(path: Path) -> str:
    """Every regular file's text below ``path`` without following links (empty if absent)."""
    if path.is_symlink() or not path.exists():
        return ""
    if path.is_file():
        return path.read_text(errors="replace")
    return "".join(_read_tree(child) for child in sorted(path.iterdir()))
