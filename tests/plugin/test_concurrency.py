"""--maka-concurrency N: many cells at once per pytest process, one item per cell as before.

Concurrency is proved without timing: a conftest holds every cell at the start of its agent
phase on a barrier of N parties, so a run that does not really have N cells in flight
breaks the barrier and the cells end as infra failures.
"""

from __future__ import annotations

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

BARRIER = """
import threading

barrier = threading.Barrier({parties}, timeout=60)

def pytest_maka_phase(cell, phase):
    if phase == "agent":
        barrier.wait()  # BrokenBarrierError (an infra failure) unless {parties} cells are in flight
"""


def tasks(cohort: Cohort, count: int) -> list[str]:
    names = [f"t{i:02d}" for i in range(count)]
    for name in names:
        cohort.task(name)
    return names


def test_eight_cells_run_at_once_and_report_one_item_each(cohort: Cohort) -> None:
    tasks(cohort, 4)
    cohort.write()  # oracle + nop: 8 cells, half pass
    cohort.pytester.makeconftest(BARRIER.format(parties=8))
    result = cohort.run("--maka-concurrency", "8", "-v")
    result.assert_outcomes(passed=4, failed=4)
    assert result.ret == 0
    statuses = cohort.status()
    assert sorted(statuses.values()) == ["agent_failure"] * 4 + ["agent_success"] * 4
    assert len(cohort.attempts()) == 8
    result.stdout.fnmatch_lines(["*t00[[]oracle-r0[]] PASSED*", "*t00[[]nop-r0[]] FAILED*"])
    started = [line for line in result.stdout.lines if "PASSED" in line or "FAILED" in line][:8]
    assert [line.split("::")[1].split()[0] for line in started] == [
        f"t{i:02d}[{s}-r0]" for i in range(4) for s in ("oracle", "nop")
    ], "items are reported in collection order"


def test_without_the_option_cells_run_one_at_a_time(cohort: Cohort) -> None:
    tasks(cohort, 1)
    cohort.write()
    cohort.pytester.makeconftest(BARRIER.format(parties=2).replace("timeout=60", "timeout=2"))
    result = cohort.run()
    assert set(cohort.status().values()) == {"infra_failure"}, "two cells never ran at once"
    assert result.ret == 7


def test_xdist_workers_each_run_four_at_once(cohort: Cohort) -> None:
    tasks(cohort, 4)
    cohort.write()
    cohort.pytester.makeconftest(BARRIER.format(parties=4))
    result = cohort.run_subprocess("-n", "2", "--maka-concurrency", "4")
    result.assert_outcomes(passed=4, failed=4)
    assert result.ret == 0
    assert len(cohort.attempts()) == 8, "each cell ran exactly once across the workers"
    assert sorted(set(cohort.status().values())) == ["agent_failure", "agent_success"]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_keyword_selection_starts_only_selected_cells(cohort: Cohort, xdist: list[str]) -> None:
    tasks(cohort, 4)
    cohort.write()
    result = cohort.run_subprocess("--maka-concurrency", "8", "-k", "oracle and not t03", *xdist)
    result.assert_outcomes(passed=3, deselected=0 if xdist else 5)  # xdist does not count deselected items
    assert sorted(a["cell_id"] for a in cohort.attempts()) == [f"t0{i}[oracle-r0]" for i in range(3)]


def test_last_failed_and_resume(cohort: Cohort) -> None:
    tasks(cohort, 3)
    cohort.write()
    cohort.run("--maka-concurrency", "8").assert_outcomes(passed=3, failed=3)
    first = cohort.attempts()
    result = cohort.run("--maka-concurrency", "8", "--lf")
    result.assert_outcomes(failed=3, deselected=3)
    result.stdout.fnmatch_lines(["*run-last-failure: rerun previous 3 failures*"])
    assert cohort.attempts() == first, "failed cells are final: reported from the ledger, not re-run"
    result = cohort.run_subprocess("--maka-concurrency", "8", "-n", "2")
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(["*6 cell(s) reported from the ledger of an earlier run (not re-executed)*"])
    assert cohort.attempts() == first


def test_resume_runs_only_the_missing_cells(cohort: Cohort) -> None:
    tasks(cohort, 4)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run("-k", "t00 or t01").assert_outcomes(passed=2, deselected=2)
    cohort.pytester.makeconftest(BARRIER.format(parties=2))  # exactly the two missing cells run
    cohort.run("--maka-concurrency", "8").assert_outcomes(passed=4)
    assert sorted(a["cell_id"] for a in cohort.attempts()) == [f"t0{i}[oracle-r0]" for i in range(4)]


def test_exitfirst_stops_launching_new_cells(cohort: Cohort) -> None:
    tasks(cohort, 12)
    cohort.write(subjects=[{"name": "nop", "kind": "nop"}])
    cohort.pytester.makeconftest(
        """
        import threading

        first_done = threading.Event()

        def pytest_maka_phase(cell, phase):
            if phase == "agent" and cell.task.id != "t00":
                assert first_done.wait(60)  # the others end only after the first cell has

        def pytest_maka_attempt_finished(cell, record):
            if cell.task.id == "t00":
                first_done.set()
        """
    )
    result = cohort.run("--maka-concurrency", "3", "-x")
    result.assert_outcomes(failed=1)
    attempts = cohort.attempts()
    assert sorted(a["cell_id"] for a in attempts) == ["t00[nop-r0]", "t01[nop-r0]", "t02[nop-r0]"], (
        "the cells in flight at the first failure finish and are recorded; no new cell starts"
    )
    assert {a["status"] for a in attempts} == {"agent_failure"}


def test_overridden_lease_fixture_still_applies(cohort: Cohort) -> None:
    """pytest sets fixtures up one item at a time: such a cell starts when its item runs."""
    tasks(cohort, 3)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.pytester.makeconftest(
        """
        import functools
        import pytest

        def logged(inner, cell_id, request):
            with open("leases.log", "a") as fh:
                print(cell_id, request.attempt, file=fh)
            return inner(request)

        @pytest.fixture
        def executor_lease(executor_lease, maka_cell):
            return functools.partial(logged, executor_lease, maka_cell.id)
        """
    )
    cohort.run("--maka-concurrency", "4").assert_outcomes(passed=3)
    leases = (cohort.root / "leases.log").read_text().splitlines()
    assert sorted(leases) == [f"t0{i}[oracle-r0] 1" for i in range(3)], "every cell went through the conftest lease"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--maka-concurrency", "0"], "*--maka-concurrency: expected a whole number of cells >= 1, got '0'*"),
        (["--maka-concurrency", "many"], "*--maka-concurrency: expected a whole number of cells >= 1, got 'many'*"),
        (
            ["--maka-concurrency", "4", "-n", "2", "--dist", "worksteal"],
            "*--maka-concurrency 4 cannot be combined with --dist worksteal*",
        ),
    ],
)
def test_bad_concurrency_is_one_line(cohort: Cohort, args: list[str], message: str) -> None:
    tasks(cohort, 1)
    cohort.write()
    result = cohort.run_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (cohort.out / "attempts.jsonl").exists()


def test_ini_value_is_validated_with_its_file(cohort: Cohort) -> None:
    tasks(cohort, 1)
    cohort.write()
    cohort.pytester.makeini("[pytest]\nmaka_concurrency = lots\n")
    result = cohort.run_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tox.ini: maka_concurrency: expected a whole number of cells >= 1, got 'lots'*"])
