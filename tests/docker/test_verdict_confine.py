"""A private verification command is confined as a ``docker exec`` of its container is: the same
seccomp filters, ``no_new_privs`` and resource limits (``executors/docker/verdict_confine.py``),
judged side by side with a real ``docker exec`` of the same command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from pytest_maka.executors.docker.verdict import Container, PrivateVerdict, confined, probe
from pytest_maka.executors.docker.verdict_cgroup import cgroup_mounts, sweep_groups

from .conftest import BASE_IMAGE

pytestmark = pytest.mark.docker

#: Denies mkdir (as EPERM), allows everything else.
NO_MKDIR = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
}
FACTS = (
    "grep -E '^(NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status; cat /proc/self/limits;"
    " mkdir /tmp/made 2>/dev/null; echo mkdir=$?; rmdir /tmp/made 2>/dev/null; true"
)


def _dirs(*names: str) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
    return data.getvalue()


@pytest.fixture
def container(request: pytest.FixtureRequest, docker_api: docker.APIClient) -> Iterator[tuple[str, Container]]:
    """A running container with a seccomp profile denying mkdir, a nofile ulimit and, as asked,
    ``no-new-privileges``: (its id, what the private channel knows of it)."""
    security = ["seccomp=" + json.dumps(NO_MKDIR)]
    if request.param:
        security.append("no-new-privileges:true")
    cid = docker_api.create_container(
        BASE_IMAGE,
        ["sleep", "infinity"],
        name=f"maka-test-confine-{uuid.uuid4().hex[:8]}",
        labels={"io.pytest-maka.test": "verdict-confine"},
        host_config=docker_api.create_host_config(
            init=True,
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"],
            security_opt=security,
            ulimits=[docker.types.Ulimit(name="nofile", soft=1234, hard=2345)],
        ),
    )["Id"]
    try:
        docker_api.put_archive(cid, "/", _dirs("logs", "logs/verifier"))
        docker_api.start(cid)
        info = docker_api.inspect_container(cid)
        found = probe(int(info["State"]["Pid"]), cid)
        assert isinstance(found, Container), found
        yield cid, confined(found, info)
    finally:
        docker_api.remove_container(cid, force=True)


def _docker_exec(api: docker.APIClient, cid: str, command: str) -> str:
    exec_id = api.exec_create(cid, ["sh", "-c", command], stdout=True, stderr=True)["Id"]
    return api.exec_start(exec_id).decode()


def _private(cid: str, found: Container, command: str, tmp_path: Path, *, uid: int = 0) -> tuple[int | None, str]:
    channel = PrivateVerdict(tmp_path / f"verdict-{uuid.uuid4().hex[:6]}", None)
    out, err = tmp_path / "private.out", tmp_path / "private.err"
    try:
        outcome = channel.run(
            found,
            command=command,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            cwd="/",
            uid=uid,
            gid=uid,
            timeout_sec=60,
            grace=0.0,
            stdout_path=out,
            stderr_path=err,
            cap=1 << 20,
            started=time.monotonic(),
        )
    finally:
        channel.close()
    return outcome.exit_code, out.read_text() + err.read_text()


@pytest.mark.parametrize("container", [True, False], ids=["no-new-privileges", "privileged-install"], indirect=True)
def test_a_private_command_is_confined_as_docker_exec(
    container: tuple[str, Container], docker_api: docker.APIClient, tmp_path: Path
) -> None:
    """Seccomp (a profile denying mkdir), no_new_privs and every resource limit read as in a
    ``docker exec``; without ``no-new-privileges`` the filter is installed while still privileged."""
    cid, found = container
    code, private = _private(cid, found, FACTS, tmp_path)
    assert code == 0, private
    assert _but_nofile(private) == _but_nofile(_docker_exec(docker_api, cid, FACTS))
    assert "mkdir=1" in private, private
    assert "Max open files            1234                 2345" in private, private
    assert ("NoNewPrivs:\t1" in private) == ("no-new-privileges" in _opts(docker_api, cid)), private
    assert "Seccomp:\t2" in private, private


@pytest.mark.parametrize("container", [True], ids=["no-new-privileges"], indirect=True)
def test_another_user_is_confined_too(container: tuple[str, Container], tmp_path: Path) -> None:
    cid, found = container
    code, private = _private(cid, found, FACTS, tmp_path, uid=65534)
    assert code == 0, private
    assert "NoNewPrivs:\t1" in private and "mkdir=1" in private, private
    assert "Max open files            1234                 2345" in private, private


def _but_nofile(facts: str) -> str:
    """Without the open files line: ``docker exec`` here (runc) sometimes gives the soft limit the
    hard one's value, a race in its Go runtime's raising and restoring of that limit."""
    return "".join(line for line in facts.splitlines(True) if not line.startswith("Max open files"))


def _opts(api: docker.APIClient, cid: str) -> str:
    return " ".join(api.inspect_container(cid)["HostConfig"]["SecurityOpt"] or [])


LEFT = "grep -ls 'sleep 30[0]' /proc/[0-9]*/cmdline || echo none"
#: A harness running one long verifier command (argv: container pid, id, channel root).
HARNESS = """
import sys, time
from pathlib import Path
from pytest_maka.executors.docker.verdict import PrivateVerdict, probe
root = Path(sys.argv[3])
channel = PrivateVerdict(root, None)
channel.run(probe(int(sys.argv[1]), sys.argv[2]), command="touch /logs/verifier/started; sleep 300",
            env={"PATH": "/usr/bin:/bin"}, cwd="/", uid=0, gid=0, timeout_sec=None, grace=0.0,
            stdout_path=root / "out", stderr_path=root / "err", cap=4096, started=time.monotonic())
