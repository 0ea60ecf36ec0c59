"""Multi-step tasks on the real Docker engine: one container for every step of a cell."""

from __future__ import annotations

import pytest

from tests.adapters.conftest import docker_executor
from tests.conftest import Cohort
from tests.steps_helpers import copy_greeting, write_steps_task

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

#: Step b's test: the subject's file from step a survived, b's upload merged into the same dir.
MERGED = (
    "#!/bin/bash\n. /tests/common.sh\n"
    '[ "$(cat /app/data/mine.txt)" = mine ] && [ "$(cat /app/data/sub/given.txt)" = given ] || '
    "{ echo 0 > /logs/verifier/reward.txt; exit 0; }\n"
    'reward "$(cat /app/b.txt 2>/dev/null)" "b"\n'
)


def test_steps_share_one_container_and_each_step_s_workdir_is_laid_over(cohort: Cohort) -> None:
    copy_greeting(cohort.tasks / "two-step-greeting")
    write_steps_task(
        cohort.tasks,
        "overlay",
        [
            {"name": "a", "solve": "echo a > /app/a.txt; mkdir -p /app/data; echo mine > /app/data/mine.txt\n"},
            {"name": "b", "workdir": {"data/sub/given.txt": "given\n"}, "test": MERGED},
        ],
    )
    cohort.write(executor=docker_executor(cohort.root))
    result = cohort.run("-n", "2")
    result.assert_outcomes(passed=2, failed=2)
    results = cohort.results()
    assert {k: r["status"] for k, r in results.items()} == {
        "two-step-greeting[oracle-r0]": "agent_success",
        "two-step-greeting[nop-r0]": "agent_failure",
        "overlay[oracle-r0]": "agent_success",
        "overlay[nop-r0]": "agent_failure",
    }
    oracle = results["two-step-greeting[oracle-r0]"]
    assert [s["verdict"] for s in oracle["steps"]] == ["passed", "passed"]
    assert oracle["isolation"]["executor"] == "docker"
    nop = results["overlay[nop-r0]"]  # no min_reward: both steps ran and failed
    assert [(s["run"], s["verdict"]) for s in nop["steps"]] == [(True, "failed"), (True, "failed")]
    assert results["two-step-greeting[nop-r0]"]["steps"][1]["run"] is False
