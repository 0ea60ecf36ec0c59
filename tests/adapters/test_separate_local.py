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


def test_collect_hooks_run_before_a_shared_verifier(cohort: Cohort) -> None:
    check = '[ "$(cat /logs/artifacts/collected.txt)" = ok ]'
    task = cohort.task(
        "hooked", test=f"{check} && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    with (task / "task.toml").open("a") as toml:
        hook = "mkdir -p /logs/artifacts && cat /app/done.txt > /logs/artifacts/collected.txt"
        toml.write(f'[[verifier.collect]]\ncommand = "{hook}"\n')
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}])
    cohort.run()
    assert cohort.status() == {"hooked[oracle-r0]": "agent_success", "hooked[nop-r0]": "agent_failure"}
    hooks = cohort.results()["hooked[oracle-r0]"]["verifier"]["collect_hooks"]
    assert hooks == [{"command": hooks[0]["command"], "service": "main", "exit_code": 0, "timed_out": False}]
    assert cohort.results()["hooked[nop-r0]"]["verifier"]["collect_hooks"][0]["exit_code"] != 0
