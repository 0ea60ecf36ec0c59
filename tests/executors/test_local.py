"""The local (bubblewrap) executor: the shared conformance suite plus local-only properties."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType

import pytest
from pydantic import ValidationError

from pytest_maka.core import hostpattern
from pytest_maka.core.errors import ExecutorUnavailable, InfraError
from pytest_maka.core.task import Task
from pytest_maka.egress import tunguard
from pytest_maka.egress.log import EgressLog
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.executors.base import Executor, LeaseRequest, Sandbox
from pytest_maka.executors.local import MISSING_BWRAP, LocalExecutor, LocalOptions, LocalSandbox
from pytest_maka.executors.local.egress import takes_dns
from pytest_maka.testing import ExecutorConformance, make_cell, make_task

needs_bwrap = [
    pytest.mark.sandbox,
    pytest.mark.needs("bwrap"),
]
pytestmark = needs_bwrap


class TestLocalConformance(ExecutorConformance):
    """sandbox="bwrap": every property of the suite holds."""

    #: The sandbox's DNS reaches the relay when bwrap runs as root over a plain /etc/resolv.conf.
    egress_logs_dns = takes_dns()
    #: A TUN device per command, made and read by the harness, when it runs as root.
    egress_logs_past_proxy = tunguard.unavailable() is None
    egress_tunnels_loopback = True

    @pytest.fixture
    def executor(self) -> Executor:
        executor = LocalExecutor(LocalOptions(kill_grace_sec=0.5, egress_hosts={"allowed.test": "127.0.0.1"}))
        executor.check()
        return executor


class TestLocalNoSandboxConformance(ExecutorConformance):
    """sandbox="none": the lifecycle holds; isolation is honestly absent."""

    isolates_network = False
    isolates_host_filesystem = False
    kills_whole_tree = False
    #: The host is shared: the verification's directories can be found there.
    private_verdict_channel = False

    @pytest.fixture
    def executor(self) -> Executor:
        executor = LocalExecutor(LocalOptions(sandbox="none", kill_grace_sec=0.5))
        executor.check()
        return executor

    # Isolation tests do not apply to an executor that opts out of isolation: instead of
    # skipping them, assert what it honestly does and says.
    test_network_off_cannot_reach_host_loopback = None  # type: ignore[assignment]
    test_timeout_kills_everything = None  # type: ignore[assignment]
    test_no_survivors_after_normal_exit = None  # type: ignore[assignment]
    test_host_filesystem_not_writable = None  # type: ignore[assignment]
    # These write the environment's system directories: here that is the host itself.
    test_system_tampering_never_passes = None  # type: ignore[assignment]
    test_path_hijack_is_undone_and_recorded = None  # type: ignore[assignment]
    test_broken_tools_stay_official = None  # type: ignore[assignment]
    test_daemon_rewriting_the_reward_never_passes = None  # type: ignore[assignment]

    def test_record_says_protected_paths_are_neither_checked_nor_restored(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        record = self.attempt(executor, task, tmp_path, "echo done > done.txt")
        assert record["status"] == "agent_success", record["error"]
        mechanism = record["verifier"]["tamper"]["mechanism"]
        assert mechanism.startswith("none: the host filesystem is shared read-write"), mechanism

    test_egress_listed_host_is_reached_and_others_refused = None  # type: ignore[assignment]
    test_egress_without_the_proxy_reaches_nothing = None  # type: ignore[assignment]
    test_egress_each_phase_gets_only_its_own_allowlist = None  # type: ignore[assignment]
    test_egress_own_loopback_stays_own_while_a_loopback_endpoint_is_listed = None  # type: ignore[assignment]

    def test_an_allowlist_phase_is_refused_not_opened(self, sandbox: Sandbox, tmp_path: Path) -> None:
        """With the host's network there is nothing to filter: the phase fails, it never runs open."""
        plan = PhasePlan("allowlist", hostpattern.parse_all(["allowed.test:80"]))
        with (
            pytest.raises(InfraError, match="cannot enforce"),
            sandbox.egress_phase(  # type: ignore[attr-defined]
                "agent", plan, EgressLog(tmp_path / "egress.log")
            ),
        ):
            pytest.fail("the phase ran")

    def test_shares_the_host_network_and_says_so(self, sandbox: Sandbox, tmp_path: Path, host_server: int) -> None:
        run = self.run(sandbox, self._probe(host_server), tmp_path, network=False)
        assert run.result.exit_code == 0, "no network namespace: the host is reachable"
        isolation = sandbox.isolation(agent_network=False, verifier_network=False)
        assert isolation["sandbox"] == "none"
        assert isolation["network"] == {"agent": "host", "verifier": "host"}

    def test_timeout_kills_the_process_group(self, sandbox: Sandbox, task: Task, tmp_path: Path) -> None:
        beat = f"{task.workdir}/beat"
        command = f"trap '' TERM; (trap '' TERM; while :; do date +%s%N > {beat}; sleep 0.05; done) & sleep 60"
        run = self.run(sandbox, command, tmp_path, timeout_sec=1)
        assert run.result.timed_out
        snapshot = sandbox.workspace_snapshot(tmp_path / "ws") / "beat"
        first = snapshot.read_text()
        time.sleep(0.4)
        assert snapshot.read_text() == first, "a background child in the process group survived the timeout"


