"""A task with a separate verifier environment on an executor that has none: skipped, with the reason."""

from __future__ import annotations

from ..conftest import Cohort
from ..docker.test_separate import harbor_task


def test_local_executor_skips_separate_tasks_with_a_reason(cohort: Cohort) -> None:
    harbor_task(cohort.tasks, "sep", toml_extra="", test_sh="echo 1 > /logs/verifier/reward.txt\n", solve="true\n")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], executor={"kind": "local"})
    result = cohort.run("-rs")
    result.assert_outcomes(skipped=1)
    assert "separate verifier environment" in result.stdout.str()
    assert "local executor" in result.stdout.str()
