"""Per-process state of a maka run: the cohort, subjects, executor, runner and output paths."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pytest
from pydantic import BaseModel

from . import hostcheck
from .contracts import contract_problem
from .core.cell import Cell
from .core.cohort import Cohort, build_cohort
from .core.errors import ExecutorUnavailable, MakaUserError, SpecError, unknown_choice
from .core.spec import LoadedSpec, load_spec
from .core.steps import step_views
from .core.task import FEATURES
from .executors.base import Executor
from .live.observer import HookObserver
from .run.lifecycle import CellRunner, RunSettings
from .store.ledger import Ledger
from .store.redact import Redactor
from .subjects.base import Subject
from .verifiers.base import Verifier

COHORT_STARTED_KEY = "maka_cohort_started"


def _kinds(hook_results: list[dict[str, type]]) -> dict[str, type]:
    merged: dict[str, type] = {}
    for result in hook_results:
        merged.update(result or {})
    return merged


def _check_verifiers(cohort: Cohort, verifiers: dict[str, type]) -> None:
    for task in cohort.tasks:
        if task.grading not in verifiers:
            raise SpecError(
                task.path,
                None,
                f"the task needs verifier {task.grading!r}, which no plugin provides ({', '.join(verifiers)})",
            )


def load_cohort(config: pytest.Config, spec_path: Path) -> tuple[Cohort, dict[str, type], dict[str, type]]:
    """Validate the spec and load its tasks through the adapter hooks."""
    hook = config.hook
    subject_kinds = _kinds(hook.pytest_maka_subject_kinds())
    executor_kinds = _kinds(hook.pytest_maka_executor_kinds())
    loaded = load_spec(
        spec_path,
        {k: cls.Options for k, cls in subject_kinds.items()},
        {k: cls.Options for k, cls in executor_kinds.items()},
    )
    formats = sorted({f for fs in hook.pytest_maka_task_formats() for f in fs})
    per_source = []
    for i, source in enumerate(loaded.spec.tasks):
        if source.format is not None and source.format not in formats:
            raise SpecError(
                loaded.path,
                f"tasks[{i}].format",
                unknown_choice("format", source.format, formats),
            )
        path = loaded.source_path(source)
        try:
            tasks = hook.pytest_maka_load_tasks(source=source, path=path, spec_path=loaded.path)
        except MakaUserError as e:
            if e.key and e.key.startswith("tasks[]"):
                e.key = e.key.replace("tasks[]", f"tasks[{i}]", 1)
            raise
        if tasks is None:
            raise SpecError(
                loaded.path,
                f"tasks[{i}].path",
                f"{path} is not a task source any adapter recognises (formats: {', '.join(formats)})",
            )
        per_source.append(tasks)
    return build_cohort(loaded, per_source), subject_kinds, executor_kinds


def _with_concurrency(config: pytest.Config, options: BaseModel) -> BaseModel:
    """The executor's options, with ``concurrency`` (if the kind has that key and the spec left it
    out) set to this process's ``--maka-concurrency``, so it can get that many attempts ready."""
    if "concurrency" not in type(options).model_fields or getattr(options, "concurrency", None) is not None:
        return options
    from .scale.plugin import concurrency

    return options.model_copy(update={"concurrency": concurrency(config)})


def _make_subjects(loaded: LoadedSpec, kinds: dict[str, type]) -> dict[str, Subject]:
    """Instantiate each subject; its errors get the key path of its entry in the spec."""
    subjects: dict[str, Subject] = {}
    for i, spec in enumerate(loaded.subjects):
        try:
            subjects[spec.name] = kinds[spec.kind](spec)
        except SpecError as e:
            in_spec = spec.declared_in == loaded.path
            key = f"subjects[{i}].{e.key}" if in_spec and e.key else e.key
            raise SpecError(spec.declared_in, key, e.message) from None
    return subjects


