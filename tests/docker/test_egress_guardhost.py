"""The packet logger in the engine's guard host (guardhost.py), and its fall-back: real engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.core import hostpattern
from pytest_maka.egress.log import EgressLog
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.executors.docker import labels as L
from pytest_maka.executors.docker.guardhost import ROLE, guard_host_key

from .helpers import egress_request, run_in

pytestmark = pytest.mark.docker

#: One UDP datagram past the proxy (TEST-NET-3): refused, logged as UDP to 203.0.113.9:5353.
UDP = (
    'python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
    "s.sendto(b'x', ('203.0.113.9', 5353))\" || true"
)


def _in_host(docker_api, host: str, script: str) -> str:  # type: ignore[no-untyped-def]
    eid = docker_api.exec_create(host, ["sh", "-c", script], user="0")["Id"]
    return docker_api.exec_start(eid).decode()


def _plan(port: int) -> PhasePlan:
    return PhasePlan("allowlist", hostpattern.parse_all([f"allowed.test:{port}"]))


def _refused_udp(log_path: Path) -> list[str]:
    return [line for line in log_path.read_text().splitlines() if "203.0.113.9:5353" in line and "UDP" in line]


def test_the_logger_runs_in_the_guard_host_and_leaves_nothing_there(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip}, egress_prestart=False)
    plan = _plan(port)
    log = EgressLog(tmp_path / "egress.log")
    with executor.lease(egress_request(tmp_path, "gh")) as sandbox:
        with sandbox.egress_phase("agent", plan, log):
            run_in(sandbox, tmp_path, UDP)
        guard = sandbox.egress.guards[sandbox.id]
        assert guard.id is None, "no helper container of its own: an exec in the guard host"
        cell = sandbox.egress.labels[L.CELL]
        own = docker_api.containers(all=True, filters={"label": [f"{L.ROLE}=egress-guard", f"{L.CELL}={cell}"]})
        assert own == []
        host = executor.proxies.shared(guard_host_key(sandbox.egress.engine), lambda: None).result(timeout=60)
        assert docker_api.inspect_container(host.id)["Config"]["Labels"][L.ROLE] == ROLE
        dirs = _in_host(docker_api, host.id, "ls -d /run/maka/*/ 2>/dev/null").split()
        assert len(dirs) == 1
        pid = int(_in_host(docker_api, host.id, f"cat {dirs[0]}ulogd.pid"))
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "ulogd", "ulogd runs on the engine's host"
        own_ns = Path(f"/proc/{pid}/ns/net")
        container_pid = docker_api.inspect_container(sandbox.id)["State"]["Pid"]
        assert own_ns.readlink() == Path(f"/proc/{container_pid}/ns/net").readlink(), "in the sandbox's namespace"
    assert _refused_udp(tmp_path / "egress.log"), "the datagram past the proxy was logged"
    assert not Path(f"/proc/{pid}").exists(), "ulogd stopped with the lease"
    assert _in_host(docker_api, host.id, "ls /run/maka/").split() == ["plugins"], "its files removed"
    executor.close()
    assert docker_api.containers(all=True, filters={"id": host.id}) == [], "the guard host goes with the executor"


def test_a_guard_host_that_is_gone_is_replaced_and_traffic_is_still_logged(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip}, egress_prestart=False)
    plan = _plan(port)
    with executor.lease(egress_request(tmp_path, "one")) as sandbox:
        with sandbox.egress_phase("agent", plan, EgressLog(tmp_path / "one.log")):
            run_in(sandbox, tmp_path, "true")
        key = guard_host_key(sandbox.egress.engine)
    first = executor.proxies.shared(key, lambda: None).result(timeout=60)
    docker_api.remove_container(first.id, force=True)  # the engine lost it (or someone removed it)
    with executor.lease(egress_request(tmp_path, "two")) as sandbox:
        with sandbox.egress_phase("agent", plan, EgressLog(tmp_path / "two.log")):
            run_in(sandbox, tmp_path, UDP)
        assert sandbox.egress.unguarded is None
    assert _refused_udp(tmp_path / "two.log"), "logged by a helper container of its own"
    with executor.lease(egress_request(tmp_path, "three")) as sandbox:
        with sandbox.egress_phase("agent", plan, EgressLog(tmp_path / "three.log")):
            run_in(sandbox, tmp_path, UDP)
        assert sandbox.egress.guards[sandbox.id].id is None, "a new guard host serves the next attempt"
    assert _refused_udp(tmp_path / "three.log")
    second = executor.proxies.shared(key, lambda: None).result(timeout=60)
    assert second.id != first.id
