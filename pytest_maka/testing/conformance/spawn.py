"""Conformance: live processes (spawn) and file content (read_file / write_file)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from ...core.task import Task
from ...executors.base import Process, Sandbox
from .base import SECRET_VALUE, ConformanceBase

TICKER = "while :; do date +%s%N > tick.txt; sleep 0.1; done"


def _read_all(stream: object, timeout: float = 60.0) -> bytes:
    """Everything until end-of-file, or fail if the stream stays open past ``timeout``."""
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stream.read()), daemon=True)  # type: ignore[attr-defined]
    reader.start()
    reader.join(timeout)
    assert not reader.is_alive(), "the stream never reached end-of-file: something still holds it open"
    return out[0]


class SpawnTests(ConformanceBase):
    """Conformance: spawn gives live streams, wait and a whole-tree kill; file content never follows links."""

    def spawn(self, sandbox: Sandbox, command: str) -> Process:
        return sandbox.spawn(command, env={"PATH": self.path_env})

    # -- spawn ----------------------------------------------------------------------------

    def test_spawn_echoes_stdin_to_stdout(self, sandbox: Sandbox) -> None:
        proc = self.spawn(sandbox, "cat; echo done >&2")
        proc.stdin.write(b"line one\nline two\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"line one\n", "a line is delivered while the process runs"
        proc.stdin.close()
        assert _read_all(proc.stdout) == b"line two\n"
        assert _read_all(proc.stderr) == b"done\n"
        assert proc.wait(60) == 0

    def test_spawn_streams_large_output_and_exit_code(self, sandbox: Sandbox) -> None:
        proc = self.spawn(sandbox, "head -c 3000000 /dev/zero; exit 3")
        assert len(_read_all(proc.stdout)) == 3_000_000
        assert proc.wait(60) == 3

    def test_wait_with_timeout_returns_none_while_running(self, sandbox: Sandbox) -> None:
        proc = self.spawn(sandbox, "echo up; sleep 300")
        assert proc.stdout.readline() == b"up\n"
        assert proc.wait(0.2) is None
        proc.kill(grace_sec=0)
        assert proc.wait(30) is not None

    @pytest.mark.parametrize("ignore_term", [False, True], ids=["tree", "ignores-sigterm"])
    def test_kill_stops_the_whole_tree(self, sandbox: Sandbox, tmp_path: Path, task: Task, ignore_term: bool) -> None:
        trap = "trap '' TERM; " if ignore_term else ""
        proc = self.spawn(sandbox, f"{trap}( {TICKER} ) & sleep 300 & echo started; wait")
        assert proc.stdout.readline() == b"started\n"
        self.wait_for_file(sandbox, f"{task.workdir}/tick.txt")
        proc.kill(grace_sec=0.5)
        assert proc.wait(30) is not None
        self.assert_stops_changing(sandbox, f"{task.workdir}/tick.txt", tmp_path)

    def test_no_survivors_after_the_lease(
        self, open_lease: Callable[..., AbstractContextManager[Sandbox]], task: Task
    ) -> None:
        with open_lease() as sandbox:
            proc = self.spawn(sandbox, f"trap '' TERM; ( {TICKER} ) & echo started; sleep 300")
            assert proc.stdout.readline() == b"started\n"
        assert _read_all(proc.stdout) == b"", "the lease's end closes the process's output"
        assert proc.wait(30) is not None, "the process is gone once the lease has ended"

    def wait_for_file(self, sandbox: Sandbox, path: str) -> None:
        proc = self.spawn(sandbox, f"i=0; while [ ! -s {path} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
        assert proc.wait(60) == 0

    # -- file content ---------------------------------------------------------------------

    def test_write_file_then_read_file(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        path = f"{task.workdir}/made/deep/new.txt"
        sandbox.write_file(path, b"content \x00 bytes\n")
        assert self.run(sandbox, "cat made/deep/new.txt", tmp_path).stdout == "content \x00 bytes\n"
        assert sandbox.read_file(path, 1 << 20) == b"content \x00 bytes\n"
        assert sandbox.read_file(path, 7) == b"content", "at most max_bytes are read"
        sandbox.write_file(path, b"v2")
        assert sandbox.read_file(path, 100) == b"v2", "write_file replaces"

    def test_read_file_sees_what_a_command_wrote(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        self.run(sandbox, "echo from-inside > /logs/agent/out.txt", tmp_path)
        assert sandbox.read_file("/logs/agent/out.txt", 100) == b"from-inside\n"
        with pytest.raises(FileNotFoundError):
            sandbox.read_file(f"{task.workdir}/missing.txt", 100)
        with pytest.raises(FileNotFoundError):
            sandbox.read_file(f"{task.workdir}/sub", 100)

    def test_read_file_never_follows_a_link_out(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        secret = tmp_path / "host-secret.txt"
        secret.write_text(SECRET_VALUE)
        self.run(sandbox, f"ln -s {secret} leak.txt; ln -s {tmp_path} hostdir", tmp_path)
        for path in ("leak.txt", f"hostdir/{secret.name}"):
            try:
                data = sandbox.read_file(f"{task.workdir}/{path}", 1 << 20)
            except FileNotFoundError:
                continue
            assert SECRET_VALUE.encode() not in data, f"read_file followed {path} out of the environment"

    def test_write_file_never_follows_a_link_out(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        victim_dir, victim = self.plant_victim(tmp_path)
        self.run(sandbox, f"ln -s {victim} target.txt; ln -s {victim_dir} dir", tmp_path)
        sandbox.write_file(f"{task.workdir}/target.txt", b"fresh\n")
        sandbox.write_file(f"{task.workdir}/dir/file.txt", b"fresh\n")
        assert victim.read_text() == "host content\n"
        assert sorted(p.name for p in victim_dir.iterdir()) == ["file.txt"]
        assert self.run(sandbox, "cat target.txt dir/file.txt", tmp_path).stdout == "fresh\nfresh\n"
