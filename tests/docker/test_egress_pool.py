"""Egress proxies made ahead (proxies.py) and phases switched without exec (egress/supervisor.py): real engine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker.errors
import pytest

from pytest_maka.core import hostpattern
from pytest_maka.core.errors import InfraError
from pytest_maka.egress.log import PAST_PROXY, EgressLog
from pytest_maka.egress.plan import PhasePlan
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.docker import DockerOptions, proxies
from pytest_maka.executors.docker import labels as L
from pytest_maka.executors.docker.cleanup import sweep
from pytest_maka.executors.docker.engines import Engine
from pytest_maka.testing.servers import EGRESS_TOKEN

from .helpers import egress_request, run_in

pytestmark = pytest.mark.docker

FETCH = (
    'python3 -c "import sys, urllib.request as u\n'
    "for url in sys.argv[1:]:\n"
    "    try: print(url, u.urlopen(url, timeout=10).read().decode())\n"
    "    except Exception as e: print(url, 'FAILED', e)\" "
)


def _plan(*entries: str) -> PhasePlan:
    return PhasePlan("allowlist", hostpattern.parse_all(list(entries)))


def _exists(docker_api, kind: str, ident: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        (docker_api.inspect_network if kind == "network" else docker_api.inspect_container)(ident)
    except docker.errors.NotFound:
        return False
    return True


def _ready_entries(executor):  # type: ignore[no-untyped-def]
    """The pool's ready entries (waiting for those still being made)."""
    return [future.result(timeout=300) for future in executor.proxies.ready()]


@contextmanager
def _lease(executor, request: LeaseRequest) -> Iterator:  # type: ignore[no-untyped-def]
    with executor.lease(request) as sandbox:
        yield sandbox


