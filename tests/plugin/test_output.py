"""The output directory: results, ledger, artifacts, lock, HTML and markdown views."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]

RECORD_FIELDS = {
    "schema",
    "cell_id",
    "task",
    "subject",
    "repetition",
    "attempt_count",
    "status",
    "passed",
    "official",
    "score",
    "duration_s",
    "started_at",
    "finished_at",
    "usage",
    "verifier",
    "subject_claim",
    "isolation",
    "budget",
    "artifacts",
    "error",
}


def test_output_layout_and_record_schema(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    cohort.run()
    for name in ("results.jsonl", "attempts.jsonl", "report.html", "summary.md", "lock.json"):
        assert (cohort.out / name).is_file(), name
    for record in cohort.results().values():
        assert set(record) >= RECORD_FIELDS, RECORD_FIELDS - set(record)
        assert set(record["usage"]) >= {"input_tokens", "output_tokens", "cost_usd"}
        attempt_dir = cohort.out / record["artifacts"]["dir"]
        assert attempt_dir.name == "attempt-1" and attempt_dir.parent.name == record["cell_key"]
        for key in ("instruction", "agent_log", "diff", "verifier_output"):
            assert (cohort.out / record["artifacts"][key]).is_file(), key
        assert (cohort.out / record["artifacts"]["instruction"]).read_text() == "Create /app/done.txt."
    lock = json.loads((cohort.out / "lock.json").read_text())
    assert lock["cohort"] == "t" and lock["runs"][0]["versions"]["pytest"] == pytest.__version__


def test_html_report_content(cohort: Cohort) -> None:
    cohort.task("alpha")
    cohort.task("beta", test="echo no reward\n")
    cohort.write()
    cohort.run()
    html = (cohort.out / "report.html").read_text()
    assert "alpha[oracle-r0]" in html and "beta[nop-r0]" in html
    assert "1/1 = 100.0%" in html, "oracle's official rate with its denominator"
    assert "1/2 = 50.0%" in html, "oracle's strict rate counts the verifier failure as a non-pass"
    assert "verifier_failure" in html and "agent_failure" in html
    data = json.loads(re.search(r'<script type="application/json" id="maka-data">(.*?)</script>', html, re.S).group(1))
    dirs = [cell[data["fields"].index("dir")] for cell in data["cells"]]
    assert len(dirs) == 4 and all(d.startswith("cells/") and d.endswith("/attempt-1") for d in dirs), dirs
    assert not re.search(r'(src|href)="https?://', html), "self-contained: nothing fetched"
    summary = (cohort.out / "summary.md").read_text()
    assert "| **oracle** (oracle) | 1/1 = 100.0% |" in summary


def test_terminal_summary_table(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    result = cohort.run()
    result.stdout.fnmatch_lines(["maka: cohort t: 2 cells = 1 tasks x 2 subjects x 1 repetitions"])
    result.stdout.fnmatch_lines(
        ["*pytest-maka*", "subject*official pass rate*strict pass rate*", "nop*0/1*", "oracle*1/1*"]
    )


def test_ctrl_c_aborts_the_run_and_records_the_attempt(cohort: Cohort) -> None:
    cohort.task("slow", agent_timeout=120)
    cohort.write(subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 100"}])
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-p", "no:cacheprovider")], stdin=subprocess.DEVNULL
    )
    deadline = time.time() + 60
    while time.time() < deadline and not list(cohort.out.glob("cells/*/attempt-1/agent.stdout.txt")):
        time.sleep(0.05)  # poll for the state "the subject has started", not a fixed wait
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out + err
    attempts = cohort.attempts()
    assert [a["status"] for a in attempts] == ["agent_aborted"], "the interrupted attempt is recorded"
    assert attempts[0]["duration_s"] < 30
    # The aborted cell is not final: the next run into the same directory executes it again.
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 100"}], budgets={"agent_timeout_sec": 1}
    )
    cohort.run().assert_outcomes(failed=1)
    assert [a["status"] for a in cohort.attempts()] == ["agent_aborted", "agent_incomplete"]


def test_conftest_can_extend_the_cell_fixtures(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.pytester.makeconftest(
        """
        import json
        import pytest

        @pytest.fixture
        def executor_lease(executor_lease, maka_cell):
            def lease(request):
                with open("leases.log", "a") as fh:
                    fh.write(json.dumps([maka_cell.id, request.attempt]) + "\\n")
                return executor_lease(request)
            return lease

        @pytest.fixture(autouse=True)
        def stamp(request):
            request.node.user_properties.append(("stamped", True))

        def pytest_maka_record(record, cell):
            return {"team": "evals"}
        """
    )
    result = cohort.run(f"--junitxml={cohort.root / 'junit.xml'}")
    result.assert_outcomes(passed=1)
    assert (cohort.root / "leases.log").read_text() == '["t[oracle-r0]", 1]\n'
    assert cohort.results()["t[oracle-r0]"]["team"] == "evals"
    junit = (cohort.root / "junit.xml").read_text()
    assert 'name="stamped"' in junit, "autouse fixtures apply to cells"
    assert '<property name="maka_status" value="agent_success"' in junit


def test_pytest_html_report_with_cells(cohort: Cohort) -> None:
    pytest.importorskip("pytest_html", reason="pytest-html is part of the test extras")
    cohort.task("t")
    cohort.write()
    result = cohort.run(f"--html={cohort.root / 'cells.html'}", "--self-contained-html")
    result.assert_outcomes(passed=1, failed=1)
    html = (cohort.root / "cells.html").read_text()
    assert "t[oracle-r0]" in html and "agent_failure" in html