# -- helpers -------------------------------------------------------------------------------


def _run(sandbox: Sandbox, command: str, tmp_path: Path, timeout_sec: float = 30) -> tuple[int | None, str]:
    """Exec with a plain PATH; (exit code, stdout)."""
    out = tmp_path / f"out-{time.monotonic_ns()}"
    env = {"PATH": "/usr/bin:/bin"}
    result = sandbox.exec(command, env=env, timeout_sec=timeout_sec, stdout_path=out, stderr_path=tmp_path / "err")
    return result.exit_code, out.read_text()


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return make_task(tmp_path / "task")


def _lease(executor: LocalExecutor, task: Task, tmp_path: Path) -> AbstractContextManager[LocalSandbox]:
    """Lease a sandbox for ``task`` with a fresh scratch directory."""
    request = LeaseRequest(
        cell=make_cell(task, tmp_path),
        attempt=1,
        attempt_dir=tmp_path / "attempt",
        scratch_dir=tmp_path / f"scratch-{time.monotonic_ns()}",
    )
    return executor.lease(request)


@pytest.fixture
def sandbox(task: Task, tmp_path: Path) -> Iterator[Sandbox]:
    with _lease(LocalExecutor(LocalOptions(kill_grace_sec=0.5)), task, tmp_path) as sandbox:
        yield sandbox


# -- options and availability ------------------------------------------------------------


def test_options_defaults_and_forbid_extra() -> None:
    options = LocalOptions()
    assert (options.sandbox, options.ro_binds, options.kill_grace_sec) == ("bwrap", [], 1.0)
    with pytest.raises(ValidationError):
        LocalOptions.model_validate({"sandbox": "bwrap", "netwrok": True})
    with pytest.raises(ValidationError):
        LocalOptions(ro_binds=["relative/path"])
    assert LocalExecutor.kind == "local" and LocalExecutor.Options is LocalOptions


def test_isolated_flag() -> None:
    assert LocalExecutor().isolated
    assert not LocalExecutor(LocalOptions(sandbox="none")).isolated


def test_check_without_bwrap_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExecutorUnavailable) as info:
        LocalExecutor().check()
    assert str(info.value) == MISSING_BWRAP


def test_check_rejects_missing_ro_bind(tmp_path: Path) -> None:
    with pytest.raises(ExecutorUnavailable, match="does not exist"):
        LocalExecutor(LocalOptions(ro_binds=[str(tmp_path / "absent")])).check()


# -- isolation details ---------------------------------------------------------------------


def test_secrets_in_etc_are_masked(sandbox: Sandbox, tmp_path: Path) -> None:
    probes = [p for p in ("/etc/shadow", "/etc/gshadow") if os.path.isfile(p)]
    if not probes and not os.path.isdir("/etc/ssh"):
        pytest.skip("no /etc secrets on this host")
    command = f"cat {' '.join(probes)} 2>&1; ls -A /etc/ssh 2>/dev/null; echo end"
    assert _run(sandbox, command, tmp_path)[1] == "end\n"


