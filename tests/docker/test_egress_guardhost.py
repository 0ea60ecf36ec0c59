"""The packet logger in the engine's guard host (guardhost.py), and its fall-back: real engine."""

from __future__ import annotations

import time
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


def _execs(docker_api, container: str, since: float) -> list[str]:  # type: ignore[no-untyped-def]
    """The commands the engine ran with ``exec`` in ``container`` since ``since``."""
    events = docker_api.events(since=f"{since:.6f}", until=f"{time.time() + 1:.6f}",
                               filters={"container": container, "event": "exec_create"}, decode=True)  # fmt: skip
    return [str(e.get("Action", "")).partition(": ")[2] for e in events]


def test_the_proxys_resolver_is_written_from_the_guard_host_without_an_exec(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The first networked command of an allowlist phase: the proxy's resolv.conf and the
    sidecars' /etc/hosts lines come through the container's root from the guard host; the
    only exec in the container is the command itself; the container's own files come back."""
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, network=network, egress_hosts={"allowed.test": ip},
                             egress_prestart=False)  # fmt: skip
    with executor.lease(egress_request(tmp_path, "files")) as sandbox:
        sandbox.egress.direct.update({"db": "10.99.0.5"})  # a sidecar, named in /etc/hosts for the phase
        own = run_in(sandbox, tmp_path, "cat /etc/resolv.conf /etc/hosts", network=False)
        sandbox.egress.ready(sandbox.id)  # the packet logger runs, the own resolver is read (ahead, as a rule)
        since = time.time()
        with sandbox.egress_phase("agent", _plan(port), EgressLog(tmp_path / "egress.log")):
            proxied = run_in(sandbox, tmp_path, "cat /etc/resolv.conf /etc/hosts")
            proxy_ip = sandbox.egress.proxy_ip
        execs = _execs(docker_api, sandbox.id, since)
        run_in(sandbox, tmp_path, "true")  # the executor's own network: the container's own files back
        back = run_in(sandbox, tmp_path, "cat /etc/resolv.conf /etc/hosts", network=False)
        emptied = sandbox.egress.guards[sandbox.id].write_files("", None)  # an own resolv.conf that was empty
        empty = run_in(sandbox, tmp_path, "wc -c < /etc/resolv.conf", network=False)
    assert emptied and empty.strip() == "0", empty
    assert proxied.startswith(f"nameserver {proxy_ip}\n"), proxied
    assert "10.99.0.5\tdb # maka-sidecar" in proxied, proxied
    assert execs == ["sh -c cat /etc/resolv.conf /etc/hosts"] or (
        len(execs) == 1 and "cat /etc/resolv.conf /etc/hosts" in execs[0]
    ), execs
    assert back == own, "no trace of the phase in the container's files"


def test_a_resolver_file_the_guard_host_may_not_write_is_written_by_an_exec(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A subject that takes every permission off its resolv.conf (the guard host has no
    ``DAC_OVERRIDE``): the phase still has the proxy's resolver, written by an exec in the
    container as before. (Links out of the container are refused by ``inroot``; on the
    engine's overlay file system /etc cannot even be moved away from the engine's mounts.)"""
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip}, egress_prestart=False)
    with executor.lease(egress_request(tmp_path, "locked")) as sandbox:
        moved = run_in(sandbox, tmp_path, "mv /etc /etc.real; chmod 000 /etc/resolv.conf", network=False)
        sandbox.egress.ready(sandbox.id)
        since = time.time()
        with sandbox.egress_phase("agent", _plan(port), EgressLog(tmp_path / "egress.log")):
            proxied = run_in(sandbox, tmp_path, "cat /etc/resolv.conf")
            proxy_ip = sandbox.egress.proxy_ip
        execs = _execs(docker_api, sandbox.id, since)
    assert "Device or resource busy" in moved, moved
    assert proxied == f"nameserver {proxy_ip}\n", proxied
    assert any("/etc/resolv.conf" in e and "printf" in e for e in execs), execs
