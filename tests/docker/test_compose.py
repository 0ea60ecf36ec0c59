"""Multi-container environments through the real Docker Compose v2: sidecars, health, no route out."""

from __future__ import annotations

import os
import shutil
import signal
import textwrap
import uuid

import pytest

from pytest_maka.benchmarks.harbor import load_task
from pytest_maka.core.errors import TaskError
from pytest_maka.executors.docker import DockerOptions
from pytest_maka.executors.docker import labels as L
from pytest_maka.executors.docker.cleanup import sweep
from pytest_maka.executors.docker.engines import Engine

from ..conftest import Cohort
from .helpers import start_run, wait_until
from .test_image_run import harbor_task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.needs("compose"),
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


# --- the main service's own keys ----------------------------------------------------------
MAIN_KEYS_COMPOSE = """\
services:
  main:
    build:
      context: .
    environment:
      - FROM_COMPOSE=yes
      - HARBOR_STYLE=list
    working_dir: /work
    volumes:
      - shared:/data
      - ./seed:/seed
    extra_hosts:
      - "alias.test:10.9.8.7"
    shm_size: "96m"
    cap_drop: [CHOWN]
    depends_on: [db]
  db:
    image: python:3.11-slim
    command: ["sh", "-c", "echo from-sidecar > /data/sidecar.txt; exec sleep infinity"]
    volumes: [shared:/data]
    healthcheck:
      test: ["CMD", "test", "-f", "/data/sidecar.txt"]
      interval: 1s
      retries: 60
volumes:
  shared: {}
"""
MAIN_KEYS_SOLVE = "cat /data/sidecar.txt > /work/out.txt\necho planted > /seed/planted.txt\n"
CAP_CHOWN_BIT = "python3 -c \"print(int(open('/proc/self/status').read().split('CapBnd:')[1].split()[0], 16) & 1)\""
MAIN_KEYS_TEST = f"""\
fail() {{ echo "$1" >&2; echo 0 > /logs/verifier/reward.txt; exit 0; }}
[ "$FROM_COMPOSE" = yes ] || fail "environment: FROM_COMPOSE=$FROM_COMPOSE"
[ "$(pwd)" = /work ] || fail "working_dir: $(pwd)"
getent hosts alias.test | grep -q 10.9.8.7 || fail "extra_hosts: $(cat /etc/hosts)"
[ "$(df -k /dev/shm | awk 'NR==2 {{print $2}}')" = 98304 ] || fail "shm_size: $(df -k /dev/shm)"
[ "$({CAP_CHOWN_BIT})" = 0 ] || fail "cap_drop: CHOWN still in the bounding set"
[ "$(cat /seed/seed.txt)" = seeded ] || fail "bind: $(ls -la /seed)"
[ "$(cat /work/out.txt)" = from-sidecar ] || fail "named volume: $(cat /work/out.txt)"
echo 1 > /logs/verifier/reward.txt
"""


def test_the_main_services_own_keys_reach_the_main_container(cohort: Cohort, docker_api, tmp_path_factory) -> None:
    """environment, working_dir, a named volume shared with a sidecar, a bind (a copy: the task's
    directory is not written), extra_hosts, shm_size, cap_drop; the volume goes with the lease."""
    task = harbor_task(
        cohort.tasks, "main-keys", dockerfile=MAIN_DOCKERFILE, solve=MAIN_KEYS_SOLVE, test=MAIN_KEYS_TEST
    )
    (task / "environment" / "docker-compose.yaml").write_text(MAIN_KEYS_COMPOSE)
    (task / "environment" / "seed").mkdir()
    (task / "environment" / "seed" / "seed.txt").write_text("seeded\n")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "state_dir": str(tmp_path_factory.mktemp("state"))},
        retries={"infra": 0},
    )
    result = cohort.run_subprocess("-n", "2", timeout=900)
    assert cohort.status() == {"main-keys[oracle-r0]": "agent_success", "main-keys[nop-r0]": "agent_failure"}, (
        result.stdout.str()[-3000:]
    )
    assert not (task / "environment" / "seed" / "planted.txt").exists(), "a writable bind wrote into the task"
    assert_project_gone(cohort, docker_api, 2)
    for log in cohort.out.glob("cells/*/attempt-1/compose.log"):
        project = log.read_text().split()[4]
        volumes = docker_api.volumes(filters={"label": f"com.docker.compose.project={project}"})["Volumes"]
        assert not volumes, volumes