def test_two_attempts_never_share_a_proxy_and_each_goes_with_its_lease(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    plan = _plan(f"allowed.test:{port}")
    with _lease(executor, egress_request(tmp_path, "first")) as first:
        with first.egress_phase("agent", plan, EgressLog(tmp_path / "first.log")):
            assert EGRESS_TOKEN in run_in(first, tmp_path, FETCH + f"http://allowed.test:{port}/")
        spare = _ready_entries(executor)
        assert len(spare) == 1, "one entry made ahead for the next attempt"
        with _lease(executor, egress_request(tmp_path, "second")) as second:
            with second.egress_phase("agent", plan, EgressLog(tmp_path / "second.log")):
                assert EGRESS_TOKEN in run_in(second, tmp_path, FETCH + f"http://allowed.test:{port}/")
            a, b = first.egress.entry, second.egress.entry
            assert a.proxy_id != b.proxy_id and a.network_id != b.network_id
            assert b.proxy_id == spare[0].proxy_id, "the second attempt took the entry made ahead"
            assert _ready_entries(executor)[0].proxy_id not in (a.proxy_id, b.proxy_id), "a new one is made"
            # the first attempt's proxy sees only the first attempt's container on its network
            members = docker_api.inspect_network(a.network_id)["Containers"] or {}
            assert second.id not in members
        assert not _exists(docker_api, "container", b.proxy_id) and not _exists(docker_api, "network", b.network_id)
        assert _exists(docker_api, "container", a.proxy_id), "the first lease still runs"
    assert not _exists(docker_api, "container", a.proxy_id) and not _exists(docker_api, "network", a.network_id)


def test_entries_made_ahead_are_removed_at_close(make_executor, docker_api, egress_upstream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    network, ip, _ = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    with _lease(executor, egress_request(tmp_path, "one")):
        pass
    (entry,) = _ready_entries(executor)
    labels = docker_api.inspect_container(entry.proxy_id)["Config"]["Labels"]
    assert labels[L.CELL] == "spare" and labels[L.OWNER_PID] == str(os.getpid())
    assert docker_api.inspect_network(entry.network_id)["Labels"][L.RUN] == L.run_id()
    executor.close()
    assert not _exists(docker_api, "container", entry.proxy_id)
    assert not _exists(docker_api, "network", entry.network_id)


def test_the_pool_keeps_as_many_entries_ready_as_attempts_ran_at_once(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """With two attempts at once (``--maka-concurrency 2``) two entries are kept ready, so the
    next two attempts that start together both find one; each is claimed once."""
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    plan = _plan(f"allowed.test:{port}")
    with _lease(executor, egress_request(tmp_path, "a")), _lease(executor, egress_request(tmp_path, "b")):
        pass
    ready = _ready_entries(executor)
    assert len(ready) == 2 and len({e.proxy_id for e in ready}) == 2, ready
    assert all(docker_api.inspect_container(e.proxy_id)["Config"]["Labels"][L.CELL] == "spare" for e in ready)
    with _lease(executor, egress_request(tmp_path, "c")) as c, _lease(executor, egress_request(tmp_path, "d")) as d:
        for sandbox, name in ((c, "c"), (d, "d")):
            with sandbox.egress_phase("agent", plan, EgressLog(tmp_path / f"{name}.log")):
                pass
        assert {c.egress.entry.proxy_id, d.egress.entry.proxy_id} == {e.proxy_id for e in ready}
    assert len(_ready_entries(executor)) == 2, "topped up again"
    executor.close()
    assert not any(_exists(docker_api, "container", e.proxy_id) for e in ready)


OWNER = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from pytest_maka.executors.base import LeaseRequest
from pytest_maka.executors.docker import DockerExecutor, DockerOptions
from pytest_maka.testing.conformance import make_cell, make_task
root = Path(sys.argv[2])
task = make_task(root / "task", id="pool-owner-" + os.urandom(3).hex(), docker_image="python:3.11-slim")
(root / "a").mkdir(parents=True)
ex = DockerExecutor(DockerOptions(state_dir=root / "state", egress_network=sys.argv[3]))
req = LeaseRequest(cell=make_cell(task, root), attempt=1, attempt_dir=root / "a", scratch_dir=root / "s", egress=True)
with ex.lease(req):
    pass
entry = ex.proxies.ready()[0].result(timeout=300)
print(json.dumps([entry.proxy_id, entry.network_id]), flush=True)
os._exit(0)  # dies without closing: what a killed worker leaves
"""


def test_entries_of_a_dead_owner_are_removed_by_the_sweep(
    docker_api, egress_upstream, tmp_path: Path, state_dir: Path
) -> None:  # type: ignore[no-untyped-def]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", OWNER, str(root), str(tmp_path / "owner"), egress_upstream[0]],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    proxy, network = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        assert _exists(docker_api, "container", proxy) and _exists(docker_api, "network", network), "left behind"
        engine = Engine(DockerOptions().engine_list()[0], slots=1, state_dir=state_dir, retry_sec=0)
        sweep(engine)
        assert not _exists(docker_api, "container", proxy)
        assert not _exists(docker_api, "network", network)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            docker_api.remove_container(proxy, force=True)
        with contextlib.suppress(docker.errors.NotFound):
            docker_api.remove_network(network)


def test_a_supervisor_that_died_makes_the_next_phase_an_infra_failure(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip}, egress_prestart=False)
    plan = _plan(f"allowed.test:{port}")
    log = EgressLog(tmp_path / "egress.log")
    with _lease(executor, egress_request(tmp_path, "dies")) as sandbox:
        with sandbox.egress_phase("agent", plan, log):
            pass
        proxy = sandbox.egress.entry.proxy_id
        eid = docker_api.exec_create(proxy, ["sh", "-c", "kill -9 -1"], user="0")["Id"]
        docker_api.exec_start(eid)
        with pytest.raises(InfraError, match="egress proxy"), sandbox.egress_phase("verifier", plan, log):
            pytest.fail("the phase must not run behind a dead proxy")
        assert not docker_api.inspect_container(proxy)["State"]["Running"], "the container ended with it"
    assert not _exists(docker_api, "container", proxy)


def test_rules_switch_per_phase_and_the_own_resolver_comes_back_for_other_networks(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Agent and verifier phases in one lease, one proxy: each gets only its own allowlist and
    its own log; after them a command on the executor's own network has its own resolv.conf."""
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, network=network, egress_hosts={"allowed.test": ip,
                             "other.test": ip})  # fmt: skip
    log = EgressLog(tmp_path / "egress.log")
    urls = f"http://allowed.test:{port}/a http://other.test:{port}/b"
    with _lease(executor, egress_request(tmp_path, "switch")) as sandbox:
        own = run_in(sandbox, tmp_path, "cat /etc/resolv.conf", network=False)
        with sandbox.egress_phase("agent", _plan(f"allowed.test:{port}"), log):
            agent = run_in(sandbox, tmp_path, FETCH + urls)
            proxied_resolv = run_in(sandbox, tmp_path, "cat /etc/resolv.conf")
        with sandbox.egress_phase("verifier", _plan(f"other.test:{port}"), log):
            verifier = run_in(sandbox, tmp_path, FETCH + urls)
        direct = run_in(sandbox, tmp_path, "cat /etc/resolv.conf")  # joins the executor's network, no proxy
    assert agent.count(EGRESS_TOKEN) == 1 and f"allowed.test:{port}/a {EGRESS_TOKEN}" in agent, agent
    assert verifier.count(EGRESS_TOKEN) == 1 and f"other.test:{port}/b {EGRESS_TOKEN}" in verifier, verifier
    by_phase = {(e.phase, e.destination): e.allowed for e in log.events() if e.method == "GET"}
    assert by_phase == {
        ("agent", f"allowed.test:{port}"): True, ("agent", f"other.test:{port}"): False,
        ("verifier", f"allowed.test:{port}"): False, ("verifier", f"other.test:{port}"): True,
    }  # fmt: skip
    assert proxied_resolv.startswith("nameserver ") and own != proxied_resolv
    assert direct == own, "the container's own resolver is back for a network of its own"


def test_the_pool_keeps_the_concurrency_it_is_told_ready_from_the_first_lease(
    make_executor, docker_api, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``concurrency: 3`` (what ``--maka-concurrency 3`` sets): after one lease, three entries
    are ready, so three attempts that start together all find one."""
    network, ip, _ = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip}, concurrency=3)
    with _lease(executor, egress_request(tmp_path, "one")):
        pass
    ready = _ready_entries(executor)
    assert len(ready) == 3 and len({e.proxy_id for e in ready}) == 3, ready
    with contextlib.ExitStack() as stack:
        leases = [stack.enter_context(_lease(executor, egress_request(tmp_path, n))) for n in "abc"]
        claimed = {s.egress._claimed.result(timeout=300).proxy_id for s in leases}
    assert claimed == {e.proxy_id for e in ready}, "each took one made ahead"
    executor.close()
    assert not any(_exists(docker_api, "container", e.proxy_id) for e in ready)


SEND_UDP = (
    "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{ip}', {port}))\""
)


def test_packets_past_the_proxy_are_counted_in_the_phase_that_sent_them(
    make_executor, egress_upstream, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A phase whose commands never join the network collects no packets (none can be from the
    internal subnet), and every phase that sent some gets exactly its own, also when a phase
    with no network comes between them and when phases follow one another at once."""
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    plan = _plan(f"allowed.test:{port}")
    log = EgressLog(tmp_path / "egress.log")
    with _lease(executor, egress_request(tmp_path, "counts")) as sandbox:
        with sandbox.egress_phase("setup", plan, log):
            run_in(sandbox, tmp_path, SEND_UDP.format(ip="10.255.0.1", port=9001))
        with sandbox.egress_phase("agent", plan, log):
            run_in(sandbox, tmp_path, "true", network=False)
            run_in(sandbox, tmp_path, SEND_UDP.format(ip="10.255.0.2", port=9002), network=False)
        with sandbox.egress_phase("verifier", plan, log):
            run_in(sandbox, tmp_path, SEND_UDP.format(ip="10.255.0.3", port=9003))
            run_in(sandbox, tmp_path, SEND_UDP.format(ip="10.255.0.4", port=9004))
        assert sandbox.egress.guards, "the packet logger ran"
    past = [(e.phase, e.method, e.destination) for e in log.events() if e.reason == PAST_PROXY]
    assert past == [
        ("setup", "UDP", "10.255.0.1:9001"),
        ("verifier", "UDP", "10.255.0.3:9003"),
        ("verifier", "UDP", "10.255.0.4:9004"),
    ], past
    assert log.summary("agent")["connections"] == {"allowed": 0, "refused": 0}
    assert log.summary("verifier")["connections"] == {"allowed": 0, "refused": 2}
    lines = [json.loads(x) for x in log.path.read_text().splitlines()]
    assert [(x["phase"], x["destination"]) for x in lines] == [(p, d) for p, _, d in past], "egress.log says the same"


def test_the_plugin_passes_its_concurrency_to_the_executor_options(pytester: pytest.Pytester) -> None:
    """``--maka-concurrency 3`` reaches ``DockerOptions.concurrency`` unless the spec sets it."""
    from pytest_maka.engine.engine import with_concurrency
    from pytest_maka.plugin.scale import concurrency

    config = pytester.parseconfig("--maka-concurrency", "3")
    assert with_concurrency(DockerOptions(), lambda: concurrency(config)).concurrency == 3  # type: ignore[attr-defined]
    assert with_concurrency(DockerOptions(concurrency=2), lambda: concurrency(config)).concurrency == 2  # type: ignore[attr-defined]
    default = pytester.parseconfig()
    assert with_concurrency(DockerOptions(), lambda: concurrency(default)).concurrency == 1  # type: ignore[attr-defined]


def test_the_next_attempts_proxy_is_made_only_after_this_attempts_first_networked_command(
    make_executor, docker_api, egress_upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Making a spare entry (a network and a container) costs the engine more than the attempt's
    first networked command: it waits until that command is done, then tops the pool up."""
    monkeypatch.setattr(proxies, "SPARE_WAIT_SEC", 600.0)  # however slow the machine: only the command ends the wait
    network, ip, port = egress_upstream
    executor = make_executor(egress_network=network, egress_hosts={"allowed.test": ip})
    with _lease(executor, egress_request(tmp_path, "first")):
        pass
    [ready] = _ready_entries(executor)
    with _lease(executor, egress_request(tmp_path, "second")) as sandbox:
        sandbox.egress.prepare(sandbox.id)
        assert sandbox.egress._claimed.result(timeout=300).proxy_id == ready.proxy_id, "the ready one"
        time.sleep(1.5)
        pending = executor.proxies.ready()
        assert len(pending) == 1 and not pending[0].done(), "nothing made before the first networked command"
        with sandbox.egress_phase("agent", _plan(f"allowed.test:{port}"), EgressLog(tmp_path / "e.log")):
            run_in(sandbox, tmp_path, "true")
            assert sandbox.egress.settled.is_set()
            spare = pending[0].result(timeout=300)
    assert spare.proxy_id != ready.proxy_id and _exists(docker_api, "container", spare.proxy_id)