def test_no_capabilities_and_read_only_proc_sys(sandbox: Sandbox, tmp_path: Path) -> None:
    # kernel.hostname is per UTS namespace: harmless even if the write went through.
    command = "grep CapEff /proc/self/status; (echo x > /proc/sys/kernel/hostname) 2>/dev/null || echo ro"
    assert _run(sandbox, command, tmp_path)[1] == "CapEff:\t0000000000000000\nro\n"


def test_own_pid_namespace(sandbox: Sandbox, tmp_path: Path) -> None:
    code, out = _run(sandbox, "ls /proc | grep -c '^[0-9]'", tmp_path)
    assert code == 0 and int(out) < 10


def test_env_is_exactly_what_was_passed(sandbox: Sandbox, tmp_path: Path) -> None:
    out = tmp_path / "env"
    env = {"PATH": "/usr/bin:/bin", "ONE": "1"}
    sandbox.exec("env", env=env, timeout_sec=30, stdout_path=out, stderr_path=tmp_path / "err")
    names = {line.split("=", 1)[0] for line in out.read_text().splitlines()}
    assert names == {"PATH", "ONE", "PWD"}  # PWD is set by the shell


def test_ro_binds_are_readable_not_writable(task: Task, tmp_path: Path) -> None:
    tool = tmp_path / "agent-cli"
    tool.mkdir()
    (tool / "version").write_text("1.2.3\n")
    executor = LocalExecutor(LocalOptions(ro_binds=[str(tool)]))
    with _lease(executor, task, tmp_path) as sandbox:
        _, out = _run(sandbox, f"cat {tool}/version; (echo x > {tool}/new) 2>/dev/null || echo ro", tmp_path)
    assert out == "1.2.3\nro\n"
    assert not (tool / "new").exists()


def test_isolation_report_is_honest(task: Task, tmp_path: Path) -> None:
    with _lease(LocalExecutor(), task, tmp_path) as sandbox:
        report = sandbox.isolation(agent_network=False, verifier_network=True)
        assert report["sandbox"] == "bwrap" and report["pid_namespace"] is True
        assert report["network"] == {"agent": "none", "verifier": "host"}
        assert "/app (rw, workspace)" in report["mounts"]
    with _lease(LocalExecutor(LocalOptions(sandbox="none")), task, tmp_path) as sandbox:
        report = sandbox.isolation(agent_network=False, verifier_network=False)
        assert report["sandbox"] == "none" and report["pid_namespace"] is False
        assert report["network"] == {"agent": "host", "verifier": "host"}


# -- stopping --------------------------------------------------------------------------------


def test_sigterm_comes_first(sandbox: Sandbox, tmp_path: Path) -> None:
    command = "trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done"
    out = tmp_path / "out"
    result = sandbox.exec(command, env={}, timeout_sec=0.5, stdout_path=out, stderr_path=tmp_path / "err")
    assert result.timed_out
    assert out.read_text() == "started\ngot-term\n"


