"""Containers: limits and labels, real timeouts, network off, cleanup on every kind of exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from pytest_maka.core.errors import ExecutorUnavailable
from pytest_maka.executors.docker import DockerExecutor, DockerOptions

from .helpers import CRASH_IN_CHILD, containers_of, plain_task, request, run

pytestmark = pytest.mark.docker


def test_container_settings(make_executor, docker_api, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t", task_id="limits-task", cpus=1.0, memory_mb=256)
    with make_executor(pids_limit=300).lease(request(task, tmp_path)) as sandbox:
        cfg = docker_api.inspect_container(sandbox.id)
        host = cfg["HostConfig"]
        assert (host["NanoCpus"], host["Memory"], host["PidsLimit"]) == (10**9, 256 * 2**20, 300)
        assert host["Privileged"] is False and host["CapDrop"] == ["ALL"] and "NET_RAW" not in host["CapAdd"]
        assert "no-new-privileges:true" in host["SecurityOpt"] and host["Init"] is True
        labels = cfg["Config"]["Labels"]
        assert labels["io.pytest-maka.cell"] == "limits-task[conformance-r1]"
        assert labels["io.pytest-maka.owner-pid"] == str(os.getpid()) and labels["io.pytest-maka.run"]
        _, out, _ = run(
            sandbox, "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max", tmp_path
        )
        assert out.strip() == "300"
        isolation = sandbox.isolation(agent_network=False, verifier_network=False)
        assert isolation["limits"]["memory_mb"] == 256 and isolation["network"]["agent"] == "none"


def test_timeout_kills_a_sigterm_ignoring_process_tree(make_executor, docker_api, tmp_path: Path) -> None:
    """The command's own tree (its session) ends on its timeout, SIGTERM ignored or not; what it
    detached into a session of its own (setsid) stays, as in Harbor's live environment."""
    task = plain_task(tmp_path / "t")
    with make_executor(kill_grace_sec=0.5).lease(request(task, tmp_path)) as sandbox:
        command = (
            "trap '' TERM; (trap '' TERM; setsid sh -c 'trap \"\" TERM; while :; do date +%s%N > /tmp/beat; "
            "sleep 0.05; done' &) ; (trap '' TERM; while :; do date +%s%N > /tmp/held; sleep 0.05; done) & "
            "while :; do sleep 1; done"
        )
        result, _, _ = run(sandbox, command, tmp_path, timeout_sec=1.0)
        assert result.timed_out and result.exit_code is None  # returned: nothing held it open
        procs = docker_api.top(sandbox.id, ps_args="-o pid,stat,args")["Processes"]
        commands = [p[2] for p in procs if not p[1].startswith("Z")]
        assert "sleep 1" not in commands, commands  # the command's own loop is gone
        _, held, _ = run(sandbox, "cat /tmp/held", tmp_path)
        _, beat, _ = run(sandbox, "cat /tmp/beat", tmp_path)
        time.sleep(0.5)
        assert run(sandbox, "cat /tmp/held", tmp_path)[1] == held, "a child in the command's session survived"
        assert run(sandbox, "cat /tmp/beat", tmp_path)[1] != beat, "the detached daemon was stopped"
        assert run(sandbox, "echo still usable", tmp_path)[1] == "still usable\n"


def test_a_command_that_kills_everything_does_not_break_the_sandbox(make_executor, tmp_path: Path) -> None:
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        run(sandbox, "echo kept > /app/file; kill -9 -1", tmp_path)
        result, out, _ = run(sandbox, "cat /app/file", tmp_path)
        assert (result.exit_code, out) == (0, "kept\n")


def test_an_exec_the_engine_forgot_with_its_stopped_container_reads_as_killed(
    make_executor, docker_api, tmp_path: Path
) -> None:
    """The engine drops the execs a stopping container still holds: reading the exit code of one
    it forgot is a kill (137), never "No such exec instance"."""
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        eid = docker_api.exec_create(sandbox.id, ["true"])["Id"]
        docker_api.kill(sandbox.id)
        docker_api.wait(sandbox.id, timeout=10)
        with pytest.raises(docker.errors.NotFound):
            docker_api.exec_inspect(eid)
        assert sandbox.exec_state(eid) == {"Running": False, "ExitCode": 137}
        result, out, _ = run(sandbox, "echo back", tmp_path)
        assert (result.exit_code, out) == (0, "back\n")


