"""Faults: nothing lost, nothing invented (torn ledger lines, crashed workers, Ctrl-C, failing hooks)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def wait_for(condition: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    """Poll ``condition`` until it holds (synchronisation on a state, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def ledger_lines(cohort: Cohort) -> list[str]:
    return (cohort.out / "attempts.jsonl").read_text().splitlines()


def table_cells(stdout: str) -> int:
    """The sum of the ``cells`` column of the terminal summary table."""
    rows = re.findall(r"^(\S+)\s+(\d+)\s+\d+/\d+ = ", stdout, re.M)
    return sum(int(n) for _, n in rows)


def summary_cells(cohort: Cohort) -> int:
    """The cell count in the header of summary.md."""
    return int(re.search(r"^\*\*(\d+)\*\* cells", (cohort.out / "summary.md").read_text(), re.M).group(1))


def test_torn_last_line_is_moved_aside_and_does_not_swallow_the_next_record(cohort: Cohort) -> None:
    cohort.task("alpha")
    cohort.task("beta")
    cohort.write()
    cohort.run().assert_outcomes(passed=2, failed=2)
    lines = ledger_lines(cohort)
    torn = lines[-1][: len(lines[-1]) // 2]  # a crash in the middle of writing the last record
    lost = json.loads(lines[-1])["cell_id"]
    (cohort.out / "attempts.jsonl").write_text("\n".join(lines[:-1]) + "\n" + torn)
    result = cohort.run()
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*maka: warning: *attempts.jsonl line 4: torn last line (* bytes, no newline); skipped",
            "*maka: warning: *attempts.jsonl: moved a torn last line (* bytes) to *attempts.torn",
        ]
    )
    after = [json.loads(line) for line in ledger_lines(cohort)]  # every line parses
    assert [r["cell_id"] for r in after] == [json.loads(x)["cell_id"] for x in lines[:-1]] + [lost]
    assert (cohort.out / "attempts.torn").read_text() == torn + "\n", "the torn bytes are kept aside"
    assert set(cohort.status()) == {"alpha[oracle-r0]", "alpha[nop-r0]", "beta[oracle-r0]", "beta[nop-r0]"}
    assert cohort.run().ret == 0 and len(ledger_lines(cohort)) == 4, "a third run re-executes nothing"


def test_unterminated_but_complete_last_line_is_kept(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}, {"name": "nop", "kind": "nop"}])
    cohort.run("-k", "oracle")
    ledger = cohort.out / "attempts.jsonl"
    ledger.write_text(ledger.read_text().rstrip("\n"))  # the crash came just before the newline
    cohort.run().assert_outcomes(passed=1, failed=1)
    assert [json.loads(line)["cell_id"] for line in ledger_lines(cohort)] == ["t[oracle-r0]", "t[nop-r0]"]
    assert not (cohort.out / "attempts.torn").exists()