@dataclass
class MakaSession:
    """Everything a process needs to collect and run the cells of one cohort."""

    config: pytest.Config
    cohort: Cohort
    subjects: dict[str, Subject]
    verifiers: dict[str, Verifier]
    executor: Executor
    out_dir: Path
    started: float = field(default_factory=time.time)

    @classmethod
    def create(cls, config: pytest.Config, spec_path: Path, out_option: str | None) -> MakaSession:
        try:
            cohort, subject_kinds, executor_kinds = load_cohort(config, spec_path)
            subjects = _make_subjects(cohort.loaded, subject_kinds)
            verifier_classes = _kinds(config.hook.pytest_maka_verifiers())
            _check_verifiers(cohort, verifier_classes)
            if config.getoption("maka_strict", False):
                from .collect import strict_problems

                problems = strict_problems(cohort.tasks)  # every one of them, each on its line
                if problems:
                    more = f"; {len(problems) - 1} more below" if len(problems) > 1 else ""
                    raise pytest.UsageError("\n".join([f"{problems[0]} (--maka-strict{more})", *problems[1:]]))
        except MakaUserError as e:
            raise pytest.UsageError(str(e)) from None
        loaded: LoadedSpec = cohort.loaded
        executor = executor_kinds[loaded.executor.kind](_with_concurrency(config, loaded.executor.options))
        out_dir = Path(out_option) if out_option else config.rootpath / "reports" / cohort.name
        workerinput = getattr(config, "workerinput", {})
        started = float(workerinput.get(COHORT_STARTED_KEY) or time.time())
        verifiers = {name: klass() for name, klass in verifier_classes.items()}
        if problem := contract_problem(subjects, executor, verifiers):
            raise pytest.UsageError(problem)
        maka = cls(
            config=config,
            cohort=cohort,
            subjects=subjects,
            verifiers=verifiers,
            executor=executor,
            out_dir=out_dir.resolve(),
            started=started,
        )
        if not hasattr(config, "workerinput"):
            maka.check_host()
        return maka

    def check_host(self) -> None:
        """Before any cell runs: every host component the cells need is here, and the executor works
        (a usage error of one line naming what to install, otherwise)."""
        spec_path = self.cohort.loaded.path
        lacking = hostcheck.check(self.cohort, self.executor, self.subjects, lambda cell: not self.skip_reason(cell))
        if lacking:
            raise pytest.UsageError(f"{spec_path}: {lacking}")
        try:
            self.executor.check()
        except ExecutorUnavailable as e:
            raise pytest.UsageError(f"{spec_path}: executor: {e}") from None

    @property
    def out_dir_display(self) -> str:
        try:
            return str(self.out_dir.relative_to(Path.cwd()))
        except ValueError:
            return str(self.out_dir)

    @cached_property
    def redactor(self) -> Redactor:
        """Scrubs every subject's secret values (all subjects': one leak is one too many)."""
        return Redactor(value for subject in self.subjects.values() for value in subject.secrets())

    @cached_property
    def ledger(self) -> Ledger:
        return Ledger(self.out_dir, self.redactor)

    @cached_property
    def runner(self) -> CellRunner:
        spec = self.cohort.loaded.spec
        settings = RunSettings(
            cohort=self.cohort.name,
            out_dir=self.out_dir,
            budgets=spec.budgets,
            policy=spec.policy,
            retries=spec.retries,
            cohort_started=self.started,
            rerun=bool(self.config.getoption("maka_rerun", False)),
            cells=len(self.cohort.cells),
        )
        hook = self.config.hook
        self.executor.prepare(list(self.cohort.tasks))
        runner = CellRunner(
            settings,
            self.executor,
            self.subjects,
            self.verifiers,
            self.ledger,
            classify_fn=lambda facts, cell: hook.pytest_maka_classify(facts=facts, cell=cell),
            annotate_fn=lambda record, cell: hook.pytest_maka_record(record=record, cell=cell),
            observer=HookObserver(hook),
        )
        for cell in self.cohort.cells:
            runner.cells_per_subject[cell.subject.name] = runner.cells_per_subject.get(cell.subject.name, 0) + 1
        return runner

    @cached_property
    def scratch_root(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="maka-"))

    def skip_reason(self, cell: Cell) -> str | None:
        task = cell.task
        if task.unsupported:
            return f"{task.id}: {task.unsupported}"
        missing = self.executor.capabilities.missing(task.features)
        if missing:
            kind = self.cohort.loaded.executor.kind
            return f"{task.id}: {FEATURES[missing[0]]} not supported on the {kind} executor yet"
        subject = self.subjects[cell.subject.name]  # a multi-step task: every step's view must be supported
        return next((r for r in map(subject.unsupported, step_views(task)) if r), None)

    def close(self) -> None:
        import shutil

        if "scratch_root" in self.__dict__:
            shutil.rmtree(self.scratch_root, ignore_errors=True)
        self.executor.close()
