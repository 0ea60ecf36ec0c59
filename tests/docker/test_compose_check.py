"""A compose file Docker Compose rejects is the task's problem, named once at collection.

``docker compose config`` runs over the task's file (and the harness's override) once per
task before any cell: a rejected file skips every cell of the task with one line naming the
file and Compose's own message, not an ``infra_failure`` per cell. No container is made.
"""

from __future__ import annotations

import json

import pytest

from pytest_maka.executors.docker import labels as L

from ..conftest import Cohort
from .test_image_run import harbor_task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.needs("compose"),
]

DOCKERFILE = "FROM python:3.11-slim\nWORKDIR /app\n"
SOLVE = "echo done > /app/out.txt\n"
TEST = "echo 1 > /logs/verifier/reward.txt\n"
REJECTED = {
    # a key Compose does not know, on a sidecar
    "unknown-key": "services:\n  db:\n    image: python:3.11-slim\n    bogus_key: 1\n",
    # a volume Compose cannot parse
    "bad-volume": "services:\n  db:\n    image: python:3.11-slim\n    volumes:\n      - '::nowhere'\n",
    # a network no one declares
    "undeclared-network": "services:\n  db:\n    image: python:3.11-slim\n    networks: [elsewhere]\n",
}
#: What Compose says of each (its own words, in the skip reason).
SAID = {
    "unknown-key": "bogus_key",
    "bad-volume": "::nowhere",
    "undeclared-network": "elsewhere",
}


def _skips(cohort: Cohort) -> dict[str, str]:
    return json.loads((cohort.out / "lock.json").read_text())["runs"][-1]["skipped"]


@pytest.mark.parametrize("workers", [None, "2"])
def test_a_rejected_compose_file_skips_its_task_once_with_composes_message(
    cohort: Cohort, docker_api, workers: str | None
) -> None:
    for name, compose in REJECTED.items():
        task = harbor_task(cohort.tasks, name, dockerfile=DOCKERFILE, solve=SOLVE, test=TEST)
        (task / "environment" / "docker-compose.yaml").write_text(compose)
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor={"kind": "docker", "state_dir": str(cohort.root / "docker-state")},
        retries={"infra": 2},
    )
    result = cohort.run_subprocess("-rs", *(["-n", workers] if workers else []), timeout=600)
    out = result.stdout.str()
    result.assert_outcomes(skipped=2 * len(REJECTED))
    skips = _skips(cohort)
    for name, said in SAID.items():
        compose_file = cohort.tasks / name / "environment" / "docker-compose.yaml"
        for subject in ("oracle", "nop"):
            reason = skips[f"{name}[{subject}-r0]"]
            assert reason.startswith(f"{name}: {compose_file}: rejected by Docker Compose: "), reason
            assert said in reason and "\n" not in reason, reason
        # one line per task: both cells' skips fold into it
        lines = [line for line in result.outlines if line.startswith("SKIPPED [2] ") and f"{name}: " in line]
        assert len(lines) == 1, out[-3000:]
    assert not (cohort.out / "results.jsonl").exists() or cohort.results() == {}, "no attempt was made"
    for name in REJECTED:
        assert docker_api.containers(all=True, filters={"label": f"{L.TASK}={name}"}) == []


def test_collect_only_names_the_rejected_file_without_an_engine_run(cohort: Cohort) -> None:
    """Collection alone finds it (``docker compose config`` starts nothing)."""
    task = harbor_task(cohort.tasks, "unknown-key", dockerfile=DOCKERFILE, solve=SOLVE, test=TEST)
    (task / "environment" / "docker-compose.yaml").write_text(REJECTED["unknown-key"])
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}],
        executor={"kind": "docker", "state_dir": str(cohort.root / "docker-state")},
    )
    result = cohort.run_subprocess("--collect-only", "-q", "-rs", timeout=300)
    lines = [line for line in result.outlines if line.startswith("SKIPPED [1] ")]
    assert len(lines) == 1 and "rejected by Docker Compose" in lines[0] and "bogus_key" in lines[0], lines
