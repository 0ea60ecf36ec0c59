"""One whole attempt of a ``command`` subject through the real lifecycle, for the conformance groups
that judge what a subject leaves (tamper, denominator)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...core.cell import Cell
from ...core.spec import Budgets, Policy, Retries, SubjectSpec
from ...core.task import Task
from ...executors.base import Executor
from ...run.lifecycle import CellRunner, RunSettings
from ...store.ledger import Ledger
from ...subjects.command import Command, CommandOptions
from ...verifiers.reward import RewardVerifier


def command_attempt(
    executor: Executor,
    task: Task,
    tmp_path: Path,
    command: str,
    *,
    n: int,
    name: str,
    dirs: str,
    verifier: str,
    tests: Mapping[str, str] | None = None,
    budgets: Mapping[str, Any] | None = None,
    policy: Policy,
    retries: Retries,
) -> dict[str, Any]:
    """Run ``command`` as the subject ``name``, the ``n``-th (``verifier``: the test.sh, ``tests``:
    more files of the tests directory; output in ``tmp_path/<dirs>out-<n>``); its record as
    results.jsonl holds it."""
    assert task.tests_dir is not None
    (task.tests_dir / "test.sh").write_text(verifier)
    for file, text in (tests or {}).items():
        (task.tests_dir / file).write_text(text)
    spec = SubjectSpec(
        name=name,
        kind="command",
        options=CommandOptions(command=command),
        declared_in=tmp_path / "cohort.yaml",
        digest=f"{n:064d}",
    )
    out, scratch = tmp_path / f"{dirs}out-{n}", tmp_path / f"{dirs}scratch-{n}"
    scratch.mkdir()
    settings = RunSettings(
        cohort="conformance",
        out_dir=out,
        budgets=Budgets(**{"agent_timeout_sec": 120, "verifier_timeout_sec": 120, **(budgets or {})}),
        policy=policy,
        retries=retries,
    )
    runner = CellRunner(settings, executor, {spec.name: Command(spec)}, {"reward": RewardVerifier()}, Ledger(out))
    executor.prepare([task])
    record = runner.run_cell(Cell(task=task, subject=spec, repetition=1), executor.lease, scratch)
    return record.to_json()
