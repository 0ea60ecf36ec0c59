"""Rerunning into the same output directory is a resume (DESIGN.md §7)."""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def test_rerun_does_not_execute_final_cells_again(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    cohort.run().assert_outcomes(passed=1, failed=1)
    first = cohort.attempts()
    result = cohort.run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*2 cell(s) reported from the ledger of an earlier run (not re-executed)*"])
    assert cohort.attempts() == first, "no new attempt for cells that already have a final result"
    assert all(r.get("resumed") for r in cohort.results().values())


def test_earliest_valid_attempt_wins(cohort: Cohort) -> None:
    """A flaky subject cannot cherry-pick a lucky pass by rerunning."""
    cohort.task("t")
    flaky = "if [ -f /logs/agent/lucky ]; then echo ok > /app/done.txt; fi"
    cohort.write(subjects=[{"name": "flaky", "kind": "command", "command": flaky}])
    cohort.run().assert_outcomes(failed=1)
    cohort.run().assert_outcomes(failed=1)
    assert len(cohort.attempts()) == 1
    assert cohort.status() == {"t[flaky-r0]": "agent_failure"}


def test_harness_failures_are_rerun(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    conftest = cohort.pytester.makeconftest(
        """
        from pytest_maka.core.errors import InfraError

        def pytest_maka_acquire_lease(executor, request):
            raise InfraError("engine down")
        """
    )
    assert cohort.run().ret == 7
    conftest.unlink()
    cohort.run().assert_outcomes(passed=1)
    attempts = cohort.attempts()
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "infra_failure"), (2, "agent_success")]
    record = cohort.results()["t[oracle-r0]"]
    assert record["status"] == "agent_success" and record["attempt_count"] == 2


def test_changed_task_is_a_new_cell(cohort: Cohort) -> None:
    task = cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(passed=1)
    old_key = cohort.results()["t[oracle-r0]"]["cell_key"]
    (task / "instruction.md").write_text("Create /app/done.txt, politely.")
    cohort.run().assert_outcomes(passed=1)
    new_key = cohort.results()["t[oracle-r0]"]["cell_key"]
    assert new_key != old_key
    assert len(cohort.attempts()) == 2, "the changed definition ran; the old result did not stand in"
    assert len(cohort.results()) == 1, "results.jsonl holds the current definition only"


def test_changed_subject_settings_are_new_cells(cohort: Cohort) -> None:
    cohort.task("t")
    agent = {"name": "agent", "kind": "command", "command": "true", "set_env": {"MODEL": "a"}}
    cohort.write(subjects=[agent])
    cohort.run()
    cohort.write(subjects=[{**agent, "set_env": {"MODEL": "b"}}])
    cohort.run()
    assert len(cohort.attempts()) == 2


def test_selected_rerun_keeps_other_cells_in_results(cohort: Cohort) -> None:
    cohort.task("alpha")
    cohort.task("beta")
    cohort.write()
    cohort.run("-k", "alpha")
    cohort.run("-k", "beta")
    assert set(cohort.status()) == {"alpha[oracle-r0]", "alpha[nop-r0]", "beta[oracle-r0]", "beta[nop-r0]"}


def test_rootdir_and_lf_do_not_depend_on_the_output_dir_argument(cohort: Cohort) -> None:
    """``--maka-out DIR`` as a separate argument, DIR outside the project: the first run (no DIR yet)
    and the resume (DIR exists) have one rootdir, so ``--lf`` finds the failed cell."""
    cohort.task("t")
    cohort.write()
    out = cohort.root.parent / f"{cohort.root.name}-elsewhere"
    args = ["--maka-spec", str(cohort.spec), "--maka-out", str(out), "-p", "no:randomly"]
    first = cohort.pytester.runpytest(*args)
    first.assert_outcomes(passed=1, failed=1)
    first.stdout.fnmatch_lines([f"rootdir: {cohort.root}"])
    assert out.is_dir()
    again = cohort.pytester.runpytest(*args, "--lf")
    again.stdout.fnmatch_lines([f"rootdir: {cohort.root}", "run-last-failure: rerun previous 1 failure*"])
    again.assert_outcomes(failed=1, deselected=1)
    xdist = cohort.pytester.runpytest_subprocess(*args, "--lf", "-n", "2")
    xdist.stdout.fnmatch_lines([f"rootdir: {cohort.root}"])
    xdist.assert_outcomes(failed=1)
