"""--maka-rerun: a new run of the selected cells, recorded beside the earlier runs (README, Output files)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

#: Passes only when the host's MAKA_FLIP is 1 (a name in env: is part of the subject's digest, its value is not).
FLIPPER = {
    "name": "flipper",
    "kind": "command",
    "command": 'if [ "$MAKA_FLIP" = 1 ]; then echo ok > /app/done.txt; fi',
    "env": ["MAKA_FLIP"],
}


def _history(cohort: Cohort) -> list[tuple[int, int, str]]:
    return [(a["attempt"], a["run"], a["status"]) for a in cohort.attempts()]


def test_a_rerun_is_a_new_run_that_stands_whatever_it_gives_and_hides_nothing(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    cohort.task("t")
    cohort.write(subjects=[FLIPPER])
    monkeypatch.setenv("MAKA_FLIP", "0")
    cohort.run().assert_outcomes(failed=1)

    resumed = cohort.run()
    resumed.assert_outcomes(failed=1)
    assert (
        "maka: resuming: 1 of 1 cells already have results in out; running 0 "
        "(--maka-rerun runs them again as a new run, keeping the earlier results)" in resumed.stdout.str()
    )
    assert _history(cohort) == [(1, 1, "agent_failure")]

    monkeypatch.setenv("MAKA_FLIP", "1")
    rerun = cohort.run("--maka-rerun")
    rerun.assert_outcomes(passed=1)
    out = rerun.stdout.str()
    assert "maka: rerunning: 1 of 1 cells already have results in out; running all 1, those 1 as a new run" in out
    assert "1 cell(s) stand on a rerun: 1 went from not passed to passed, 0 from passed to not passed" in out
    assert _history(cohort) == [(1, 1, "agent_failure"), (2, 2, "agent_success")], "the old attempt is kept"
    record = cohort.results()["t[flipper-r0]"]
    assert record["status"] == "agent_success" and record["run"] == 2 and record["attempt"] == 2
    assert record["runs"] == [
        {"run": 1, "status": "agent_failure", "passed": False, "attempt": 1},
        {"run": 2, "status": "agent_success", "passed": True, "attempt": 2},
    ]
    assert (cohort.out / "cells" / record["cell_key"] / "attempt-1").is_dir(), "the first run's files are kept"

    monkeypatch.setenv("MAKA_FLIP", "0")
    cohort.run().assert_outcomes(passed=1)  # a plain resume keeps the latest run
    assert len(cohort.attempts()) == 2

    worse = cohort.run("--maka-rerun")
    worse.assert_outcomes(failed=1)
    assert "1 cell(s) stand on a rerun: 0 went from not passed to passed, 1 from passed to not passed" in (
        worse.stdout.str()
    )
    assert cohort.status() == {"t[flipper-r0]": "agent_failure"}, "a rerun stands also when it is worse"
    assert [r["status"] for r in cohort.results()["t[flipper-r0]"]["runs"]] == [
        "agent_failure",
        "agent_success",
        "agent_failure",
    ]


def test_a_rerun_only_reruns_the_selected_cells(cohort: Cohort) -> None:
    cohort.task("alpha")
    cohort.task("beta")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run().assert_outcomes(passed=2)
    cohort.run("--maka-rerun", "-k", "alpha").assert_outcomes(passed=1)
    runs = {(a["task"], a["run"]) for a in cohort.attempts()}
    assert runs == {("alpha", 1), ("beta", 1), ("alpha", 2)}
    results = cohort.results()
    assert results["alpha[oracle-r0]"]["run"] == 2 and results["beta[oracle-r0]"]["run"] == 1
    assert "runs" not in results["beta[oracle-r0]"]


def test_a_rerun_under_xdist_runs_each_cell_once_more(cohort: Cohort) -> None:
    for name in ("a", "b", "c"):
        cohort.task(name)
    cohort.write()
    cohort.run_subprocess("-n", "2").assert_outcomes(passed=3, failed=3)
    result = cohort.run_subprocess("-n", "2", "--maka-rerun")
    result.assert_outcomes(passed=3, failed=3)
    assert "maka: rerunning: 6 of 6 cells already have results" in result.stdout.str()
    attempts = cohort.attempts()
    assert sorted((a["cell_id"], a["run"]) for a in attempts) == sorted(
        [(cid, run) for cid in cohort.results() for run in (1, 2)]
    )
    assert all(r["run"] == 2 and len(r["runs"]) == 2 for r in cohort.results().values())
    runs = json.loads((cohort.out / "lock.json").read_text())["runs"]
    assert [run.get("rerun") for run in runs] == [None, True], "lock.json says which run was a rerun"
    report = _maka("report", str(cohort.out))
    assert report.returncode == 0, report.stderr
    assert "6 cell(s) stand on a rerun: 0 went from not passed to passed, 0 from passed to not passed" in (
        report.stdout
    )


def _maka(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("maka")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_maka.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120)
