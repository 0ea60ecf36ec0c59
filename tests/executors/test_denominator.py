"""A subject cannot push its failure out of the official denominator (issue 22, section 4).

Each attack is a real cohort run on the local executor by a ``command`` subject that fails the
task and then does what would turn its failure into ``verifier_failure``, ``budget_exhausted``
or ``infra_failure``. The rule (DESIGN.md §3): a subject-caused condition is the subject's
result; only evidence the subject could not have produced makes an attempt non-official.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import Cohort, needs_bwrap

pytestmark = needs_bwrap

#: The task reads /app/output.txt: the reward is 1 when it says "right".
READS_OUTPUT = (
    'mkdir -p /logs/verifier; if [ "$(cat /app/output.txt)" = right ]; then echo 1; else echo 0; fi'
    " > /logs/verifier/reward.txt\n"
)


def _one(
    cohort: Cohort, command: str, *, test: str = READS_OUTPUT, verifier_timeout: float = 30, **spec: object
) -> dict:
    cohort.task("t", test=test, verifier_timeout=verifier_timeout)
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": command}], **spec)
    result = cohort.run_subprocess("-p", "no:cacheprovider", timeout=300)
    records = cohort.results()
    assert "t[s-r0]" in records, result.stdout.str()[-3000:]
    return records["t[s-r0]"]


@pytest.mark.parametrize(
    "plant",
    ["mkfifo /app/output.txt", "ln -s /dev/zero /app/output.txt", "ln -s /dev/stdin /app/output.txt"],
)
def test_a_verifier_kept_waiting_by_what_the_subject_left_is_its_failure(cohort: Cohort, plant: str) -> None:
    record = _one(cohort, plant, verifier_timeout=3)
    assert record["status"] == "agent_failure" and record["official"], record
    assert record["attempt_count"] == 1


def test_network_failure_text_from_the_subject_is_no_evidence(cohort: Cohort) -> None:
    fake = "Temporary failure resolving 'deb.debian.org'; Could not resolve host: pypi.org"
    test = "cat /app/output.txt; echo 0 > /logs/verifier/reward.txt\n"
    record = _one(cohort, f'echo "{fake}" > /app/output.txt', test=test)
    assert record["status"] == "agent_failure" and record["official"], record


def test_an_absurd_self_reported_cost_after_a_rejection_stays_a_failure(cohort: Cohort) -> None:
    usage = json.dumps({"input_tokens": 10**12, "output_tokens": 10**12, "cost_usd": 1e12})
    record = _one(cohort, f"echo wrong > /app/output.txt; echo '{usage}' > $MAKA_LOGS_DIR/usage.json",
                  budgets={"max_cost_usd": 1.0, "max_tokens": 1000})  # fmt: skip
    assert record["status"] == "agent_failure" and record["official"], record


@pytest.mark.parametrize("name", ["usage.json", "claim.json", "trajectory.json"])
def test_deeply_nested_reports_are_the_subjects_own_problem(cohort: Cohort, name: str) -> None:
    deep = "python3 -c \"print('[' * 200000 + ']' * 200000)\""
    record = _one(cohort, f"echo wrong > /app/output.txt; {deep} > $MAKA_LOGS_DIR/{name}")
    assert record["status"] == "agent_failure" and record["official"], record
    assert (cohort.out / "report.html").is_file() and (cohort.out / "summary.md").is_file()
    for view in ("report.html", "summary.md"):
        (cohort.out / view).unlink()
    rebuilt = subprocess.run([sys.executable, "-m", "pytest_maka.cli", "report", str(cohort.out)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rebuilt.returncode == 0 and "Traceback" not in rebuilt.stderr, rebuilt.stderr[-2000:]
    assert "t[s-r0]" in (cohort.out / "report.html").read_text() and (cohort.out / "summary.md").is_file()


@pytest.mark.parametrize(
    "fill",
    [
        "dd if=/dev/zero of=/app/fill bs=1M 2>/dev/null; dd if=/dev/zero of=/logs/agent/fill bs=4k 2>/dev/null",
        "mkdir /app/many; cd /app/many; i=0; while : > f$i 2>/dev/null; do i=$((i+1)); done",
    ],
    ids=["space", "inodes"],
)
def test_a_full_disk_at_the_harness_s_own_write_is_the_subject_s_result(cohort: Cohort, fill: str) -> None:
    cohort.task("t", test=READS_OUTPUT, extra_toml="storage_mb = 16\n", verifier_timeout=30)
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": f"echo wrong > /app/output.txt; {fill}; true"}])
    result = cohort.run_subprocess("-p", "no:cacheprovider", timeout=300)
    record = cohort.results()["t[s-r0]"]
    assert record["storage"]["enforced"] if "storage" in record else True
    assert record["status"] == "agent_failure" and record["official"], (record, result.stdout.str()[-2000:])
    assert record["attempt_count"] == 1
