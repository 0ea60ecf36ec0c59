"""Running one cell: attempts, retries for infra failures, resume from the ledger.

acquire lease → prepare → run subject → stop → freeze → restore → verify → classify → record
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..core import progress
from ..core.cell import Cell
from ..core.errors import ExecutorUnavailable, InfraError
from ..core.interrupts import sigint_deferred
from ..core.record_model import AttemptRecord
from ..core.records import attempt_record, cell_record, is_final, next_run, run_of
from ..core.steps import step_views
from ..core.taxonomy import AttemptFacts, Status, SubjectOutcome, classify
from ..executors.base import Executor, LeaseRequest, Sandbox
from ..executors.hostfs import remove_path
from ..store.ledger import Ledger
from ..store.retries import RetryAllowance
from ..subjects.base import Subject
from ..verifiers.base import Verifier
from .attempt import run_attempt_steps
from .provider_down import ProviderDown
from .record import agent_mapping, budget_mapping, isolation_mapping, steps_mapping, verifier_mapping
from .settings import RunSettings
from .spend import CohortSpend
from .work import AttemptWork, subject_mounts

__all__ = ["AnnotateFn", "CellRunner", "ClassifyFn", "LeaseFn", "RunSettings", "attempt_dir_for", "retryable"]

LeaseFn = Callable[[LeaseRequest], AbstractContextManager[Sandbox]]
ClassifyFn = Callable[[AttemptFacts, Cell], Status]
AnnotateFn = Callable[[AttemptRecord, Cell], AttemptRecord]


def attempt_dir_for(out_dir: Path, cell: Cell, number: int) -> Path:
    """Where attempt ``number`` of ``cell`` keeps its artifacts (made when the attempt starts)."""
    return out_dir / "cells" / cell.key / f"attempt-{number}"


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
        observer: progress.AttemptObserver | None = None,
    ) -> None:
        self.settings = settings
        self.executor = executor
        self.subjects = subjects
        self.verifiers = verifiers
        self.ledger = ledger
        self.classify_fn = classify_fn
        self.annotate_fn = annotate_fn
        self.observer = observer
        #: Cells of each subject in this cohort (set by the session) and how their starts went.
        self.cells_per_subject: dict[str, int] = {}
        self._starts: dict[str, list[int]] = {}  # subject -> [cells that could not start, cells that did]
        self._last_start_error = ""
        self._previous: dict[str, list[AttemptRecord]] = {}
        self._allowance: RetryAllowance | None = None
        #: The run's spend so far, from the shared ledger (only with ``budgets.cohort_max_cost_usd``).
        self.cohort_spend = CohortSpend(ledger.path, settings.cohort_started)
        #: Subjects whose provider an attempt of this run found unusable (from the shared ledger).
        self.provider_down = ProviderDown(ledger.path, settings.cohort_started)
        self.learn(ledger.read())

    def learn(self, records: list[AttemptRecord]) -> None:
        """Take in ledger lines (also ones other processes appended since, e.g. a lost worker's)."""
        for record in records:
            known = self._previous.setdefault(record.cell_key, [])
            if all(r.attempt != record.attempt for r in known):
                known.append(record)

    def previous(self, cell: Cell) -> list[AttemptRecord]:
        return list(self._previous.get(cell.key, []))

    def target_run(self, cell: Cell) -> int:
        """The run of ``cell`` this process's attempts belong to (``next_run``)."""
        return next_run(self.previous(cell), rerun=self.settings.rerun, session_started=self.settings.cohort_started)

    def resumable(self, cell: Cell) -> AttemptRecord | None:
        """The cell's standing record if the ledger already holds a final result of its current run."""
        prev = self.previous(cell)
        target = self.target_run(cell)
        if any(is_final(r) for r in prev if run_of(r) == target):
            return cell_record(prev).updated(resumed=True)
        return None

    def run_cell(self, cell: Cell, lease: LeaseFn, scratch: Path) -> AttemptRecord:
        """Run attempts until one is not an infra (or retryable verifier) failure.

        Infra retries pause first (exponential backoff with jitter), and every retry is
        drawn from one allowance shared by the whole run, so a lost engine cannot burn
        every attempt of every cell within seconds.
        """
        resumed = self.resumable(cell)
        if resumed is not None:
            return resumed
        attempts = self.previous(cell)
        number = max((r.attempt for r in attempts), default=0)
        retries = self.settings.retries
        left = {Status.INFRA_FAILURE: retries.infra, Status.VERIFIER_FAILURE: retries.verifier}
        pauses = 0
        while True:
            number += 1
            record = self.run_attempt(cell, number, lease, scratch)
            attempts.append(record)
            status = record.status
            if not retryable(record) or left.get(status, 0) <= 0 or not self.allowance.take():
                break
            left[status] -= 1
            if status is Status.INFRA_FAILURE:
                time.sleep(self.backoff(pauses))
                pauses += 1
        self._previous[cell.key] = attempts
        self._note_start(cell.subject.name, record)
        return cell_record(attempts)

    @property
    def allowance(self) -> RetryAllowance:
        if self._allowance is None:
            run_id = f"{self.settings.cohort_started:.6f}"
            self._allowance = RetryAllowance(self.settings.out_dir, run_id, self.settings.retry_limit())
        return self._allowance

    def backoff(self, pauses: int) -> float:
        """Seconds to wait before the next infra retry of a cell that already paused ``pauses`` times."""
        retries = self.settings.retries
        base = min(retries.backoff_max_sec, retries.backoff_sec * 2**pauses)
        return base * random.uniform(0.5, 1.5)

    def _note_start(self, subject: str, record: AttemptRecord) -> None:
        counts = self._starts.setdefault(subject, [0, 0])
        started = record.agent.started if record.agent is not None else None
        counts[0 if started is False else 1] += 1
        if started is False:
            self._last_start_error = (record.error.message if record.error else None) or "it could not start"

    def stop_reason(self) -> str | None:
        """One line when a subject failed to start in every cell tried (at least its first two)."""
        for subject, (failed, ok) in self._starts.items():
            needed = min(2, self.cells_per_subject.get(subject, 2))
            if ok == 0 and failed >= needed:
                why = self._last_start_error
                return f"maka: subject {subject!r} could not start in any of its first {failed} cells ({why}); stopping"
        return None

    def attempt_dir(self, cell: Cell, number: int) -> Path:
        return attempt_dir_for(self.settings.out_dir, cell, number)

    def run_attempt(self, cell: Cell, number: int, lease: LeaseFn, scratch: Path) -> AttemptRecord:
        """One attempt, always ending in exactly one ledger line (also on Ctrl-C, a second
        Ctrl-C while recording, a failing hook or any harness error)."""
        settings = self.settings
        subject = self.subjects[cell.subject.name]
        attempt_dir = self.attempt_dir(cell, number)
        work = AttemptWork(
            cell=cell,
            subject=subject,
            verifier=self.verifiers[cell.task.grading],
            executor=self.executor,
            settings=settings,
            attempt_dir=attempt_dir,
            cohort_spent=self.cohort_spend if settings.budgets.cohort_max_cost_usd is not None else None,
        )
        with progress.attempt_scope(self.observer, cell, number):
            return self._run_attempt(work, number, lease, scratch)

    def _run_attempt(self, work: AttemptWork, number: int, lease: LeaseFn, scratch: Path) -> AttemptRecord:
        attempt_dir = work.attempt_dir
        started = time.time()
        aborted = False
        try:
            if attempt_dir.exists():
                remove_path(attempt_dir)  # left by a crash before its ledger line: never counted
            attempt_dir.mkdir(parents=True)
            self._run_steps(work, number, lease, scratch, started)
        except KeyboardInterrupt:
            aborted = True
            work.aborted = True
        except (InfraError, ExecutorUnavailable, OSError) as e:
            where = work.isolation.sandbox.get("engine") if isinstance(e, OSError) else None
            # an I/O error no executor step named (e.g. a connection reset by a dying engine) says where
            work.infra_error = f"{where + ': ' if where else ''}{type(e).__name__}: {e}"
            work.retryable = getattr(e, "retryable", True)
        except Exception as e:  # a harness bug is infra, never the agent's fault
            _note_traceback(attempt_dir)
            work.infra_error = f"harness error: {type(e).__name__}: {e}"
        with sigint_deferred():  # a Ctrl-C now (a first or a second) must not lose the line
            self.ledger.redactor.tree(attempt_dir)  # names and contents of every artifact
            record = self.ledger.append(self._record(work, number, started))
        progress.attempt_finished(record)
        if aborted:
            raise KeyboardInterrupt
        return record

    def _run_steps(self, work: AttemptWork, number: int, lease: LeaseFn, scratch: Path, started: float) -> None:
        cell, subject = work.cell, work.subject
        denied = self._policy_denial(subject)
        budget = self._cohort_budget_left(started)
        if denied:
            work.policy_denied = denied
            return
        down = self.provider_down(cell.subject.name)
        if down is not None:  # the same provider and key would fail this cell the same way
            work.agent_facts.not_started = work.provider_unusable = f"not run: {down}"
            work.subject_outcome, work.retryable = SubjectOutcome(started=False), False
            return
        if budget is not None and budget <= 0:
            work.budget_exceeded, work.subject_outcome = "cohort_timeout_sec", SubjectOutcome(started=False)
            return
        cap = self.settings.budgets.cohort_max_cost_usd
        if cap is not None and self.cohort_spend() >= cap:
            work.agent_facts.not_started = f"the run spent {self.cohort_spend():.4f} USD of its {cap} USD cap"
            work.budget_exceeded, work.subject_outcome = "cohort_max_cost_usd", SubjectOutcome(started=False)
            return
        scratch_dir = Path(tempfile.mkdtemp(prefix=f"a{number}-", dir=scratch))
        deadline = self._deadline(started, budget)
        try:
            request = LeaseRequest(
                cell=cell,
                attempt=number,
                attempt_dir=work.attempt_dir,
                scratch_dir=scratch_dir,
                uploads=subject.uploads(step_views(cell.task)[0]),  # a multi-step task's first step
                mounts=subject_mounts(subject, cell.task, work),
                deadline=deadline[0] if deadline else None,
            )
            run_attempt_steps(work, lease, request, deadline=deadline)
        finally:
            with contextlib.suppress(OSError):  # any depth: what the subject left may be deep
                remove_path(scratch_dir)

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

    def _record(self, work: AttemptWork, number: int, started: float) -> AttemptRecord:
        """The attempt's ledger line; a failing classify or record hook makes it infra_failure."""
        facts = work.facts()
        try:
            status = Status(self.classify_fn(facts, work.cell))
        except Exception as e:
            _note_traceback(work.attempt_dir)
            return self._build(work, number, started, _hook_failure(work, "pytest_maka_classify", e))
        record = self.ledger.redactor.record(self._build(work, number, started, status))  # hooks never see a secret
        if self.annotate_fn is None:
            return record
        try:
            return self.annotate_fn(record, work.cell)
        except Exception as e:
            _note_traceback(work.attempt_dir)
            return self._build(work, number, started, _hook_failure(work, "pytest_maka_record", e))

    def _build(self, work: AttemptWork, number: int, started: float, status: Status) -> AttemptRecord:
        """The one place the attempt's typed facts become the record (run/record.py)."""
        facts = work.facts()
        return attempt_record(
            work.cell,
            cohort=self.settings.cohort,
            attempt=number,
            status=status,
            started=started,
            finished=time.time(),
            score=work.verdict.score if work.verdict else None,
            usage=work.usage,
            agent=agent_mapping(work.agent_facts, work.cell),
            verifier=verifier_mapping(work.verifier_facts),
            subject_claim=work.claim,
            isolation=isolation_mapping(work.isolation),
            budget=budget_mapping(work.budget_facts, work.budget_exceeded),
            artifacts=work.artifacts(self.settings.out_dir) if work.attempt_dir.exists() else {},
            timings=work.timings,
            error=_with_retry(work.error_for(status, facts), work.retryable),
            steps=steps_mapping(work, work.steps) if work.steps is not None else None,
            run=self.target_run(work.cell),
            taint=work.taint,
            read_only_system=work.read_only_system,
        )


def _with_retry(error: dict[str, Any] | None, retryable: bool) -> dict[str, Any] | None:
    return {**error, "retryable": False} if error is not None and not retryable else error


def retryable(record: AttemptRecord) -> bool:
    """False when the attempt's error says another attempt would fail the same way."""
    return record.error is None or record.error.retryable is not False


def _hook_failure(work: AttemptWork, hook: str, exc: Exception) -> Status:
    """Record that a hook failed: the attempt has no fair result (infra_failure, the hook named)."""
    work.infra_error = f"the {hook} hook failed: {type(exc).__name__}: {exc}"
    return Status.INFRA_FAILURE


def _note_traceback(attempt_dir: Path) -> None:
    """Keep the traceback of a harness error beside the attempt (best effort)."""
    try:
        attempt_dir.mkdir(parents=True, exist_ok=True)
        with (attempt_dir / "harness-error.txt").open("a", encoding="utf-8") as fh:
            fh.write(traceback.format_exc())
    except OSError:
        pass
