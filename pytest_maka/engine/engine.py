"""The engine of one process: a cohort with its subjects, verifiers, executor and cell runner.

"Run one cell" lives here (``Engine.run_cell``): the strategies (serial, the in-process pool,
xdist workers, Dask workers) all end in it or in ``Engine.runner.run_attempt``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from .. import hostcheck
from ..contracts import contract_problem
from ..core.cell import Cell
from ..core.cohort import Cohort
from ..core.errors import ExecutorUnavailable
from ..core.record_model import AttemptRecord
from ..core.steps import step_views
from ..core.task import FEATURES, Task
from ..executors.base import Executor, LeaseRequest, TaskChecks
from ..run.lifecycle import CellRunner, LeaseFn, RunSettings
from ..store.ledger import Ledger
from ..store.redact import Redactor
from ..subjects.base import Subject
from ..verifiers.base import Verifier
from .registry import Registries
from .tasks import check_verifiers, load_cohort, make_subjects, strict_problems


class StrictRefusal(Exception):
    """``strict``: the cohort has invalid tasks or ignored keys (``problems``, one line each)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ContractBroken(Exception):
    """A registered subject, executor or verifier lacks a member of its contract (one line)."""


class HostUnfit(Exception):
    """This machine lacks something the cohort's cells need, or the executor cannot run (one line)."""


@dataclass(frozen=True)
class EngineOptions:
    """How this process runs the cohort (from the command line, or the controller's for a worker)."""

    #: The output directory (None: ``reports_root / <cohort name>``).
    out_dir: Path | None
    #: When the cohort's run started (the cohort budget counts from here).
    started: float
    #: Run the selected cells again although the output directory has their results.
    rerun: bool = False
    #: Refuse a cohort with invalid tasks or ignored keys (``StrictRefusal``).
    strict: bool = False
    #: Cells this process runs at once: the executor's ``concurrency`` when its options have the
    #: key and the spec left it out (asked only then).
    concurrency: Callable[[], int] = field(default=lambda: 1)
    #: Where the default output directory goes.
    reports_root: Path = Path("reports")


def with_concurrency(options: Any, concurrency: Callable[[], int]) -> Any:
    """The executor's options with ``concurrency`` filled in when the kind has it and the spec left it out."""
    if "concurrency" not in type(options).model_fields or getattr(options, "concurrency", None) is not None:
        return options
    return options.model_copy(update={"concurrency": concurrency()})


