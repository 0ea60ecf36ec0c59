"""The image runs as Harbor runs it: its ENV, its ENTRYPOINT, its users, its healthcheck.

Tasks are written the way ``harbor tasks init`` (Harbor 0.25, schema 1.4) writes them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ..conftest import Cohort

pytestmark = pytest.mark.docker

HEAD = """\
schema_version = "1.4"
artifacts = []

[task]
name = "maka/{name}"
version = "1.0.0"
description = ""
authors = []
keywords = []

[metadata]

[verifier]
timeout_sec = 120.0
environment_mode = "shared"
collect = []
{verifier}
[verifier.env]

[agent]
timeout_sec = 120.0
{agent}
[environment]
network_mode = "no-network"
build_timeout_sec = 600.0
os = "linux"
mcp_servers = []
{environment}
[environment.env]

[solution.env]
"""


def harbor_task(
    root: Path,
    name: str,
    *,
    dockerfile: str,
    solve: str,
    test: str,
    files: dict[str, str] | None = None,
    agent: str = "",
    verifier: str = "",
    environment: str = "",
) -> Path:
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    toml = HEAD.format(name=name, agent=agent, verifier=verifier, environment=environment)
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text(f"Solve {name}.\n")
    (task / "environment" / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    for rel, content in (files or {}).items():
        path = task / "environment" / rel
        path.write_text(textwrap.dedent(content))
        path.chmod(0o755)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nset -e\n" + textwrap.dedent(solve))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))
    return task


ENTRY = """\
#!/bin/sh
# starts the service the task is about, then runs what it is given (Harbor's keep-alive)
python3 -m http.server 8765 --bind 127.0.0.1 --directory /srv >/dev/null 2>&1 &
exec "$@"
"""

ENV_IMAGE = """\
FROM python:3.11-slim
RUN mkdir -p /opt/tools/bin /srv /app && printf '#!/bin/sh\\necho tool-ok\\n' > /opt/tools/bin/mytool \\
    && chmod 755 /opt/tools/bin/mytool && echo served > /srv/index.txt
ENV PATH=/opt/tools/bin:$PATH MY_SETTING=from-image
COPY entry.sh /entry.sh
ENTRYPOINT ["/entry.sh"]
WORKDIR /app
"""

#: The image's ENV and its ENTRYPOINT's service, seen by both the agent and the verifier.
FETCH = "FETCH=\"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/index.txt').read().decode())\"\n"
ENV_SOLVE = (
    FETCH
    + """\
mytool > /app/out.txt
echo "$MY_SETTING" >> /app/out.txt
python3 -c "$FETCH" >> /app/out.txt
"""
)
ENV_TEST = (
    FETCH
    + """\
expected=$'tool-ok\\nfrom-image\\nserved'
served=$(python3 -c "$FETCH")
if [ "$(cat /app/out.txt)" = "$expected" ] && [ "$(mytool)" = tool-ok ] && [ "$served" = served ]; then
  echo 1 > /logs/verifier/reward.txt
else
  { echo "out: $(cat /app/out.txt)"; echo "PATH=$PATH"; echo "served=$served"; } >&2
  echo 0 > /logs/verifier/reward.txt
