"""Conformance: a subject cannot push its failure out of the official denominator (issue 22, §4).

Each test runs one whole attempt of a ``command`` subject that fails the task (the verifier
gives reward 1 only when ``output.txt`` in the workdir says ``right``) and then does what would
turn its failure into ``verifier_failure``, ``budget_exhausted`` or ``infra_failure``: it
keeps the verifier waiting on what it left, prints the words of a missing network into what
the verifier shows, reports an absurd cost, or writes a report nested too deeply to parse.
Each must end as the subject's official ``agent_failure``, run once (DESIGN.md §3).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from ...core.spec import Policy, Retries
from ...core.task import Task
from ...executors.base import Executor
from .attempts import command_attempt
from .base import ConformanceBase

#: The verifier: reward 1 only when the workdir's output.txt says "right".
READS_OUTPUT = """#!/bin/sh
mkdir -p /logs/verifier
if [ "$(cat output.txt)" = right ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


class DenominatorTests(ConformanceBase):
    """What the subject leaves or reports never makes its failure someone else's."""

    _runs = itertools.count()

    def failed_attempt(
        self,
        executor: Executor,
        task: Task,
        tmp_path: Path,
        command: str,
        *,
        verifier: str = READS_OUTPUT,
        **budgets: Any,
    ) -> dict[str, Any]:
        """One attempt of a ``command`` subject under ``budgets``; its record as results.jsonl holds it."""
        n = next(self._runs)
        return command_attempt(
            executor,
            task,
            tmp_path,
            command,
            n=n,
            name=f"denominator-{n}",
            dirs="denominator-",
            verifier=verifier,
            budgets=budgets,
            policy=Policy(allow_unsandboxed=True),
            retries=Retries(infra=1),
        )

    def assert_its_failure(self, record: dict[str, Any]) -> None:
        assert record["status"] == "agent_failure" and record["official"] is True, record["error"]
        assert record["attempt_count"] == 1, record["error"]

    @pytest.mark.parametrize(
        "plant", ["mkfifo output.txt", "ln -s /dev/zero output.txt", "ln -s /dev/stdin output.txt"]
    )
    def test_a_verifier_kept_waiting_by_what_the_subject_left_is_its_failure(
        self, executor: Executor, task: Task, tmp_path: Path, plant: str
    ) -> None:
        """A verifier timeout is a rejection (as in Harbor), not ``verifier_failure``."""
        record = self.failed_attempt(executor, task, tmp_path, plant, verifier_timeout_sec=3)
        self.assert_its_failure(record)

    def test_network_failure_text_from_the_subject_is_no_evidence(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        fake = "Temporary failure resolving 'deb.debian.org'; Could not resolve host: pypi.org"
        verifier = "#!/bin/sh\ncat output.txt; mkdir -p /logs/verifier; echo 0 > /logs/verifier/reward.txt\n"
        record = self.failed_attempt(executor, task, tmp_path, f'echo "{fake}" > output.txt', verifier=verifier)
        self.assert_its_failure(record)

    def test_an_absurd_self_reported_cost_after_a_rejection_stays_a_failure(
        self, executor: Executor, task: Task, tmp_path: Path
    ) -> None:
        """Tokens and cost are the subject's own report: no ``budget_exhausted`` from them."""
        usage = json.dumps({"input_tokens": 10**12, "output_tokens": 10**12, "cost_usd": 1e12})
        command = f"echo wrong > output.txt; echo '{usage}' > $MAKA_LOGS_DIR/usage.json"
        record = self.failed_attempt(executor, task, tmp_path, command, max_cost_usd=1.0, max_tokens=1000)
        self.assert_its_failure(record)

    @pytest.mark.parametrize("name", ["usage.json", "claim.json", "trajectory.json"])
    def test_a_deeply_nested_report_is_read_as_absent(
        self, executor: Executor, task: Task, tmp_path: Path, name: str
    ) -> None:
        """200,000 levels of ``[`` (made by the shell's tools: no interpreter is assumed)."""
        deep = "head -c 200000 /dev/zero | tr '\\0' '['"
        command = f"echo wrong > output.txt; ({deep}) > $MAKA_LOGS_DIR/{name}"
        record = self.failed_attempt(executor, task, tmp_path, command)
        self.assert_its_failure(record)
