"""Cells are pytest items: ids, -k, --lf, node-id selection, --collect-only and -n 2."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


@pytest.fixture
def two_tasks(cohort: Cohort) -> Cohort:
    cohort.task("alpha")
    cohort.task("beta")
    cohort.write(repetitions=2)
    return cohort


def test_collect_only_lists_cell_ids(two_tasks: Cohort) -> None:
    result = two_tasks.run("--collect-only", "-q")
    assert result.ret == 0
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids == [
        f"cohort.yaml::{task}[{subject}-r{rep}]"
        for task in ("alpha", "beta")
        for subject in ("oracle", "nop")
        for rep in (0, 1)
    ]
    assert not (two_tasks.out / "attempts.jsonl").exists()


def test_keyword_selection(two_tasks: Cohort) -> None:
    result = two_tasks.run("-k", "alpha and oracle")
    result.assert_outcomes(passed=2, deselected=6)
    assert set(two_tasks.status()) == {"alpha[oracle-r0]", "alpha[oracle-r1]"}


def test_keyword_selection_by_repetition(two_tasks: Cohort) -> None:
    two_tasks.run("-k", "r1 and nop").assert_outcomes(failed=2, deselected=6)


def test_node_id_selection(two_tasks: Cohort) -> None:
    result = two_tasks.pytester.runpytest(f"{two_tasks.spec}::beta[nop-r1]", *two_tasks.args())
    result.assert_outcomes(failed=1)
    assert list(two_tasks.status()) == ["beta[nop-r1]"]


def test_last_failed_reruns_only_failed_cells(two_tasks: Cohort) -> None:
    two_tasks.pytester.runpytest(*two_tasks.args()).assert_outcomes(passed=4, failed=4)
    result = two_tasks.pytester.runpytest(*two_tasks.args("--lf"))
    result.assert_outcomes(failed=4, deselected=4)
    result.stdout.fnmatch_lines(["*run-last-failure: rerun previous 4 failures*"])


def test_xdist_two_workers(two_tasks: Cohort) -> None:
    result = two_tasks.run_subprocess("-n", "2")
    result.assert_outcomes(passed=4, failed=4)
    assert result.ret == 0
    statuses = two_tasks.status()
    assert len(statuses) == 8
    assert sorted(set(statuses.values())) == ["agent_failure", "agent_success"]
    assert len(two_tasks.attempts()) == 8, "each cell ran exactly once across the workers"
    assert (two_tasks.out / "report.html").exists() and (two_tasks.out / "summary.md").exists()
    result.stdout.fnmatch_lines(["*pytest-maka*", "*oracle*4/4 = 100.0%*"])


def test_xdist_harness_error_exit_code(cohort: Cohort) -> None:
    cohort.task("good")
    cohort.task("broken", test="echo no reward\n")
    cohort.write()
    result = cohort.run_subprocess("-n", "2")
    result.assert_outcomes(passed=1, failed=1, errors=2)
    assert result.ret == 7


def test_worker_crash_is_recorded_as_infra_failure(cohort: Cohort) -> None:
    cohort.task("alpha")
    cohort.task("beta")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(
        """
        import os

        def pytest_maka_record(record, cell):
            if cell.task.id == "beta" and os.environ.get("PYTEST_XDIST_WORKER"):
                os._exit(13)  # the worker dies after the attempt ran, before its ledger line
        """
    )
    result = cohort.run_subprocess("-n", "2", "--max-worker-restart=2")
    status = cohort.status()
    assert status["alpha[oracle-r0]"] == "agent_success"
    assert status["beta[oracle-r0]"] == "infra_failure"
    crashed = cohort.results()["beta[oracle-r0]"]
    assert "crashed" in crashed["error"]["message"] or "worker lost" in crashed["error"]["message"]
    assert result.ret == 7
