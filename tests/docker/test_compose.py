"""Multi-container environments through the real Docker Compose v2: sidecars, health, no route out."""

from __future__ import annotations

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
        label = {"label": "io.pytest-maka.task=with-db"}
        assert docker_api.containers(all=True, filters=label) == []
        assert docker_api.networks(filters=label) == []
        logs = sorted(cohort.out.glob("cells/with-db*/attempt-1/compose.log"))
        assert len(logs) == 2
        # the sidecar image is tagged by its context's digest: one image for both attempts
        tags = [t for img in docker_api.images() for t in img.get("RepoTags") or [] if "pytest-maka-sidecar-db" in t]
        assert len(tags) == 1, tags
    finally:
        for img in docker_api.images():
            for t in img.get("RepoTags") or []:
                if t.startswith("pytest-maka-sidecar-db:"):
                    docker_api.remove_image(t, force=True)
