"""A subject cannot push its failure out of the official denominator, on Docker (issue 22, §4).

The attacks of ``tests/executors/test_denominator.py`` run by a ``command`` subject in a real
container (``executor: {kind: docker}``): each ends as the subject's official result, run once,
never ``verifier_failure``, ``budget_exhausted`` or ``infra_failure``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import Cohort
from ..executors.test_denominator import READS_OUTPUT

pytestmark = pytest.mark.docker


def _one(
    cohort: Cohort,
    state: Path,
    command: str,
    *,
    test: str = READS_OUTPUT,
    verifier_timeout: float = 30,
    extra_toml: str = "",
    **spec: object,
) -> dict:
    cohort.task("t", test=test, verifier_timeout=verifier_timeout, extra_toml=extra_toml)
    executor = {"kind": "docker", "kill_grace_sec": 0.5, "state_dir": str(state)}
    cohort.write(subjects=[{"name": "s", "kind": "command", "command": command}], executor=executor, **spec)
    result = cohort.run_subprocess("-p", "no:cacheprovider", timeout=600)
    records = cohort.results() if (cohort.out / "results.jsonl").is_file() else {}
    assert "t[s-r0]" in records, result.stdout.str()[-3000:]
    return records["t[s-r0]"]


@pytest.fixture
def state(docker_api, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("state")


@pytest.mark.parametrize(
    "plant",
    ["mkfifo /app/output.txt", "ln -s /dev/zero /app/output.txt", "ln -s /dev/stdin /app/output.txt"],
)
def test_a_verifier_kept_waiting_by_what_the_subject_left_is_its_failure(
    cohort: Cohort, state: Path, plant: str
) -> None:
    record = _one(cohort, state, plant, verifier_timeout=3)
    assert record["status"] == "agent_failure" and record["official"], record
    assert record["attempt_count"] == 1


def test_network_failure_text_from_the_subject_is_no_evidence(cohort: Cohort, state: Path) -> None:
    fake = "Temporary failure resolving 'deb.debian.org'; Could not resolve host: pypi.org"
    test = "cat /app/output.txt; echo 0 > /logs/verifier/reward.txt\n"
    record = _one(cohort, state, f'echo "{fake}" > /app/output.txt', test=test)
    assert record["status"] == "agent_failure" and record["official"], record


def test_an_absurd_self_reported_cost_after_a_rejection_stays_a_failure(cohort: Cohort, state: Path) -> None:
    usage = json.dumps({"input_tokens": 10**12, "output_tokens": 10**12, "cost_usd": 1e12})
    record = _one(cohort, state, f"echo wrong > /app/output.txt; echo '{usage}' > $MAKA_LOGS_DIR/usage.json",
                  budgets={"max_cost_usd": 1.0, "max_tokens": 1000})  # fmt: skip
    assert record["status"] == "agent_failure" and record["official"], record


@pytest.mark.parametrize("name", ["usage.json", "claim.json", "trajectory.json"])
def test_deeply_nested_reports_are_the_subjects_own_problem(cohort: Cohort, state: Path, name: str) -> None:
    deep = "python3 -c \"print('[' * 200000 + ']' * 200000)\""
    record = _one(cohort, state, f"echo wrong > /app/output.txt; {deep} > $MAKA_LOGS_DIR/{name}")
    assert record["status"] == "agent_failure" and record["official"], record
    for view in ("report.html", "summary.md"):
        assert (cohort.out / view).is_file()
        (cohort.out / view).unlink()
    rebuilt = subprocess.run([sys.executable, "-m", "pytest_maka.cli", "report", str(cohort.out)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rebuilt.returncode == 0 and "Traceback" not in rebuilt.stderr, rebuilt.stderr[-2000:]
    assert "t[s-r0]" in (cohort.out / "report.html").read_text() and (cohort.out / "summary.md").is_file()
