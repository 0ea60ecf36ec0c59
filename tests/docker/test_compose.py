"""Multi-container environments through the real Docker Compose v2: sidecars, health, no route out."""

from __future__ import annotations

import shutil
import textwrap

import pytest

from pytest_maka.executors.docker.compose import compose_command

from ..conftest import Cohort
from .test_image_run import harbor_task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        compose_command() is None,
        reason="Docker Compose v2 (the 'docker compose' plugin) is not installed; .ci/run installs it",
    ),
]

COMPOSE = """\
services:
  main:
    build:
      context: .
    depends_on:
      db:
        condition: service_healthy
  db:
    build:
      context: ./db
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      timeout: 5s
      retries: 60
"""
#: The sidecar is healthy only a moment after it starts: main must not start before.
DB_DOCKERFILE = """\
FROM python:3.11-slim
RUN mkdir -p /srv && echo from-sidecar > /srv/index.txt
CMD ["sh", "-c", "sleep 2; touch /tmp/ready; exec python3 -m http.server 8000 --directory /srv"]
"""
MAIN_DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\n"
FETCH = "import urllib.request as u; print(u.urlopen('http://db:8000/index.txt', timeout=5).read().decode().strip())"
SOLVE = f'python3 -c "{FETCH}" > /app/out.txt\n'
#: The sidecar answers the verifier too; the project's network has no route out.
TEST = f"""\
out=$(cat /app/out.txt); again=$(python3 -c "{FETCH}")
if python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)" 2>/dev/null; then
  echo "the internet is reachable" >&2; echo 0 > /logs/verifier/reward.txt
elif [ "$out" = from-sidecar ] && [ "$again" = from-sidecar ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "out=$out again=$again" >&2; echo 0 > /logs/verifier/reward.txt
fi
"""


def assert_project_gone(cohort: Cohort, docker_api, attempts: int) -> None:
    """Every attempt had its own project; its containers (the main one too) and network are gone."""
    logs = sorted(cohort.out.glob("cells/*/attempt-1/compose.log"))
    projects = {line.split()[4] for log in logs for line in log.read_text().splitlines() if line.startswith("$ ")}
    assert len(logs) == attempts and len(projects) == attempts, projects
    for project in projects:
        label = {"label": f"com.docker.compose.project={project}"}
        assert docker_api.containers(all=True, filters=label) == []
        assert docker_api.networks(names=[f"{project}_default"]) == []
    for record in cohort.results().values():
        main = record["isolation"]["container"]
        assert docker_api.containers(all=True, filters={"id": main}) == [], main


def test_sidecars_come_up_healthy_share_a_closed_network_and_go_with_the_lease(
    cohort: Cohort, docker_api, tmp_path_factory
) -> None:
    task = harbor_task(cohort.tasks, "with-db", dockerfile=MAIN_DOCKERFILE, solve=SOLVE, test=TEST)
    (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    (task / "environment" / "db").mkdir()
    (task / "environment" / "db" / "Dockerfile").write_text(textwrap.dedent(DB_DOCKERFILE))
    state = tmp_path_factory.mktemp("state")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "state_dir": str(state)},
        retries={"infra": 0},
    )
    try:
        result = cohort.run_subprocess("-n", "2", timeout=900)
        status = cohort.status()
        assert status == {"with-db[oracle-r0]": "agent_success", "with-db[nop-r0]": "agent_failure"}, (
            result.stdout.str()[-3000:]
        )
        # every attempt its own project, all of it removed with the lease
        assert_project_gone(cohort, docker_api, 2)
        # the sidecar image is tagged by its context's digest: one image for both attempts
        tags = [t for img in docker_api.images() for t in img.get("RepoTags") or [] if "pytest-maka-sidecar-db" in t]
        assert len(tags) == 1, tags
    finally:
        for img in docker_api.images():
            for t in img.get("RepoTags") or []:
                if t.startswith("pytest-maka-sidecar-db:"):
                    docker_api.remove_image(t, force=True)


TB_SIDECAR = """\
  server:
    image: python:3.11-slim
    container_name: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__server
    command: ["python3", "-m", "http.server", "8000"]
    healthcheck:
      test: ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000')"]
      interval: 1s
      retries: 30
"""


def test_a_legacy_terminal_bench_task_with_a_sidecar_runs(cohort: Cohort, docker_api, tmp_path_factory) -> None:
    """A Terminal-Bench compose file with more than ``client``: the sidecar is reachable by name."""
    from tests.adapters.conftest import copy_sample

    tb = copy_sample("terminal-bench", cohort.root / "tb")
    task = tb / "count-log-lines"
    for other in tb.iterdir():
        if other.is_dir() and other != task:
            shutil.rmtree(other)
    compose = task / "docker-compose.yaml"
    compose.write_text(compose.read_text() + TB_SIDECAR)
    solution = task / "solution.sh"
    reach = "python3 -c \"import urllib.request as u; u.urlopen('http://server:8000', timeout=5)\" || exit 1\n"
    lines = solution.read_text().splitlines(keepends=True)
    solution.write_text(lines[0] + reach + "".join(lines[1:]))
    state = tmp_path_factory.mktemp("state")
    cohort.write(
        tasks=[{"path": "tb"}],
        subjects=[{"name": "oracle", "kind": "oracle"}],
        executor={"kind": "docker", "state_dir": str(state)},
        retries={"infra": 0},
    )
    result = cohort.run_subprocess(timeout=900)
    assert cohort.status() == {"count-log-lines[oracle-r0]": "agent_success"}, result.stdout.str()[-3000:]
    assert_project_gone(cohort, docker_api, 1)