def test_a_command_made_while_the_container_ends_runs_after_a_restart(
    make_executor, docker_api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI: after ``kill -9 -1`` the next command's exec was made while the container was ending;
    the engine dropped it, and starting it failed with 404. The command runs in the restarted
    container instead. The race is forced: the container is killed between making and starting."""
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        run(sandbox, "echo kept > /app/file", tmp_path)
        api = sandbox.api
        real_create = api.exec_create
        killed: list[str] = []

        def create_then_end(container: str, cmd: object, **kw: object) -> dict[str, str]:
            made = real_create(container, cmd, **kw)
            if not killed and cmd == ["sh", "-c", "cat /app/file"]:
                killed.append(made["Id"])
                docker_api.kill(container)
                docker_api.wait(container, timeout=10)
            return made

        monkeypatch.setattr(api, "exec_create", create_then_end)
        restarts = sandbox.restarts
        result, out, _ = run(sandbox, "cat /app/file", tmp_path)
        assert killed and (result.exit_code, out) == (0, "kept\n")
        assert sandbox.restarts == restarts + 1


def test_a_process_spawned_after_the_keeper_ended_runs_in_the_restarted_container(
    make_executor, docker_api, tmp_path: Path
) -> None:
    """As for a command: an agent spawned after an earlier command ended the container's keeper
    starts in the container started again, with what the earlier commands made."""
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        run(sandbox, "echo kept > /app/file", tmp_path)
        docker_api.kill(sandbox.id)
        docker_api.wait(sandbox.id, timeout=10)
        restarts = sandbox.restarts
        proc = sandbox.spawn("cat /app/file", env={"PATH": "/usr/bin:/bin"})
        assert proc.stdout.read() == b"kept\n" and proc.wait(30) == 0
        assert sandbox.restarts == restarts + 1


@pytest.fixture
def bridge_server() -> Iterator[tuple[str, int]]:
    """A TCP server on all host addresses; returns (bridge gateway address, port)."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"maka-bridge-token\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    gateway = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True)
    if gateway.returncode != 0:
        pytest.skip("no docker0 bridge on this host")
    yield gateway.stdout.split()[3].split("/")[0], server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


PROBE = (
    "python3 -c \"import socket,sys\ntry:\n s=socket.create_connection(('{host}',{port}),timeout=3)\n"
    " print(s.recv(100).decode().strip())\nexcept OSError as e:\n print('unreachable', e); sys.exit(1)\""
)


