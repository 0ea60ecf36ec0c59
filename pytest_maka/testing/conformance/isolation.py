"""Conformance: environment, network, stopping every process, output caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ...core.task import Task
from ...executors.base import Sandbox
from .base import SECRET_NAME, SECRET_VALUE, TOKEN, ConformanceBase


class IsolationTests(ConformanceBase):
    """Conformance: environment, network, stopping every process, output caps."""

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
    #: The same, writing a counter to ``beat`` (to tell whether it still runs).
    BEATING_HOLDER = "sh -c 'trap \"\" TERM; i=0; while :; do i=$((i+1)); echo $i > {beat}; sleep 0.05; done' &\n"

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
        # long enough for the daemon's first beat on a loaded engine (an exec, setsid, a fork):
        # the command never ends by itself, so it always times out, after "ready"
        timeout = 5.0
        if self.keeps_detached:  # the holder is the command's tree: it ends; the daemon stays
            held = f"{task.workdir}/held"
            command = command.replace(self.HOLDER, self.BEATING_HOLDER.format(beat=held))
        run = self.run(sandbox, command, tmp_path, timeout_sec=timeout)
        assert run.result.timed_out and run.result.exit_code is None
        assert run.stdout == "ready\n"
        assert run.wall_s < timeout + self.stop_slack_sec
        if self.keeps_detached:
            self.assert_stops_changing(sandbox, held, tmp_path)
            self.assert_keeps_changing(sandbox, beat, tmp_path)
        else:
            self.assert_stops_changing(sandbox, beat, tmp_path)

    def test_no_survivors_after_normal_exit(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        self._require_tree_kill()
        beat = f"{task.workdir}/beat"
        command = self.DAEMON.format(beat=beat) + self.HOLDER + self._wait_for(beat) + "echo done\n"
        run = self.run(sandbox, command, tmp_path, timeout_sec=60)
        assert (run.result.exit_code, run.result.timed_out, run.stdout) == (0, False, "done\n")
        assert run.wall_s < self.stop_slack_sec, "exec waited for background processes"
        if self.keeps_detached:  # what it left running stays, as the benchmark's harness keeps it
            self.assert_keeps_changing(sandbox, beat, tmp_path)
        else:
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
