"""Runs of a cell (``--maka-rerun``): which attempt stands, and which run new attempts join."""

from __future__ import annotations

from pytest_maka.core.record_model import AttemptRecord
from pytest_maka.core.records import attempt_record, cell_record, has_result, next_run
from pytest_maka.core.taxonomy import Status

from ..report.builders import make_cell

T0 = 1_700_000_000.0
CELL = make_cell("t", "agent")


def attempt(n: int, status: Status, run: int, at: float) -> AttemptRecord:
    return attempt_record(CELL, cohort="c", attempt=n, status=status, started=at, finished=at + 1, run=run)


def test_within_a_run_the_earliest_final_attempt_stands_and_across_runs_the_latest_run() -> None:
    attempts = [
        attempt(1, Status.AGENT_FAILURE, 1, T0),
        attempt(2, Status.INFRA_FAILURE, 2, T0 + 10),
        attempt(3, Status.AGENT_SUCCESS, 2, T0 + 20),
        attempt(4, Status.AGENT_FAILURE, 2, T0 + 30),  # cannot happen in a run, and must not win if it did
    ]
    record = cell_record(attempts).to_json()
    assert (record["status"], record["attempt"], record["run"], record["attempt_count"]) == ("agent_success", 3, 2, 4)
    assert record["runs"] == [
        {"run": 1, "status": "agent_failure", "passed": False, "attempt": 1},
        {"run": 2, "status": "agent_success", "passed": True, "attempt": 3},
    ]
    assert [a["run"] for a in record["attempts"]] == [1, 2, 2, 2]


def test_a_rerun_without_a_final_result_yet_stands_with_its_latest_attempt_and_runs_again() -> None:
    attempts = [attempt(1, Status.AGENT_SUCCESS, 1, T0), attempt(2, Status.INFRA_FAILURE, 2, T0 + 10)]
    record = cell_record(attempts)
    assert (record.status, record.run) == (Status.INFRA_FAILURE, 2)
    assert not has_result(attempts), "a resume runs the rerun's cell again"
    assert next_run(attempts, rerun=False, session_started=T0 + 100) == 2, "and within the same run"


def test_lines_without_run_are_run_1_and_a_single_run_has_no_runs_list() -> None:
    line = attempt(1, Status.AGENT_FAILURE, 1, T0).to_json()
    del line["run"]
    record = cell_record([AttemptRecord.model_validate(line)]).to_json()
    assert record["run"] == 1 and "runs" not in record and "run" not in record["attempts"][0]


def test_next_run_under_rerun_counts_only_runs_recorded_before_the_session() -> None:
    earlier = [attempt(1, Status.AGENT_SUCCESS, 1, T0)]
    assert next_run([], rerun=True, session_started=T0 + 100) == 1
    assert next_run(earlier, rerun=True, session_started=T0 + 100) == 2
    this_session = [*earlier, attempt(2, Status.INFRA_FAILURE, 2, T0 + 200)]
    assert next_run(this_session, rerun=True, session_started=T0 + 100) == 2, "a late xdist worker joins run 2"