fi
"""
)

USERS_IMAGE = """\
FROM python:3.11-slim
RUN useradd -m -u 1234 agent && useradd -m -u 2345 checker && mkdir -p /app && chown agent /app
WORKDIR /app
"""
USERS_SOLVE = 'echo "$(id -un) $HOME" > /app/who.txt\n'
USERS_TEST = """\
if [ "$(cat /app/who.txt)" = "agent /home/agent" ] && [ "$(id -un)" = checker ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "who: $(cat /app/who.txt); verifier: $(id -un)" >&2; echo 0 > /logs/verifier/reward.txt
fi
"""

HEALTH_ENTRY = """\
#!/bin/sh
# the service becomes ready a moment after the container starts
(sleep 1; touch /tmp/ready) &
exec "$@"
"""
HEALTH_IMAGE = """\
FROM debian:bookworm-slim
COPY entry.sh /entry.sh
ENTRYPOINT ["/entry.sh"]
WORKDIR /app
"""
PASS_TEST = "echo 1 > /logs/verifier/reward.txt\n"


def test_image_env_entrypoint_users_and_healthchecks(cohort: Cohort, docker_api, tmp_path_factory) -> None:
    tasks = cohort.tasks
    harbor_task(tasks, "image-env", dockerfile=ENV_IMAGE, files={"entry.sh": ENTRY}, solve=ENV_SOLVE, test=ENV_TEST)
    users = 'user = "{}"\n'
    harbor_task(
        tasks,
        "users",
        dockerfile=USERS_IMAGE,
        solve=USERS_SOLVE,
        test=USERS_TEST,
        agent=users.format("agent"),
        verifier=users.format("checker"),
    )
    harbor_task(
        tasks, "ghost-user", dockerfile=USERS_IMAGE, solve="true\n", test=PASS_TEST, agent=users.format("ghost")
    )
    check = (
        '[environment.healthcheck]\ncommand = "{}"\ninterval_sec = 0.2\ntimeout_sec = 5.0\n'
        "start_period_sec = {}\nstart_interval_sec = 0.1\nretries = 3\n"
    )
    harbor_task(
        tasks,
        "healthy",
        dockerfile=HEALTH_IMAGE,
        files={"entry.sh": HEALTH_ENTRY},
        solve="test -f /tmp/ready\n",
        test="if [ -f /tmp/ready ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        environment=check.format("test -f /tmp/ready", 30.0),
    )
    harbor_task(
        tasks,
        "unhealthy",
        dockerfile=HEALTH_IMAGE,
        files={"entry.sh": HEALTH_ENTRY},
        solve="true\n",
        test=PASS_TEST,
        environment=check.format("test -f /tmp/never", 0.0),
    )
    harbor_task(
        tasks,
        "entrypoint-exits",
        dockerfile='FROM debian:bookworm-slim\nENTRYPOINT ["sh", "-c", "echo entry-broke >&2; exit 3"]\n',
        solve="true\n",
        test=PASS_TEST,
    )
    state = tmp_path_factory.mktemp("state")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(state)},
        retries={"infra": 0},
    )
    result = cohort.run_subprocess("-n", "2", timeout=900)
    status = cohort.status()
    out = result.stdout.str()[-3000:]
    assert {k: v for k, v in status.items() if "oracle" in k} == {
        "image-env[oracle-r0]": "agent_success",
        "users[oracle-r0]": "agent_success",
        "ghost-user[oracle-r0]": "infra_failure",
        "healthy[oracle-r0]": "agent_success",
        "unhealthy[oracle-r0]": "infra_failure",
        "entrypoint-exits[oracle-r0]": "infra_failure",
    }, out
    # the verifiers are not trivially passing: the nop subject fails where work is needed
    assert status["image-env[nop-r0]"] == "agent_failure" and status["users[nop-r0]"] == "agent_failure"
    records = cohort.results()
    ghost = records["ghost-user[oracle-r0]"]["error"]["message"]
    assert "[agent] user 'ghost'" in ghost and "/etc/passwd" in ghost
    unhealthy = records["unhealthy[oracle-r0]"]["error"]["message"]
    assert "healthcheck 'test -f /tmp/never' failed 3 times" in unhealthy
    broke = records["entrypoint-exits[oracle-r0]"]["error"]["message"]
    assert "ENTRYPOINT" in broke and "entry-broke" in broke and "code 3" in broke
    assert docker_api.containers(all=True, filters={"label": "io.pytest-maka.task=image-env"}) == []


def test_a_deterministic_build_failure_is_not_retried_but_a_transient_one_is(
    cohort: Cohort, docker_api, tmp_path_factory
) -> None:
    tasks = cohort.tasks
    harbor_task(
        tasks,
        "broken-step",
        dockerfile="FROM debian:bookworm-slim\nRUN echo step-fails && exit 7\n",
        solve="true\n",
        test=PASS_TEST,
    )
    harbor_task(
        tasks,
        "flaky-download",
        dockerfile=(
            "FROM debian:bookworm-slim\n"
            "RUN echo \"E: Failed to fetch http://deb.debian.org/x  Temporary failure resolving 'deb.debian.org'\""
            " && exit 100\n"
        ),
        solve="true\n",
        test=PASS_TEST,
    )
    state = tmp_path_factory.mktemp("state")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "state_dir": str(state)},
        retries={"infra": 2, "backoff_sec": 0.01, "backoff_max_sec": 0.01},
    )
    result = cohort.run_subprocess(timeout=600)
    records = cohort.results()
    assert {k: r["status"] for k, r in records.items()} == dict.fromkeys(records, "infra_failure"), result.stdout.str()[
        -2000:
    ]
    for cell in ("broken-step[oracle-r0]", "broken-step[nop-r0]"):
        assert records[cell]["attempt_count"] == 1, records[cell]
        error = records[cell]["error"]
        assert error["retryable"] is False and "deterministic: not retried" in error["message"]
    # the failure is reused by the task's other cell in the run (its log copied, not rebuilt)
    logs = [p.read_text() for p in cohort.out.glob("cells/broken-step*/attempt-*/build.log")]
    assert len(logs) == 2 and all("step-fails" in log for log in logs)
    for cell in ("flaky-download[oracle-r0]", "flaky-download[nop-r0]"):
        assert records[cell]["attempt_count"] == 3, records[cell]  # transient: retried with backoff
        assert "retryable" not in records[cell]["error"]
