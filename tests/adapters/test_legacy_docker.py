"""Legacy Terminal-Bench tasks on the real Docker engine: parse, resolve, and refuse what is not a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.conftest import copy_sample, docker_executor
from tests.conftest import Cohort

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]


def run(cohort: Cohort, tb: Path, subjects: list[dict[str, object]] | None = None, **spec: object) -> dict:
    cohort.write(
        tasks=[{"path": str(tb)}],
        subjects=subjects or [{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}],
        executor=docker_executor(cohort.root),
        **spec,
    )
    result = cohort.run()
    assert result.ret in (0, 1, 7), result.stdout.str()
    return cohort.results()


def test_oracle_resolves_nop_fails_with_per_test_outcomes(cohort: Cohort) -> None:
    tb = copy_sample("terminal-bench", cohort.root / "tb")
    results = run(cohort, tb)
    assert {k: r["status"] for k, r in results.items()} == {
        "count-log-lines[oracle-r0]": "agent_success",
        "count-log-lines[nop-r0]": "agent_failure",
        "json-config[oracle-r0]": "agent_success",
        "json-config[nop-r0]": "agent_failure",
    }
    nop = results["count-log-lines[nop-r0]"]
    assert nop["verifier"]["tests"]["passed"] == ["../tests/test_outputs.py::test_logs_untouched"]
    assert nop["verifier"]["tests"]["failed"] == [
        "../tests/test_outputs.py::test_line_count_file_exists",
        "../tests/test_outputs.py::test_line_count_value",
    ]
    assert nop["error"]["message"].startswith("the verifier rejected the result: 2 of 3 test(s) did not pass")
    oracle = results["json-config[oracle-r0]"]
    assert oracle["verifier"]["tests_total"] == 3 and oracle["verifier"]["parser"] == "pytest"
    assert oracle["network"]["verifier"] == {"declared": "public", "granted": "none"}


def test_output_with_no_test_is_a_verifier_failure_not_a_pass(cohort: Cohort) -> None:
    tb = copy_sample("terminal-bench", cohort.root / "tb") / "json-config"
    (tb / "run-tests.sh").write_text("#!/bin/bash\necho 'all tests passed!'\n")
    results = run(cohort, tb, subjects=[{"name": "oracle", "kind": "oracle"}])
    record = results["json-config[oracle-r0]"]
    assert record["status"] == "verifier_failure" and record["passed"] is False
    assert "found no test result" in record["error"]["message"] and "not a pass" in record["error"]["message"]


def test_passing_log_with_failing_script_is_no_verdict(cohort: Cohort) -> None:
    tb = copy_sample("terminal-bench", cohort.root / "tb") / "json-config"
    with (tb / "run-tests.sh").open("a") as f:
        f.write("exit 3\n")
    record = run(cohort, tb, subjects=[{"name": "oracle", "kind": "oracle"}])["json-config[oracle-r0]"]
    assert record["status"] == "verifier_failure"
    assert "3 test(s) passing but run-tests.sh exited with code 3" in record["error"]["message"]


def test_planted_tests_are_replaced_and_test_dir_is_set(cohort: Cohort) -> None:
    """A subject that writes its own /tests (run-tests.sh, test file) gains nothing."""
    tb = copy_sample("terminal-bench", cohort.root / "tb") / "json-config"
    with (tb / "run-tests.sh").open("a") as f:
        f.write('echo "TEST_DIR=$TEST_DIR"\n')
    cheat = (
        "mkdir -p /tests && printf 'def test_ok():\\n    pass\\n' > /tests/test_outputs.py"
        " && printf 'echo PASSED x\\n' > /tests/run-tests.sh"
    )
    results = run(cohort, tb, subjects=[{"name": "cheat", "kind": "command", "command": cheat}])
    record = results["json-config[cheat-r0]"]
    assert record["status"] == "agent_failure" and record["verifier"]["tests_failed"] == 3
    out = (cohort.out / record["artifacts"]["verifier_output"]).read_text()
    assert "TEST_DIR=/tests" in out


def test_a_plugin_adds_a_parser(cohort: Cohort) -> None:
    cohort.pytester.makeconftest(
        """
        def parse_tap(text):
            out = {}
            for line in text.splitlines():
                if line.startswith(("ok ", "not ok ")):
                    status = "FAILED" if line.startswith("not") else "PASSED"
                    out[line.split(" - ", 1)[1]] = status
            return out

        def pytest_maka_log_parsers():
            return {"tap": parse_tap}
        """
    )
    tb = copy_sample("terminal-bench", cohort.root / "tb") / "json-config"
    (tb / "task.yaml").write_text((tb / "task.yaml").read_text() + "parser_name: tap\n")
    (tb / "run-tests.sh").write_text(
        "#!/bin/bash\n"
        'if grep -q \'"port": 8080\' /app/config.json 2>/dev/null; then echo "ok 1 - port"; '
        'else echo "not ok 1 - port"; fi\n'
    )
    results = run(cohort, tb)
    assert results["json-config[oracle-r0]"]["status"] == "agent_success"
    assert results["json-config[oracle-r0]"]["verifier"]["parser"] == "tap"
    assert results["json-config[nop-r0]"]["verifier"]["tests"] == {"failed": ["port"]}
