"""Every taxonomy class reached for real in the bubblewrap sandbox, and its pytest outcome."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def command(name: str, cmd: str, **extra: object) -> dict[str, object]:
    return {"name": name, "kind": "command", "command": cmd, **extra}


def test_pass_and_fail_with_reference_subjects(cohort: Cohort) -> None:
    cohort.task("make-file")
    cohort.write()
    result = cohort.run()
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 0, "agent failures alone keep exit code 0"
    status = cohort.status()
    assert status == {"make-file[oracle-r0]": "agent_success", "make-file[nop-r0]": "agent_failure"}
    oracle = cohort.results()["make-file[oracle-r0]"]
    assert oracle["passed"] is True and oracle["official"] is True and oracle["score"] == 1.0
    assert oracle["schema"] == "pytest-maka/result/1"
    assert oracle["isolation"]["sandbox"] == "bwrap"
    assert oracle["isolation"]["network"]["agent"] == "none"
    assert (cohort.out / oracle["artifacts"]["verifier_output"]).exists()


def test_agent_timeout_is_incomplete_and_verifier_still_runs(cohort: Cohort) -> None:
    cohort.task("slow", agent_timeout=1)
    cohort.write(subjects=[command("sleeper", "echo ok > /app/done.txt; trap '' TERM; sleep 30")])
    result = cohort.run()
    result.assert_outcomes(failed=0, passed=1)
    record = cohort.results()["slow[sleeper-r0]"]
    # The verifier ran after the timeout, and its verdict stands (as in Harbor and Terminal-Bench).
    assert record["status"] == "agent_success"
    assert record["agent"]["timed_out"] is True
    assert record["duration_s"] < 20, "the SIGTERM-ignoring subject must have been killed"


def test_agent_timeout_without_result(cohort: Cohort) -> None:
    cohort.task("slow", agent_timeout=1)
    cohort.write(subjects=[command("sleeper", "sleep 30")])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["slow[sleeper-r0]"]
    assert record["status"] == "agent_incomplete"
    assert record["error"]["message"].startswith("the subject timed out after 1")


def test_nonzero_exit_is_incomplete(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[command("crasher", "exit 3")])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[crasher-r0]"]
    assert record["status"] == "agent_incomplete"
    assert record["agent"]["exit_code"] == 3
    assert record["error"]["message"] == "the subject exited with code 3"


@pytest.mark.parametrize("reason", ["max_tokens", "refusal"])
def test_reported_stop_reason_is_incomplete_and_cannot_pass(cohort: Cohort, reason: str) -> None:
    cohort.task("t")
    usage = f'echo \'{{"input_tokens": 10, "stop_reason": "{reason}"}}\' > $MAKA_LOGS_DIR/usage.json'
    cohort.write(subjects=[command("stopper", usage), command("finisher", f"{usage}; echo x > /app/done.txt")])
    cohort.run().assert_outcomes(failed=1, passed=1)
    stopped = cohort.results()["t[stopper-r0]"]
    assert stopped["status"] == "agent_incomplete"
    assert stopped["error"]["message"] == f"the subject stopped early: {reason}"
    assert stopped["agent"]["stop_reason"] == reason
    # a stop reason only explains a non-pass: the verifier's pass stands
    assert cohort.results()["t[finisher-r0]"]["status"] == "agent_success"


@pytest.mark.parametrize(
    ("test_script", "message"),
    [
        ("echo 'I forgot the reward'\n", "the verifier wrote no reward"),
        ("mkdir -p /logs/verifier; echo maybe > /logs/verifier/reward.txt\n", "reward.txt is not a number"),
        # several keys without "reward" are graded key by key (all 1 passes): each must be a number
        ('mkdir -p /logs/verifier; echo \'{"a": 1, "b": "1"}\' > /logs/verifier/reward.json\n', "'b' is not a number"),
        ("exit 2\n", "the verifier wrote no reward"),
        ("mkdir -p /logs/verifier; echo 0_1 > /logs/verifier/reward.txt\n", "reward.txt is not a number: '0_1'"),
        # a fullwidth digit one, which float() would take for 1
        ("mkdir -p /logs/verifier; printf '\\357\\274\\221' > /logs/verifier/reward.txt\n", "is not a number"),
        ("mkdir -p /logs/verifier; echo '{\"reward\": NaN}' > /logs/verifier/reward.json\n", "NaN is not a number"),
    ],
)
def test_broken_verifier_is_verifier_failure_and_an_error(cohort: Cohort, test_script: str, message: str) -> None:
    cohort.task("broken", test=test_script)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    result = cohort.run()
    result.assert_outcomes(errors=1)
    assert result.ret == 7, "a cell without an official result gives exit code 7"
    record = cohort.results()["broken[oracle-r0]"]
    assert record["status"] == "verifier_failure" and record["official"] is False and record["passed"] is False
    assert message in record["error"]["message"]


def test_verifier_timeout(cohort: Cohort) -> None:
    # a reward written before the verifier hung is no score: a verifier stopped half-way has none
    test = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 30\n"
    cohort.task("hang", test=test, verifier_timeout=1)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["hang[oracle-r0]"]
    # the environment the subject left is what kept it (a FIFO where it reads): a rejection, as in
    # Harbor and Terminal-Bench, and official (issue 22: only evidence the subject could not have
    # produced takes an attempt out of the denominator)
    assert record["status"] == "agent_failure" and record["official"] is True and record["passed"] is False
    assert record["verifier"]["timed_out"] is True
    assert record["verifier"]["reward"] is None
    assert "timed out after 1" in record["verifier"]["error"]


def test_a_reward_that_only_rounds_to_1_is_no_pass(cohort: Cohort) -> None:
    cohort.task("close", test="mkdir -p /logs/verifier; echo 1.0000000000000001 > /logs/verifier/reward.txt\n")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["close[oracle-r0]"]
    assert record["status"] == "agent_failure" and record["passed"] is False


def test_record_says_how_protected_paths_were_handled(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(passed=1)
    tamper = cohort.results()["t[oracle-r0]"]["verifier"]["tamper"]
    assert tamper["mechanism"].startswith("bwrap: host system directories read-only")
    assert tamper["changed"] == [] and tamper["restored"] == []


def test_reward_json_with_several_keys(cohort: Cohort) -> None:
    test = 'mkdir -p /logs/verifier; echo \'{"reward": 0.5, "style": 1}\' > /logs/verifier/reward.json\n'
    cohort.task("partial", test=test)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["partial[oracle-r0]"]
    assert record["status"] == "agent_failure" and record["score"] == 0.5
    assert record["verifier"]["rewards"] == {"reward": 0.5, "style": 1.0}


def test_unsandboxed_model_backed_subject_is_policy_denied(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}, command("agent", "echo x > /app/done.txt")],
        executor={"kind": "local", "sandbox": "none"},
    )
    result = cohort.run()
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret == 7
    status = cohort.status()
    assert status["t[oracle-r0]"] == "agent_success", "reference subjects may run unsandboxed"
    assert status["t[agent-r0]"] == "policy_denied"
    assert cohort.results()["t[oracle-r0]"]["isolation"]["sandbox"] == "none"
    assert len(cohort.attempts()) == 2, "policy denials are not retried"


def test_explicit_opt_out_allows_unsandboxed_subject(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(
        subjects=[command("agent", "echo x > /app/done.txt")],
        executor={"kind": "local", "sandbox": "none"},
        policy={"allow_unsandboxed": True},
    )
    cohort.run().assert_outcomes(passed=1)
    assert cohort.results()["t[agent-r0]"]["isolation"]["sandbox"] == "none"


def test_budget_cell_timeout_is_budget_exhausted(cohort: Cohort) -> None:
    cohort.task("t", agent_timeout=60)
    cohort.write(subjects=[command("slow", "sleep 30")], budgets={"cell_timeout_sec": 1})
    result = cohort.run()
    result.assert_outcomes(failed=1)
    assert result.ret == 0
    record = cohort.results()["t[slow-r0]"]
    assert record["status"] == "budget_exhausted" and record["official"] is False
    assert record["error"]["message"] == "budget exhausted: cell_timeout_sec"


def test_token_budget_from_reported_usage(cohort: Cohort) -> None:
    cohort.task("t")
    usage = 'echo \'{"input_tokens": 900, "output_tokens": 200, "cost_usd": 0.5}\' > $MAKA_LOGS_DIR/usage.json'
    cohort.write(subjects=[command("spender", usage)], budgets={"max_tokens": 1000})
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[spender-r0]"]
    # tokens the subject reports are its own figures: a rejection stays official (issue 22)
    assert record["status"] == "agent_failure" and record["official"] is True
    assert record["error"]["message"].endswith("; over max_tokens by its own report")
    assert record["usage"] == {"input_tokens": 900, "output_tokens": 200, "cost_usd": 0.5}


def test_infra_failure_is_retried_and_every_attempt_kept(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 2})
    cohort.pytester.makeconftest(
        """
        import pytest
        from pytest_maka.core.errors import InfraError

        def pytest_maka_acquire_lease(executor, request):
            if request.attempt < 3:
                raise InfraError(f"engine hiccup on attempt {request.attempt}")
        """
    )
    result = cohort.run()
    result.assert_outcomes(passed=1)
    attempts = cohort.attempts()
    assert [a["status"] for a in attempts] == ["infra_failure", "infra_failure", "agent_success"]
    assert attempts[0]["error"]["message"] == "InfraError: engine hiccup on attempt 1"
    record = cohort.results()["t[oracle-r0]"]
    assert record["attempt_count"] == 3 and record["attempt"] == 3
    assert [a["status"] for a in record["attempts"]] == ["infra_failure", "infra_failure", "agent_success"]
    for n in (1, 2, 3):
        assert (cohort.out / "cells" / record["cell_key"] / f"attempt-{n}").is_dir(), "retried attempts keep their dirs"


def test_infra_failure_after_retries_is_an_error(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 1})
    cohort.pytester.makeconftest(
        """
        from pytest_maka.core.errors import InfraError

        def pytest_maka_acquire_lease(executor, request):
            raise InfraError("no capacity")
        """
    )
    result = cohort.run()
    result.assert_outcomes(errors=1)
    assert result.ret == 7
    assert [a["status"] for a in cohort.attempts()] == ["infra_failure", "infra_failure"]
    result.stdout.fnmatch_lines(["*ERROR*t[[]oracle-r0[]]*infra_failure: InfraError: no capacity*"])


def test_harness_bug_is_infra_not_agent(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(
        """
        def pytest_maka_acquire_lease(executor, request):
            raise ZeroDivisionError("oops")
        """
    )
    cohort.run().assert_outcomes(errors=1)
    record = cohort.results()["t[oracle-r0]"]
    assert record["status"] == "infra_failure"
    assert record["error"]["message"] == "harness error: ZeroDivisionError: oops"
    assert "ZeroDivisionError" in (cohort.out / record["artifacts"]["harness_error"]).read_text()


def test_exit_code_policies(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    assert cohort.run("--maka-exit=pass").ret == 8, "nop failed: 'pass' policy exits 8"
    assert cohort.run("--maka-exit=never").ret == 0
    assert cohort.run().ret == 0


def test_oracle_skips_task_without_solution(cohort: Cohort) -> None:
    cohort.task("nosolution", solve=None)
    cohort.write()
    result = cohort.run("-rs")
    result.assert_outcomes(skipped=1, failed=1)
    result.stdout.fnmatch_lines(["*the task has no reference solution*"])


def test_unsupported_task_feature_is_skipped_with_reason(cohort: Cohort) -> None:
    # (Multi-step tasks, the feature this test first used, now run: a compose file still does not here.)
    task = cohort.task("multi")
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    cohort.write()
    result = cohort.run("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*multi-container environments*not supported on the local executor yet*"])