def test_interrupt_during_exec_kills_the_sandbox(sandbox: Sandbox, tmp_path: Path) -> None:
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    command = "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /app/beat; sleep 0.05; done' & sleep 100"
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            _run(sandbox, command, tmp_path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    first = (tmp_path / "b1", tmp_path / "b2")
    assert sandbox.get("/app/beat", first[0])
    time.sleep(0.5)
    assert sandbox.get("/app/beat", first[1])
    assert first[0].read_text() == first[1].read_text()


def test_none_sandbox_kills_the_process_group_on_timeout(task: Task, tmp_path: Path) -> None:
    executor = LocalExecutor(LocalOptions(sandbox="none", kill_grace_sec=0.2))
    command = (
        "trap '' TERM; (trap '' TERM; i=0; while :; do i=$((i+1)); echo $i > /app/beat; sleep 0.05; done) & "
        "while [ ! -s /app/beat ]; do sleep 0.01; done; while :; do sleep 0.05; done"
    )
    with _lease(executor, task, tmp_path) as sandbox:
        started = time.monotonic()
        out = tmp_path / "out"
        result = sandbox.exec(command, env={}, timeout_sec=1, stdout_path=out, stderr_path=tmp_path / "err")
        assert result.timed_out and time.monotonic() - started < 10
        beat = sandbox.workspace_snapshot(tmp_path / "snap") / "beat"
        first = beat.read_text()
        time.sleep(0.5)
        assert beat.read_text() == first


# -- paths -----------------------------------------------------------------------------------


def test_custom_workdir(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", workdir="/srv/maka-work")
    with _lease(LocalExecutor(), task, tmp_path) as sandbox:
        assert _run(sandbox, "pwd; cat hello.txt", tmp_path)[1] == "/srv/maka-work\nhello from the task\n"


def test_workdir_under_missing_system_dir_is_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", workdir="/usr/maka-nonexistent/app")
    with pytest.raises(InfraError, match="read-only system directories"), _lease(LocalExecutor(), task, tmp_path):
        pass


def test_task_without_workspace(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", workspace_dir=None)
    with _lease(LocalExecutor(), task, tmp_path) as sandbox:
        assert _run(sandbox, "ls -A; echo x > f && cat f", tmp_path) == (0, "x\n")


def test_put_rejects_paths_it_cannot_mount(sandbox: Sandbox, tmp_path: Path) -> None:
    source = tmp_path / "f"
    source.write_text("x")
    for bad in ("relative/path", "/usr/local/bin/tool", "/proc/x", "/app/../etc/passwd", "/"):
        with pytest.raises(ValueError):
            sandbox.put(source, bad)


def test_put_replaces_upload_directory_and_file(sandbox: Sandbox, tmp_path: Path) -> None:
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solve.sh").write_text("echo solved\n")
    single = tmp_path / "single.sh"
    single.write_text("echo single\n")
    sandbox.put(single, "/solution/solve.sh")
    sandbox.put(solution, "/solution")
    sandbox.put(single, "/solution/extra.sh")
    assert _run(sandbox, "ls /solution; sh /solution/solve.sh", tmp_path)[1] == "extra.sh\nsolve.sh\nsolved\n"


def test_use_after_lease_is_refused(task: Task, tmp_path: Path) -> None:
    with _lease(LocalExecutor(), task, tmp_path) as sandbox:
        pass
    with pytest.raises(RuntimeError, match="lease has ended"):
        _run(sandbox, "true", tmp_path)


def test_per_exec_overhead(sandbox: Sandbox, tmp_path: Path) -> None:
    runs = 20
    started = time.monotonic()
    for _ in range(runs):
        _run(sandbox, "true", tmp_path)
    per_exec = (time.monotonic() - started) / runs
    print(f"local executor per-exec overhead: {per_exec * 1000:.1f} ms")
    assert per_exec < 0.25  # generous: ~5-10 ms expected


def test_changed_uploads_are_copied_in_again_before_verification(task: Task, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    (tool / "bin").mkdir(parents=True)
    (tool / "bin" / "hello").write_text("#!/bin/sh\necho real tool\n")
    (tool / "bin" / "hello").chmod(0o755)
    (tool / "data").write_text("same size\n")
    request = LeaseRequest(
        cell=make_cell(task, tmp_path),
        attempt=1,
        attempt_dir=tmp_path / "attempt",
        scratch_dir=tmp_path / "scratch",
        uploads={"/maka-tool": tool},
    )
    with LocalExecutor(LocalOptions(kill_grace_sec=0.5)).lease(request) as sandbox:
        assert sandbox.restore_protected(tmp_path)["restored"] == [], "nothing changed yet"
        # same size, mtime set back: only the ctime tells
        tamper = (
            "printf '#!/bin/sh\\necho fake\\n' > /maka-tool/bin/hello; echo planted > /maka-tool/bin/extra; "
            "touch -r /maka-tool/bin/extra /maka-tool/data; printf 'SAME SIZE\\n' > /maka-tool/data; "
            "touch -d @0 /maka-tool/data"
        )
        assert _run(sandbox, tamper, tmp_path)[0] == 0
        report = sandbox.restore_protected(tmp_path)
        assert report["restored"] == ["/maka-tool"]
        assert {"/maka-tool/bin/hello", "/maka-tool/bin/extra", "/maka-tool/data"} <= set(report["changed"])
        _code, out = _run(sandbox, "/maka-tool/bin/hello; cat /maka-tool/data; ls /maka-tool/bin", tmp_path)
        assert out == "real tool\nsame size\nhello\n"
        assert (tool / "bin" / "hello").read_text() == "#!/bin/sh\necho real tool\n", "the host source is untouched"