def test_malformed_ledger_lines_are_reported_with_their_number(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write()
    cohort.run()
    lines = ledger_lines(cohort)
    (cohort.out / "attempts.jsonl").write_text("\n".join([lines[0], "{not json", "[1, 2]", lines[1]]) + "\n")
    result = cohort.run()
    result.stdout.fnmatch_lines(
        [
            "*maka: warning: *attempts.jsonl line 2: not JSON*; skipped",
            "*maka: warning: *attempts.jsonl line 3: not a JSON object (a list); skipped",
        ]
    )
    assert len(cohort.results()) == 2, "the valid lines around them still count"


WORKER_DIES_AFTER_RECORDING = """
import os

ROLE = {}

def pytest_configure(config):
    ROLE["worker"] = hasattr(config, "workerinput")  # not PYTEST_XDIST_WORKER: an outer -n sets it too

def pytest_runtest_logreport(report):
    # the worker dies after the cell's ledger line, before its report reaches the controller
    if ROLE["worker"] and report.when == "call" and "beta" in report.nodeid:
        os._exit(13)
"""


def test_worker_crash_after_recording_writes_no_phantom_attempt(cohort: Cohort) -> None:
    for name in ("alpha", "beta", "gamma", "delta"):
        cohort.task(name)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.pytester.makeconftest(WORKER_DIES_AFTER_RECORDING)
    result = cohort.run_subprocess("-n", "2")
    attempts = cohort.attempts()
    assert sorted(a["cell_id"] for a in attempts) == sorted(
        f"{t}[oracle-r0]" for t in ("alpha", "beta", "gamma", "delta")
    )
    assert {a["status"] for a in attempts} == {"agent_success"}, "no infra_failure for a cell that passed"
    assert cohort.status()["beta[oracle-r0]"] == "agent_success"
    stdout = result.stdout.str()
    assert table_cells(stdout) == len(cohort.results()) == summary_cells(cohort) == 4
    assert "not run" not in stdout


WORKER_KILLED_MID_ATTEMPT = """
import os, signal

ROLE = {}

def pytest_configure(config):
    ROLE["worker"] = hasattr(config, "workerinput")

def pytest_maka_acquire_lease(executor, request):
    if ROLE["worker"] and request.cell.task.id == "t2":
        os.kill(os.getpid(), signal.SIGKILL)  # the attempt has started: its directory exists
"""


def test_killed_worker_records_its_attempt_and_never_started_cells_stay_unrecorded(cohort: Cohort) -> None:
    """With no worker restarts left, the cells the dead worker never started get no ledger line."""
    for i in range(8):
        cohort.task(f"t{i}")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(WORKER_KILLED_MID_ATTEMPT)
    result = cohort.run_subprocess("-n", "2", "--max-worker-restart=0", "-p", "no:randomly")
    attempts = cohort.attempts()
    by_cell = {a["cell_id"]: a for a in attempts}
    assert len(by_cell) == len(attempts), "one attempt per cell"
    lost = by_cell.pop("t2[oracle-r0]")
    assert lost["status"] == "infra_failure" and "crashed before recording it" in lost["error"]["message"]
    assert (cohort.out / lost["artifacts"]["dir"]).is_dir()
    assert {a["status"] for a in by_cell.values()} == {"agent_success"}
    cells_dir = cohort.out / "cells"
    started = {p.parent.name for p in cells_dir.glob("*/attempt-1")}
    assert started == {a["cell_key"] for a in attempts}, "a ledger line exactly for each started attempt"
    not_run = 8 - len(attempts)
    assert not_run > 0, "the dead worker had cells queued"
    stdout = result.stdout.str()
    assert f"{not_run} cell(s) not run (worker lost)" in stdout
    assert table_cells(stdout) == len(cohort.results()) == summary_cells(cohort) == len(attempts)
    assert result.ret == 7
    cohort.pytester.makeconftest("")
    rerun = cohort.run_subprocess("-n", "2")
    assert sorted(cohort.status().values()).count("agent_success") == 8, rerun.stdout.str()[-2000:]


def test_double_ctrl_c_on_the_controller_invents_nothing(cohort: Cohort) -> None:
    for i in range(6):
        cohort.task(f"t{i}", agent_timeout=120)
    cohort.write(subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 100"}])
    proc = cohort.pytester.popen(
        [sys.executable, "-m", "pytest", *cohort.args("-n", "2", "-p", "no:cacheprovider")],
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(list(cohort.out.glob("cells/*/attempt-1"))) >= 2, what="two running attempts")
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = out.decode()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, stdout[-3000:] + err.decode()[-2000:]
    attempts = cohort.attempts()
    started = {p.parent.name for p in cohort.out.glob("cells/*/attempt-1")}
    assert sorted(a["cell_key"] for a in attempts) == sorted(started), "one line per started attempt, no more"
    assert {a["status"] for a in attempts} == {"agent_aborted"}, attempts
    assert len(cohort.results()) == len(attempts) == table_cells(stdout)
    assert "Traceback" not in err.decode()


def test_failing_record_hook_ends_in_one_infra_failure_line(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(
        """
        def pytest_maka_record(record, cell):
            keys = {"half": "written"}
            if keys:
                raise RuntimeError("annotator broke")
            return keys
        """
    )
    result = cohort.run()
    assert result.ret == 7
    result.assert_outcomes(errors=1)
    [attempt] = cohort.attempts()
    assert attempt["status"] == "infra_failure" and "half" not in attempt
    assert attempt["error"]["message"] == "the pytest_maka_record hook failed: RuntimeError: annotator broke"
    assert "annotator broke" in (cohort.out / attempt["artifacts"]["harness_error"]).read_text()


def test_a_record_hook_returning_a_built_in_key_ends_in_one_infra_failure_line_naming_it(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(
        """
        def pytest_maka_record(record, cell):
            assert record.cell_key == cell.key and record.status == "agent_success"
            return {"status": "agent_success", "note": "mine"}
        """
    )
    result = cohort.run()
    assert result.ret == 7
    result.assert_outcomes(errors=1)
    [attempt] = cohort.attempts()
    assert attempt["status"] == "infra_failure" and "note" not in attempt
    message = attempt["error"]["message"]
    assert message.startswith("the pytest_maka_record hook failed: RecordError: "), message
    assert "plugin 'conftest.py' returned key 'status', a built-in key" in message


def test_failing_classify_hook_ends_in_one_infra_failure_line(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], retries={"infra": 0})
    cohort.pytester.makeconftest(
        """
        def pytest_maka_classify(facts, cell):
            return "not-a-status"
        """
    )
    result = cohort.run()
    result.assert_outcomes(errors=1)
    [attempt] = cohort.attempts()
    assert attempt["status"] == "infra_failure"
    assert attempt["error"]["message"].startswith("the pytest_maka_classify hook failed: ValueError:")


def test_infra_retries_back_off_and_share_one_allowance(cohort: Cohort) -> None:
    """Three cells whose lease always fails: each would retry 3 times, but the run may spend 2."""
    for name in ("a", "b", "c"):
        cohort.task(name)
    cohort.write(
        subjects=[{"name": "oracle", "kind": "oracle"}],
        retries={"infra": 3, "backoff_sec": 0.2, "backoff_max_sec": 0.4, "cohort_max": 2},
    )
    cohort.pytester.makeconftest(
        """
        from pytest_maka.core.errors import InfraError

        def pytest_maka_acquire_lease(executor, request):
            raise InfraError("engine down")
        """
    )
    result = cohort.run()
    assert result.ret == 7
    attempts = cohort.attempts()
    assert len(attempts) == 3 + 2, [(a["cell_id"], a["attempt"]) for a in attempts]
    first, second = sorted(attempts, key=lambda a: a["started_at"])[:2]
    assert first["cell_id"] == second["cell_id"] and second["attempt"] == 2
    pause = _iso(second["started_at"]) - _iso(first["finished_at"])
    assert pause >= 0.1, "the retry waited (backoff 0.2 s with at most -50% jitter)"


def _iso(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def test_corrupt_lock_file_is_moved_aside_not_overwritten(cohort: Cohort) -> None:
    cohort.task("t")
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}])
    cohort.run()
    (cohort.out / "lock.json").write_text('{"runs": [truncated')
    result = cohort.run()
    result.stdout.fnmatch_lines(
        ["*maka: warning: *lock.json: not a lock file (JSONDecodeError: *); moved to lock.corrupt-*"]
    )
    [aside] = cohort.out.glob("lock.corrupt-*.json")
    assert aside.read_text() == '{"runs": [truncated', "what was there is kept"
    assert len(json.loads((cohort.out / "lock.json").read_text())["runs"]) == 1


def test_non_integer_token_count_is_reported_not_dropped_silently(cohort: Cohort) -> None:
    cohort.task("t")
    usage = '{"input_tokens": "12k", "output_tokens": 5, "cost_usd": "cheap"}'
    command = f"echo ok > /app/done.txt; echo '{usage}' > /logs/agent/usage.json"
    cohort.write(subjects=[{"name": "agent", "kind": "command", "command": command}])
    cohort.run().assert_outcomes(passed=1)
    record = cohort.results()["t[agent-r0]"]
    assert record["usage"]["output_tokens"] == 5 and record["usage"]["input_tokens"] is None
    assert record["agent"]["usage_problems"] == [
        "usage.json: input_tokens is '12k', expected a non-negative integer; ignored",
        "usage.json: cost_usd is 'cheap', expected a number; ignored",
    ]


def test_cell_timeout_bounds_the_verifier_too(cohort: Cohort) -> None:
    """The subject is quick, the verifier would take 60 s: it gets only what is left of the
    cell's 3 s and the cell is budget_exhausted, not a verifier failure or a pass."""
    cohort.task("slowcheck", test="sleep 60; echo 1 > /logs/verifier/reward.txt\n", verifier_timeout=120)
    cohort.write(subjects=[{"name": "oracle", "kind": "oracle"}], budgets={"cell_timeout_sec": 3})
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["slowcheck[oracle-r0]"]
    assert record["status"] == "budget_exhausted", record["error"]
    assert record["error"]["message"] == "budget exhausted: cell_timeout_sec"
    assert 0 < record["verifier"]["timeout_sec"] <= 3 and record["verifier"]["timed_out"] is True


def test_cell_timeout_spent_by_the_subject_leaves_no_verifier_run(cohort: Cohort) -> None:
    cohort.task("t", agent_timeout=120)
    cohort.write(
        subjects=[{"name": "sleeper", "kind": "command", "command": "sleep 60"}], budgets={"cell_timeout_sec": 2}
    )
    cohort.run().assert_outcomes(failed=1)
    record = cohort.results()["t[sleeper-r0]"]
    assert record["status"] == "budget_exhausted"
    assert record["agent"]["timed_out"] is True and record["agent"]["timeout_sec"] <= 2
    assert record["verifier"] == {}, "no time was left to verify"
