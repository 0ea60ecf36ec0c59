"""Egress on the Docker executor leaves nothing: Ctrl-C, dead runs swept, a proxy or logger that cannot start."""

from __future__ import annotations

import contextlib
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
from pytest_maka.executors.docker.engines import Engine

from ..conftest import Cohort
from .helpers import FETCH, egress_executor, egress_leftovers, start_run, wait_until

pytestmark = pytest.mark.docker


def test_ctrl_c_removes_egress_networks_and_proxies(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, _, port = egress_upstream
    prefix = f"egress-slow-{uuid.uuid4().hex[:8]}"
    for i in range(2):
        cohort.task(f"{prefix}-{i}", agent_timeout=300)
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + f"http://allowed.test:{port}/x; sleep 300"}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
        policy={"egress": [f"allowed.test:{port}"]},
    )
    proc = start_run(cohort, "-n", "2")
    try:
        wait_until(
            lambda: len(egress_leftovers(docker_api, prefix)) >= 4 and len(_guard_hosts(docker_api, proc.pid)) == 2,
            180,
        )
        assert len(egress_leftovers(docker_api, prefix)) == 4, "two networks and proxies"
        hosts = _guard_hosts(docker_api, proc.pid)  # one per worker, where the packet loggers run
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert egress_leftovers(docker_api, prefix) == [], out.decode(errors="replace")[-3000:]
    assert [h for h in hosts if docker_api.containers(all=True, filters={"id": h})] == [], "no guard host is left"


def _guard_hosts(docker_api, controller: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The guard hosts of the run whose controller is ``controller`` (made by its xdist workers)."""

    def parent(pid: str) -> int:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return -1

    found = docker_api.containers(all=True, filters={"label": f"{L.ROLE}=egress-guard-host"})
    return [c["Id"] for c in found if parent(c["Labels"].get(L.OWNER_PID, "0")) == controller]


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


def test_docker_cleanup_removes_packet_loggers_of_dead_runs(docker_api, state_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """A helper sharing a dead attempt container's namespace goes with it, whichever is listed first.

    Their owner is a live process until both run, and dies only then: a container labelled
    dead from its creation is fair game for the sweep of any run going on meanwhile (another
    test's), which once removed the attempt container before its helper could join it.
    """
    owner = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    cell = f"dead-guard-{uuid.uuid4().hex[:8]}"
    start = L.process_start(owner.pid)
    assert start is not None
    labels = {**L.owner_labels(), L.OWNER_PID: str(owner.pid), L.OWNER_START: start, L.CELL: cell}
    made = []
    try:
        box = docker_api.create_container("python:3.11-slim", ["sleep", "infinity"], labels=labels)["Id"]
        made.append(box)
        docker_api.start(box)
        host_config = docker_api.create_host_config(network_mode=f"container:{box}", cap_drop=["ALL"])
        guard = docker_api.create_container(
            "python:3.11-slim",
            ["sleep", "infinity"],
            labels={**labels, L.ROLE: "egress-guard"},
            host_config=host_config,
        )["Id"]
        made.append(guard)
        docker_api.start(guard)
        owner.kill()
        owner.wait()  # now the run that made them is dead
        engine = Engine(DockerOptions().engine_list()[0], slots=1, state_dir=state_dir, retry_sec=0)
        sweep(engine)
        assert egress_leftovers(docker_api, cell) == []
        assert not docker_api.containers(all=True, filters={"label": f"{L.CELL}={cell}"})
    finally:
        owner.kill()
        owner.wait()
        for cid in reversed(made):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):  # gone, or going (409)
                docker_api.remove_container(cid, force=True)


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
    assert egress_leftovers(docker_api, "egress-broken") == []
