"""Compose tasks as Harbor 0.25 writes and reads them, run unchanged on the Docker executor.

Harbor merges the task's ``environment/docker-compose.yaml`` over its own base file (``main``
built from ``environment/Dockerfile``, kept alive, its logs mounted, its resources limited) and
sets its variables (``CONTEXT_DIR``, ``MAIN_IMAGE_NAME``, ``HOST_VERIFIER_LOGS_PATH``, ``CPUS``, ...).
So a task's ``main`` may name no build and no image (Compose alone rejected the project:
"service main has neither an image nor a build context", three infra_failure attempts), use
Harbor's variables (the shape ``harbor tasks migrate`` writes), or be absent. Each recipe runs
with the oracle (reward 1) and nop (reward 0); a file Compose rejects is skipped at collection, named.
"""

from __future__ import annotations

import json

import pytest

from pytest_maka.executors.docker.compose import compose_command

from ..conftest import Cohort
from ..docker.test_image_run import harbor_task
from .conftest import docker_executor

pytestmark = [
    pytest.mark.docker,
    pytest.mark.usefixtures("docker_engine"),
    pytest.mark.skipif(compose_command() is None, reason="Docker Compose v2 (the 'docker compose' plugin) is absent"),
]

SIDECAR = """\
  db:
    image: python:3.11-slim
    command: ["sh", "-c", "mkdir -p /srv && echo from-db > /srv/v.txt && exec python3 -m http.server 8000 -d /srv"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/v.txt')"]
      interval: 1s
      retries: 60
"""
RECIPES = {
    # `harbor tasks init`'s shape: main names neither build nor image (Harbor's base file gives them)
    "init-shape": "services:\n  main:\n    depends_on:\n      db:\n        condition: service_healthy\n"
    "    environment:\n      - DB_URL=http://db:8000\n" + SIDECAR,
    # `harbor tasks migrate`'s shape: main spelled out with Harbor's variables
    "migrated-shape": """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - TEST_DIR=${TEST_DIR}
      - DB_URL=http://db:8000
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
"""
    + SIDECAR,
    # sidecars only: main is the base file's alone
    "sidecar-only": "services:\n" + SIDECAR,
}
FETCH = (
    "import os, urllib.request as u; "
    "print(u.urlopen(os.environ.get('DB_URL', 'http://db:8000') + '/v.txt', timeout=10).read().decode().strip())"
)
SOLVE = f'python3 -c "{FETCH}" > /app/out.txt\n'
TEST = f"""\
if [ "$(cat /app/out.txt 2>/dev/null)" = from-db ] && [ "$(python3 -c "{FETCH}")" = from-db ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""
DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\n"


def test_compose_recipes_harbor_runs_run_here_with_harbors_verdicts(cohort: Cohort) -> None:
    for name, compose in RECIPES.items():
        more = "cpus = 64" if name == "migrated-shape" else ""  # beyond any engine here: clamped, recorded
        task = harbor_task(cohort.tasks, name, dockerfile=DOCKERFILE, solve=SOLVE, test=TEST, environment=more)
        (task / "environment" / "docker-compose.yaml").write_text(compose)
    rejected = harbor_task(cohort.tasks, "rejected", dockerfile=DOCKERFILE, solve=SOLVE, test=TEST)
    (rejected / "environment" / "docker-compose.yaml").write_text(
        "services:\n  db:\n    image: python:3.11-slim\n    depends_on: [nowhere]\n"
    )
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor=docker_executor(cohort.root),
        retries={"infra": 2},
    )
    result = cohort.run_subprocess("-n", "2", timeout=1200)
    out = result.stdout.str()
    status = cohort.status()
    for name in RECIPES:
        assert status[f"{name}[oracle-r0]"] == "agent_success", out[-4000:]
        assert status[f"{name}[nop-r0]"] == "agent_failure", out[-4000:]
    results = cohort.results()
    limits = results["migrated-shape[oracle-r0]"]["isolation"]["limits"]
    assert limits["cpus_declared"] == 64 and 0 < limits["cpus"] < 64, limits
    assert limits["note"] == f"the task declares 64 CPUs; the engine has {limits['cpus']:g}: clamped", limits
    assert "cpus_declared" not in results["init-shape[oracle-r0]"]["isolation"]["limits"]
    skipped = json.loads((cohort.out / "lock.json").read_text())["runs"][-1]["skipped"]
    for cell in ("rejected[oracle-r0]", "rejected[nop-r0]"):
        assert cell not in results, results[cell]
        message = skipped[cell]
        assert "docker-compose.yaml: rejected by Docker Compose: " in message, message
        assert "nowhere" in message, message
