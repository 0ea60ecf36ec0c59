"""The live view (plain-text mode), the resume header and the attempt/phase hooks."""

from __future__ import annotations

import json
import re

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

SLOW = {"name": "sleeper", "kind": "command", "command": "sleep 1.5; echo ok > /app/done.txt"}


def slow_cohort(cohort: Cohort, count: int = 4) -> Cohort:
    for i in range(count):
        cohort.task(f"t{i}")
    cohort.write(subjects=[SLOW])
    return cohort


def test_plain_lines_show_counts_phases_and_pass_rates(cohort: Cohort) -> None:
    slow_cohort(cohort)
    live = ("--maka-live", "plain", "--maka-live-interval", "0.1")
    result = cohort.run("--maka-concurrency", "2", *live)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "maka: 0/4 done, 2 running, 2 queued, ETA ? | retries 0 | official passes: -",
            "  t0[[]sleeper-r0[]]  agent  *s",
            "  t1[[]sleeper-r0[]]  agent  *s",
        ]
    )
    result.stdout.fnmatch_lines(
        ["maka: 2/4 done, 2 running, 0 queued, ETA *s | retries 0 | official passes: sleeper 2/2"]
    )
    assert "\x1b[" not in result.stdout.str(), "plain mode writes no terminal control sequences"


def test_plain_lines_under_xdist_come_from_the_controller(cohort: Cohort) -> None:
    slow_cohort(cohort)
    result = cohort.run_subprocess(
        "-n", "2", "--maka-concurrency", "2", "--maka-live", "plain", "--maka-live-interval", "0.1"
    )
    result.assert_outcomes(passed=4)
    # the controller sums what the workers published: some cells done, every one an official pass
    # (how many finished before the first line depends on the machine's load)
    lines = re.findall(
        r"^maka: ([1-4])/4 done, \d running, \d queued, ETA \d+s \| retries 0 \| "
        r"official passes: sleeper (\d)/(\d)$",
        result.stdout.str(),
        re.M,
    )
    assert lines, result.stdout.str()
    assert all(done == passed == total for done, passed, total in lines), lines
    assert not list((cohort.out / ".live").glob("*.json")), "workers' published state is removed as they end"


def test_live_off_and_auto_under_ci_print_nothing_for_a_short_run(
    cohort: Cohort, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_cohort(cohort, 2)
    result = cohort.run("--maka-concurrency", "2", "--maka-live", "off", "--maka-live-interval", "0.1")
    assert "running," not in result.stdout.str()
    monkeypatch.setenv("CI", "true")  # auto -> plain lines every 30 s: none in a short run
    result = cohort.run("--maka-concurrency", "2", "-p", "no:cacheprovider")
    assert "running," not in result.stdout.str()


def test_resume_header_says_what_this_run_will_do(cohort: Cohort) -> None:
    for i in range(4):
        cohort.task(f"t{i}")
    cohort.write()
    cohort.run("-k", "t0 or t1")
    result = cohort.run("--maka-concurrency", "4")
    result.stdout.fnmatch_lines(["maka: resuming: 4 of 8 cells already have results in out; running 4 (*"])
    result = cohort.run("-k", "t3")
    result.stdout.fnmatch_lines(
        [
            "maka: resuming: 2 of 2 cells already have results in out; running 0 "
            "(--maka-rerun runs them again as a new run, keeping the earlier results)"
        ]
    )


def test_attempt_and_phase_hooks_in_order(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.pytester.makeconftest(
        """
        import json

        def log(*event):
            with open("events.jsonl", "a") as fh:
                fh.write(json.dumps(event) + "\\n")

        def pytest_maka_attempt_started(cell, attempt):
            log("started", cell.id, attempt)

        def pytest_maka_phase(cell, phase):
            log("phase", cell.id, phase)

        def pytest_maka_attempt_finished(cell, record):
            log("finished", cell.id, record.status.value)
        """
    )
    cohort.run("--maka-concurrency", "2").assert_outcomes(passed=1)
    events = [json.loads(line) for line in (cohort.root / "events.jsonl").read_text().splitlines()]
    phases = [e[2] for e in events if e[0] == "phase"]
    assert events[0] == ["started", "t[oracle-r0]", 1]
    assert phases == ["setup", "agent", "freeze", "restore", "verify", "collect", "taint", "teardown"]
    assert events[-1] == ["finished", "t[oracle-r0]", "agent_success"]