"""


@pytest.mark.parametrize("container", [True], ids=["no-new-privileges"], indirect=True)
def test_a_killed_harness_leaves_a_cgroup_the_sweep_ends(
    container: tuple[str, Container], docker_api: docker.APIClient, tmp_path: Path
) -> None:
    """The harness is killed (SIGKILL) in the middle of a verifier command: its verification's
    cgroup, with the command's processes, stays until the sweep of dead owners ends and removes it."""
    cid, found = container
    root = tmp_path / "channel"
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(found.pid), cid, str(root)])
    try:
        deadline = time.monotonic() + 60
        while not (root / "verifier" / "started").exists():
            assert harness.poll() is None and time.monotonic() < deadline, "the verifier command did not start"
            time.sleep(0.05)
        live = list(Path(found.parent).glob(f"maka-verdict-{harness.pid}-*"))
        assert len(live) == 1 and str(live[0]) not in sweep_groups(), "a live harness's cgroup is never swept"
    finally:
        harness.kill()
        harness.wait()
    left = list(Path(found.parent).glob(f"maka-verdict-{harness.pid}-*"))
    assert len(left) == 1 and (left[0] / "cgroup.procs").read_text().split(), left
    assert _docker_exec(docker_api, cid, LEFT) != "none\n", "the verifier's processes outlived the harness"
    assert str(left[0]) in sweep_groups(dry_run=True) and left[0].exists()
    assert str(left[0]) in sweep_groups()
    assert not left[0].exists()
    assert _docker_exec(docker_api, cid, LEFT) == "none\n"


def _ending_by(found: Container, how: str) -> Container:
    """``found`` as the probe gives it (``freezer``: cgroup v1's freezer), or with the verification's
    cgroup in the container's cgroup v2 one and ended by ``cgroup.kill`` (``kill``)."""
    if how == "freezer":
        assert not found.v2 and Path(found.parent, "freezer.state").exists(), found
        return found
    _v1, v2 = cgroup_mounts()
    unified = next((p for p in found.procs if v2 is not None and p.startswith(v2 + "/")), None)
    if unified is None:
        pytest.skip("this host has no cgroup v2 hierarchy holding the container")
    procs = (*(p for p in found.procs if p != unified), f"{found.parent}/cgroup.procs")
    parent = unified.removesuffix("/cgroup.procs")
    assert Path(parent, "cgroup.kill").exists(), "the kernel has cgroup.kill"
    return replace(found, procs=procs, parent=parent, v2=True)


@pytest.mark.parametrize("how", ["freezer", "kill"])
@pytest.mark.parametrize("container", [True], ids=["no-new-privileges"], indirect=True)
def test_what_a_verifier_command_starts_ends_with_it(
    container: tuple[str, Container], how: str, docker_api: docker.APIClient, tmp_path: Path
) -> None:
    """Detached processes of a command that exits, and of one that times out, end with it, by
    the cgroup v1 freezer or the cgroup v2 ``cgroup.kill`` (the hybrid host's unified hierarchy)."""
    cid, found = container
    found = _ending_by(found, how)
    code, out = _private(cid, found, "(setsid sh -c 'sleep 300' >/dev/null 2>&1 &); echo left", tmp_path)
    assert (code, out) == (0, "left\n")
    assert _docker_exec(docker_api, cid, LEFT) == "none\n"
    channel = PrivateVerdict(tmp_path / "slow", None)
    try:
        outcome = channel.run(
            found,
            command="(setsid sleep 300 >/dev/null 2>&1 &); sleep 300",
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            uid=0,
            gid=0,
            timeout_sec=1.0,
            grace=0.2,
            stdout_path=tmp_path / "slow.out",
            stderr_path=tmp_path / "slow.err",
            cap=4096,
            started=time.monotonic(),
        )
    finally:
        channel.close()
    assert (outcome.timed_out, outcome.exit_code) == (True, None)
    assert _docker_exec(docker_api, cid, LEFT) == "none\n"
    assert not list(Path(found.parent).glob(f"maka-verdict-{os.getpid()}-*")), "its cgroup was removed"
