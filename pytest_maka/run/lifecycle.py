"""Running one cell: attempts, retries for infra failures, resume from the ledger.

acquire lease → prepare → run subject → stop → freeze → restore → verify → classify → record
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.cell import Cell
from ..core.errors import ExecutorUnavailable, InfraError
from ..core.records import Record, attempt_record, cell_record, is_final
from ..core.spec import Budgets, Policy, Retries
from ..core.taxonomy import AttemptFacts, Status, SubjectOutcome, classify
from ..executors.base import Executor, LeaseRequest, Sandbox
from ..store.ledger import Ledger
from ..subjects.base import Subject
from ..verifiers.base import Verifier
from .attempt import AttemptWork, run_attempt_steps, subject_mounts

LeaseFn = Callable[[LeaseRequest], AbstractContextManager[Sandbox]]
ClassifyFn = Callable[[AttemptFacts, Cell], Status]
AnnotateFn = Callable[[dict[str, Any], Cell], None]


@dataclass
class RunSettings:
    """The parts of the spec the lifecycle needs, plus where to write."""

    cohort: str
    out_dir: Path
    budgets: Budgets
    policy: Policy
    retries: Retries
    cohort_started: float = field(default_factory=time.time)


def default_classify(facts: AttemptFacts, cell: Cell) -> Status:
    return classify(facts)


class CellRunner:
    """Runs cells in this process; one per pytest process (controller or xdist worker)."""

    def __init__(
        self,
        settings: RunSettings,
        executor: Executor,
        subjects: dict[str, Subject],
        verifiers: dict[str, Verifier],
        ledger: Ledger,
        *,
        classify_fn: ClassifyFn = default_classify,
        annotate_fn: AnnotateFn | None = None,
    ) -> None:
        self.settings = settings
        self.executor = executor
        self.subjects = subjects
        self.verifiers = verifiers
        self.ledger = ledger
        self.classify_fn = classify_fn
        self.annotate_fn = annotate_fn
        #: Cells of each subject in this cohort (set by the session) and how their starts went.
        self.cells_per_subject: dict[str, int] = {}
        self._starts: dict[str, list[int]] = {}  # subject -> [cells that could not start, cells that did]
        self._last_start_error = ""
        self._previous: dict[str, list[Record]] = {}
        for record in ledger.read():
            self._previous.setdefault(record["cell_key"], []).append(record)

    def previous(self, cell: Cell) -> list[Record]:
        return list(self._previous.get(cell.key, []))

    def resumable(self, cell: Cell) -> Record | None:
        """The cell's standing record if the ledger already holds a final result for it."""
        prev = self.previous(cell)
        if any(is_final(r) for r in prev):
            record = cell_record(prev)
            record["resumed"] = True
            return record
        return None

    def run_cell(self, cell: Cell, lease: LeaseFn, scratch: Path) -> Record:
        """Run attempts until one is not an infra (or retryable verifier) failure."""
        resumed = self.resumable(cell)
        if resumed is not None:
            return resumed
        attempts = self.previous(cell)
        number = max((r["attempt"] for r in attempts), default=0)
        retries = self.settings.retries
        left = {Status.INFRA_FAILURE: retries.infra, Status.VERIFIER_FAILURE: retries.verifier}
        while True:
            number += 1
            record = self.run_attempt(cell, number, lease, scratch)
            attempts.append(record)
            status = Status(record["status"])
            if left.get(status, 0) <= 0:
                break
            left[status] -= 1
        self._previous[cell.key] = attempts
        self._note_start(cell.subject.name, record)
        return cell_record(attempts)

    def _note_start(self, subject: str, record: Record) -> None:
        counts = self._starts.setdefault(subject, [0, 0])
        started = (record.get("agent") or {}).get("started", True)
        counts[0 if started is False else 1] += 1
        if started is False:
            self._last_start_error = (record.get("error") or {}).get("message") or "it could not start"

    def stop_reason(self) -> str | None:
        """One line when a subject failed to start in every cell tried (at least its first two)."""
        for subject, (failed, ok) in self._starts.items():
            needed = min(2, self.cells_per_subject.get(subject, 2))
            if ok == 0 and failed >= needed:
                why = self._last_start_error
                return f"maka: subject {subject!r} could not start in any of its first {failed} cells ({why}); stopping"
        return None

    def attempt_dir(self, cell: Cell, number: int) -> Path:
        return self.settings.out_dir / "cells" / cell.key / f"attempt-{number}"

    def run_attempt(self, cell: Cell, number: int, lease: LeaseFn, scratch: Path) -> Record:
        """One attempt, always ending in exactly one ledger line (also on Ctrl-C)."""
        settings = self.settings
        subject = self.subjects[cell.subject.name]
        attempt_dir = self.attempt_dir(cell, number)
        if attempt_dir.exists():
            shutil.rmtree(attempt_dir)  # left by a crash before its ledger line: never counted
        attempt_dir.mkdir(parents=True)
        work = AttemptWork(
            cell=cell,
            subject=subject,
            verifier=self.verifiers[cell.task.grading],
            executor=self.executor,
            settings=settings,
            attempt_dir=attempt_dir,
        )
        started = time.time()
        aborted = False
        denied = self._policy_denial(subject)
        budget = self._cohort_budget_left(started)
        try:
            if denied:
                work.facts_update(policy_denied=denied)
            elif budget is not None and budget <= 0:
                work.facts_update(budget_exceeded="cohort_timeout_sec", subject=SubjectOutcome(started=False))
            else:
                scratch_dir = Path(tempfile.mkdtemp(prefix=f"a{number}-", dir=scratch))
                try:
                    request = LeaseRequest(
                        cell=cell,
                        attempt=number,
                        attempt_dir=attempt_dir,
                        scratch_dir=scratch_dir,
                        uploads=subject.uploads(cell.task),
                        mounts=subject_mounts(subject, cell.task),
                    )
                    run_attempt_steps(work, lease, request, deadline=self._deadline(started, budget))
                finally:
                    shutil.rmtree(scratch_dir, ignore_errors=True)
        except KeyboardInterrupt:
            aborted = True
            work.facts_update(aborted=True)
        except (InfraError, ExecutorUnavailable, OSError) as e:
            work.facts_update(infra_error=f"{type(e).__name__}: {e}")
        except Exception as e:  # a harness bug is infra, never the agent's fault
            (attempt_dir / "harness-error.txt").write_text(traceback.format_exc())
            work.facts_update(infra_error=f"harness error: {type(e).__name__}: {e}")
        record = self._record(work, number, started)
        self.ledger.append(record)
        if aborted:
            raise KeyboardInterrupt
        return record

    def _policy_denial(self, subject: Subject) -> str | None:
        if self.executor.isolated or subject.reference or self.settings.policy.allow_unsandboxed:
            return None
        return (
            f"subject kind {subject.spec.kind!r} is model-backed and the {self.executor.kind!r} executor "
            "gives no isolation here; set policy.allow_unsandboxed: true to opt out"
        )

    def _cohort_budget_left(self, now: float) -> float | None:
        limit = self.settings.budgets.cohort_timeout_sec
        return None if limit is None else limit - (now - self.settings.cohort_started)

    def _deadline(self, started: float, cohort_left: float | None) -> tuple[float, str] | None:
        """The earliest experimenter deadline for this attempt, with its budget name."""
        options = []
        if self.settings.budgets.cell_timeout_sec is not None:
            options.append((started + self.settings.budgets.cell_timeout_sec, "cell_timeout_sec"))
        if cohort_left is not None:
            options.append((started + cohort_left, "cohort_timeout_sec"))
        return min(options) if options else None

    def _record(self, work: AttemptWork, number: int, started: float) -> Record:
        facts = work.facts()
        status = self.classify_fn(facts, work.cell)
        error = work.error_for(status, facts)
        record = attempt_record(
            work.cell,
            cohort=self.settings.cohort,
            attempt=number,
            status=status,
            started=started,
            finished=time.time(),
            score=work.verdict.score if work.verdict else None,
            usage=work.usage,
            agent=work.agent_info,
            verifier=work.verifier_info,
            subject_claim=work.claim,
            isolation=work.isolation,
            budget=work.budget_info,
            artifacts=work.artifacts(self.settings.out_dir),
            timings=work.timings,
            error=error,
        )
        if self.annotate_fn is not None:
            self.annotate_fn(record, work.cell)
        return record