def _harbor_compose(root, name: str, main: str):  # type: ignore[no-untyped-def]
    test = "echo 1 > /logs/verifier/reward.txt\n"
    task = harbor_task(root, name, dockerfile=MAIN_DOCKERFILE, solve="true\n", test=test)
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build: {context: .}\n" + textwrap.indent(textwrap.dedent(main), "    ")
    )
    return task


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        ("volumes: ['/:/host']", "services.main.volumes[0]: binds '/', outside the task's environment directory"),
        ("volumes: ['../..:/up']", "services.main.volumes[0]: binds '../..', outside"),
        ("volumes: ['nope:/data']", "services.main.volumes[0]: names volume 'nope', not declared"),
    ],
)
def test_a_main_service_that_binds_outside_its_environment_is_an_invalid_task(tmp_path, main, expected) -> None:  # type: ignore[no-untyped-def]
    task = _harbor_compose(tmp_path, "bad-bind", main)
    with pytest.raises(TaskError) as err:
        load_task(task)
    message = str(err.value)
    assert "docker-compose.yaml" in message and expected in message and "\n" not in message, message


def test_an_unsupported_main_key_skips_the_task_with_its_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    privileged = load_task(_harbor_compose(tmp_path, "privileged", "privileged: true"))
    assert privileged.unsupported and "services.main.privileged is not supported" in privileged.unsupported
    admin = load_task(_harbor_compose(tmp_path, "admin", "cap_add: [SYS_ADMIN]"))
    assert admin.unsupported and "services.main.cap_add: SYS_ADMIN is not granted" in admin.unsupported
    fine = load_task(_harbor_compose(tmp_path, "fine", "cap_add: [NET_RAW]\nworking_dir: /srv\ncontainer_name: x"))
    assert fine.unsupported is None and fine.workdir == "/srv"


# --- Ctrl-C and killed runs: the project's volumes go too -------------------------------------
KILLED_COMPOSE = """\
services:
  main:
    build:
      context: .
    volumes: [state:/state]
  db:
    image: python:3.11-slim
    command: ["sleep", "infinity"]
    volumes: [cache:/cache]
volumes:
  state: {}
  cache: {}
"""


def _volumes_of(docker_api, task_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    found = docker_api.volumes(filters={"label": f"{L.TASK}={task_id}"})["Volumes"] or []
    return sorted(v["Name"] for v in found)


def _project_up(docker_api, task_id: str) -> bool:  # type: ignore[no-untyped-def]
    """Both named volumes exist and the sidecar and the main container run."""
    running = docker_api.containers(filters={"label": f"{L.TASK}={task_id}"})
    return len(_volumes_of(docker_api, task_id)) == 2 and len(running) >= 2


def _sleeping_project(cohort: Cohort, prefix: str, state):  # type: ignore[no-untyped-def]
    """A compose task (main service and a sidecar, each with a named volume) whose subject sleeps."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    task = harbor_task(cohort.tasks, name, dockerfile=MAIN_DOCKERFILE, solve="true\n", test="true\n")
    (task / "environment" / "docker-compose.yaml").write_text(KILLED_COMPOSE)
    cohort.write(
        subjects=[{"name": "a", "kind": "command", "command": "sleep 300"}],
        executor={"kind": "docker", "state_dir": str(state)},
        retries={"infra": 0},
    )
    return name


def _assert_no_project_left(docker_api, name: str) -> None:  # type: ignore[no-untyped-def]
    assert _volumes_of(docker_api, name) == []
    assert docker_api.containers(all=True, filters={"label": f"{L.TASK}={name}"}) == []
    assert docker_api.networks(filters={"label": f"{L.TASK}={name}"}) == []


def test_a_killed_runs_volumes_are_removed_by_docker_cleanup(cohort: Cohort, docker_api, tmp_path_factory) -> None:
    state = tmp_path_factory.mktemp("state")
    name = _sleeping_project(cohort, "killed", state)
    proc = start_run(cohort)
    try:
        # both containers up, not only the volumes: killed while compose still creates the
        # sidecar, the engine can finish making it after a sweep listed the containers
        running = wait_until(lambda: _project_up(docker_api, name), 300, proc)
        assert running, "the main service's and the sidecar's volume and containers while running"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert len(_volumes_of(docker_api, name)) == 2, "a killed run removes nothing"
        engine = Engine(DockerOptions().engine_list()[0], slots=1, state_dir=state, retry_sec=0)
        sweep(engine)  # (a concurrent run's sweep may have removed them first)
        _assert_no_project_left(docker_api, name)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_removes_the_whole_project_volumes_included(cohort: Cohort, docker_api, tmp_path_factory) -> None:
    """Ctrl-C mid-attempt: the run ends on its own and the project (main container, sidecar,
    network, both named volumes) is gone without any sweep."""
    name = _sleeping_project(cohort, "sigint", tmp_path_factory.mktemp("state"))
    proc = start_run(cohort)
    try:
        running = wait_until(lambda: _project_up(docker_api, name), 300, proc)
        assert running, "the project's volumes and containers while the subject runs"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
        assert b"Traceback" not in out, out.decode(errors="replace")[-2000:]
        _assert_no_project_left(docker_api, name)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
