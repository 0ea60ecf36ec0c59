"""Whole cells whose verifier sandbox is set up while the subject runs (local executor): the record
says so, and a subject that forges a reward or tries to reach the waiting sandbox gains nothing."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

#: Each subject waits long enough for the process to be idle and set the verifier up meanwhile.
SUBJECTS = [
    {"name": "honest", "kind": "command", "command": "sleep 3; echo ok > /app/done.txt"},
    {
        "name": "forger",
        "kind": "command",
        "command": (
            "sleep 3; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
            "ls -d /tests 2>/dev/null && echo SAW-TESTS; kill -9 -1; true"
        ),
    },
]


def check(cohort: Cohort) -> None:
    results = cohort.results()
    assert {cid.split("[")[1].split("-")[0]: r["status"] for cid, r in results.items()} == {
        "honest": "agent_success",
        "forger": "agent_failure",
    }
    for record in results.values():
        assert record["verifier"]["set_up_ahead"] is True, record["cell_id"]
        assert record["verifier"]["reward"] in (0.0, 1.0)
    forger = next(r for cid, r in results.items() if "forger" in cid)
    assert "SAW-TESTS" not in (cohort.out / forger["artifacts"]["agent_log"]).read_text()


@pytest.mark.sandbox
@needs_bwrap
def test_in_process(cohort: Cohort) -> None:
    cohort.task("t0")
    cohort.write(subjects=SUBJECTS)
    result = cohort.run("--maka-concurrency", "4")
    result.assert_outcomes(passed=1, failed=1)
    check(cohort)


@pytest.mark.sandbox
@needs_bwrap
def test_under_xdist(cohort: Cohort) -> None:
    cohort.task("t0")
    cohort.write(subjects=SUBJECTS)
    result = cohort.run_subprocess("-n", "2", "--maka-concurrency", "2")
    result.assert_outcomes(passed=1, failed=1)
    check(cohort)