def test_network_off_blocks_and_on_reaches(make_executor, tmp_path: Path, bridge_server) -> None:
    host, port = bridge_server
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        result, out, err = run(sandbox, PROBE.format(host=host, port=port), tmp_path, network=False)
        assert result.exit_code == 1 and "unreachable" in out, out + err
        _, links, _ = run(sandbox, "cat /proc/net/dev", tmp_path)
        assert "eth0" not in links
        result, out, err = run(sandbox, PROBE.format(host=host, port=port), tmp_path, network=True)
        assert out.strip() == "maka-bridge-token", out + err
        result, out, _ = run(sandbox, PROBE.format(host=host, port=port), tmp_path, network=False)
        assert result.exit_code == 1, "the network stayed attached after the command"
        assert sandbox.isolation(agent_network=True, verifier_network=False)["networks_joined"] == ["bridge"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_container_removed_on_exceptions(make_executor, docker_api, tmp_path: Path, exc: BaseException) -> None:
    task = plain_task(tmp_path / "t", task_id=f"cleanup-{type(exc).__name__}")
    with pytest.raises(type(exc)), make_executor().lease(request(task, tmp_path)) as sandbox:
        run(sandbox, "sleep 100 &", tmp_path)
        assert containers_of(docker_api, task.id)
        raise exc
    assert containers_of(docker_api, task.id) == []


def test_keep_on_failure_keeps_a_stopped_container(make_executor, docker_api, tmp_path: Path) -> None:
    task = plain_task(tmp_path / "t", task_id="kept-task")
    with pytest.raises(RuntimeError), make_executor(keep_on_failure=True).lease(request(task, tmp_path)):
        raise RuntimeError("keep me")
    kept = containers_of(docker_api, task.id)
    assert [c["State"] for c in kept] == ["exited"]
    for c in kept:
        docker_api.remove_container(c["Id"], force=True)


CRASHED_FOR_SLOT = "crashed-task-slot"


def test_leftover_of_a_crashed_worker_is_removed_by_the_next_holder_of_its_slot(
    docker_api, state_dir: Path, tmp_path: Path
) -> None:
    """The worker loses its slot as a crash would (its lock goes with the execve, the lock's fd
    is close-on-exec) but its pid lives on as ``sleep``: the dead-owner sweeps of the runs that
    share this engine leave its container alone, so only the slot's next holder removes it."""
    root = Path(__file__).resolve().parents[2]
    crash = CRASH_IN_CHILD.replace("os._exit(9)", 'os.execv("/bin/sleep", ["sleep", "600"])')
    proc = subprocess.Popen(
        [sys.executable, "-c", crash, str(tmp_path), str(state_dir), CRASHED_FOR_SLOT],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        cid = proc.stdout.readline().strip()
        deadline = time.monotonic() + 60
        while b"sleep" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
            time.sleep(0.02)
        assert [c["Id"] for c in containers_of(docker_api, CRASHED_FOR_SLOT)] == [cid]
        executor = DockerExecutor(DockerOptions(state_dir=state_dir, slots_per_engine=1))
        with executor.lease(request(plain_task(tmp_path / "u"), tmp_path)):
            assert containers_of(docker_api, CRASHED_FOR_SLOT) == []
    finally:
        proc.kill()
        proc.wait()


def test_unreachable_engine_fails_check_with_one_line(tmp_path: Path) -> None:
    executor = DockerExecutor(DockerOptions(engines=[f"unix://{tmp_path}/no.sock"], state_dir=tmp_path))
    with pytest.raises(ExecutorUnavailable) as info:
        executor.check()
    assert "no Docker engine answers" in str(info.value) and "\n" not in str(info.value)


def test_sigint_during_exec_removes_the_container(docker_api, state_dir: Path, tmp_path: Path) -> None:
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from pytest_maka.executors.docker import DockerExecutor, DockerOptions\n"
        "from tests.docker.helpers import plain_task, request, run\n"
        "root, state = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "ex = DockerExecutor(DockerOptions(state_dir=state))\n"
        "with ex.lease(request(plain_task(root / 't', task_id='sigint-task'), root)) as sb:\n"
        "    print('started', flush=True)\n"
        "    run(sb, 'sleep 600', root)\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path), str(state_dir)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    assert containers_of(docker_api, "sigint-task") == []


def test_a_replaced_rm_cannot_keep_a_stale_reward_file(make_executor, tmp_path: Path) -> None:
    """Clearing is the engine's (archive API) and the harness's probe, never the container's rm:
    a fake rm keeps nothing and does not stop the removal."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        run(sandbox, "echo 1 > /logs/verifier/reward.txt; printf '#!/bin/sh\\nexit 0\\n' > /bin/rm", tmp_path)
        sandbox.put(empty, "/logs/verifier")
        assert run(sandbox, "ls -A /logs/verifier; echo end", tmp_path)[1] == "end\n"
        run(sandbox, "echo 1 > /logs/verifier/reward.txt", tmp_path)
        sandbox.remove("/logs/verifier")
        assert run(sandbox, "ls -d /logs/verifier; echo end", tmp_path)[1] == "end\n", "removed"
        assert sandbox.get("/logs/verifier/reward.txt", tmp_path / "r") is False, "the stale reward is gone"


def test_planted_reward_and_tests_are_replaced(make_executor, tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo real\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    with make_executor().lease(request(plain_task(tmp_path / "t"), tmp_path)) as sandbox:
        run(
            sandbox,
            "echo 1 > /logs/verifier/reward.txt; mkdir -p /tests; echo 'echo fake' > /tests/test.sh; "
            "echo x > /tests/conftest.py",
            tmp_path,
        )
        sandbox.remove("/logs/verifier")
        sandbox.put(empty, "/logs/verifier")
        sandbox.remove("/tests")
        sandbox.put(tests, "/tests")
        _, out, _ = run(sandbox, "ls /logs/verifier; ls /tests; sh /tests/test.sh", tmp_path)
        assert out == "test.sh\nreal\n"
