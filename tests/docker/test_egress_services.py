"""Egress beside compose sidecars: the ``services`` mode and an allowlist next to the project's network."""

from __future__ import annotations

import uuid

import pytest

from pytest_maka.testing.servers import EGRESS_TOKEN

from ..conftest import Cohort
from .helpers import FETCH, egress_executor, egress_leftovers

pytestmark = pytest.mark.docker


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


@pytest.mark.needs("compose")
def test_services_mode_reaches_the_sidecars_by_name_and_nothing_else(
    cohort: Cohort, docker_api, egress_upstream, tmp_path_factory: pytest.TempPathFactory
) -> None:  # type: ignore[no-untyped-def]
    _, ip, port = egress_upstream
    task = f"egress-services-{uuid.uuid4().hex[:8]}"
    _sidecar_task(cohort, task)
    urls = f"http://web:8000/index.txt http://{ip}:{port}/direct"
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": FETCH + urls + " > $MAKA_LOGS_DIR/net.txt"}],
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
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
    assert egress_leftovers(docker_api, task) == []


@pytest.mark.needs("compose")
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
        executor=egress_executor(tmp_path_factory.mktemp("state"), egress_upstream),
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
    assert egress_leftovers(docker_api, task) == []


#: Tries a UDP send and a TCP connect past the proxy; prints what it got.