class Engine:
    """Everything a process needs to run the cells of one cohort; no pytest in sight."""

    def __init__(
        self,
        cohort: Cohort,
        subjects: dict[str, Subject],
        verifiers: dict[str, Verifier],
        executor: Executor,
        registries: Registries,
        options: EngineOptions,
    ) -> None:
        self.cohort = cohort
        self.subjects = subjects
        self.verifiers = verifiers
        self.executor = executor
        self.registries = registries
        self.options = options
        self.out_dir = (options.out_dir or options.reports_root / cohort.name).resolve()
        self._runner: CellRunner | None = None
        self._task_problems: dict[str, str | None] = {}  # TaskChecks' answer per task id

    @classmethod
    def build(cls, spec_path: Path, registries: Registries, options: EngineOptions) -> Engine:
        """Load and validate the spec (``MakaUserError``, ``StrictRefusal``), make its parts."""
        cohort = load_cohort(registries, spec_path)
        subjects = make_subjects(cohort.loaded, registries)
        check_verifiers(cohort, registries.verifier_kinds)
        if options.strict:
            problems = strict_problems(cohort.tasks)
            if problems:
                raise StrictRefusal(problems)
        entry = cohort.loaded.executor
        executor = registries.executor_kinds[entry.kind](with_concurrency(entry.options, options.concurrency))
        verifiers = {name: klass() for name, klass in registries.verifier_kinds.items()}
        if problem := contract_problem(subjects, executor, verifiers):
            executor.close()
            raise ContractBroken(problem)
        return cls(cohort, subjects, verifiers, executor, registries, options)

    @property
    def started(self) -> float:
        return self.options.started

    def check_host(self) -> None:
        """Every host component the cells that will run need is here, and the executor works."""
        spec_path = self.cohort.loaded.path
        lacking = hostcheck.check(self.cohort, self.executor, self.subjects, lambda cell: not self.skip_reason(cell))
        if lacking:
            raise HostUnfit(f"{spec_path}: {lacking}")
        try:
            self.executor.check()
        except ExecutorUnavailable as e:
            raise HostUnfit(f"{spec_path}: executor: {e}") from None

    def skip_reason(self, cell: Cell) -> str | None:
        """Why ``cell`` cannot run here (its task, the executor's features, its subject), or None."""
        task = cell.task
        if task.unsupported:
            return f"{task.id}: {task.unsupported}"
        missing = self.executor.capabilities.missing(task.features)
        if missing:
            kind = self.cohort.loaded.executor.kind
            return f"{task.id}: {FEATURES[missing[0]]} not supported on the {kind} executor yet"
        if problem := self.task_problem(task):
            return f"{task.id}: {problem}"
        subject = self.subjects[cell.subject.name]  # a multi-step task: every step's view must be supported
        return next((r for r in map(subject.unsupported, step_views(task)) if r), None)

    def task_problem(self, task: Task) -> str | None:
        """The executor's ``TaskChecks`` answer for ``task``, asked once per task."""
        if not isinstance(self.executor, TaskChecks):
            return None
        if task.id not in self._task_problems:
            self._task_problems[task.id] = self.executor.task_problem(task)
        return self._task_problems[task.id]

    @cached_property
    def redactor(self) -> Redactor:
        """Scrubs every subject's secret values (all subjects': one leak is one too many) and the
        values tasks took from the host's environment."""
        secrets = [value for subject in self.subjects.values() for value in subject.secrets()]
        return Redactor([*secrets, *(value for task in self.cohort.tasks for value in task.host_values)])

    @cached_property
    def ledger(self) -> Ledger:
        return Ledger(self.out_dir, self.redactor)

    @cached_property
    def scratch_root(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="maka-"))

    @property
    def runner(self) -> CellRunner:
        """This process's cell runner (made, and the executor prepared, on first use)."""
        if self._runner is None:
            self._runner = self._make_runner()
        return self._runner

    def use_runner(self, runner: CellRunner) -> None:
        """Run the attempts with ``runner`` from now on (a Dask controller's ``ClusterRunner``)."""
        self._runner = runner

    def _make_runner(self) -> CellRunner:
        spec = self.cohort.loaded.spec
        settings = RunSettings(
            cohort=self.cohort.name,
            out_dir=self.out_dir,
            budgets=spec.budgets,
            policy=spec.policy,
            retries=spec.retries,
            cohort_started=self.started,
            rerun=self.options.rerun,
            cells=len(self.cohort.cells),
        )
        self.executor.prepare(list(self.cohort.tasks))
        runner = CellRunner(
            settings,
            self.executor,
            self.subjects,
            self.verifiers,
            self.ledger,
            classify_fn=self.registries.classify,
            annotate_fn=self.registries.annotate,
            observer=self.registries.observer,
        )
        for cell in self.cohort.cells:
            runner.cells_per_subject[cell.subject.name] = runner.cells_per_subject.get(cell.subject.name, 0) + 1
        return runner

    def workspace(self, cell: Cell) -> Path:
        """The cell's host scratch directory (created)."""
        path = self.scratch_root / cell.key
        path.mkdir(parents=True, exist_ok=True)
        return path

    def lease(self) -> LeaseFn:
        """The default lease: the registries' ``acquire_lease`` on this engine's executor."""
        acquire, executor = self.registries.acquire_lease, self.executor

        def lease(request: LeaseRequest) -> Any:
            return acquire(executor, request)

        return lease

    def run_cell(self, cell: Cell, lease: LeaseFn | None = None, workspace: Path | None = None) -> AttemptRecord:
        """Run one cell (its attempts, retries and resume rules) and return its cell record."""
        return self.runner.run_cell(cell, lease or self.lease(), workspace or self.workspace(cell))

    def cell(self, key: str) -> Cell | None:
        """The cell whose key is ``key``, if this cohort has it."""
        return next((c for c in self.cohort.cells if c.key == key), None)

    def close(self) -> None:
        if "scratch_root" in self.__dict__:
            shutil.rmtree(self.scratch_root, ignore_errors=True)
        self.executor.close()
