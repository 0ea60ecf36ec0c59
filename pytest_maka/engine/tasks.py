"""Spec -> cohort through the registries; what a run says about its tasks' ignored keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..benchmarks import lenient
from ..core.cohort import Cohort, build_cohort
from ..core.errors import MakaUserError, SpecError, unknown_choice
from ..core.spec import LoadedSpec, load_spec
from ..core.task import Task
from ..subjects.base import Subject
from .registry import Registries

#: The files a task's keys are read from, by format.
TASK_FILES = ("task.toml", "task.yaml")
_STEP_INDEX = re.compile(r"\[\d+\]")


def load_cohort(registries: Registries, spec_path: Path) -> Cohort:
    """Validate the spec and load its tasks through the registries' task loaders."""
    loaded = load_spec(
        spec_path,
        {k: cls.Options for k, cls in registries.subject_kinds.items()},  # type: ignore[attr-defined]
        {k: cls.Options for k, cls in registries.executor_kinds.items()},  # type: ignore[attr-defined]
    )
    formats = list(registries.task_formats)
    per_source = []
    for i, source in enumerate(loaded.spec.tasks):
        if source.format is not None and source.format not in formats:
            raise SpecError(loaded.path, f"tasks[{i}].format", unknown_choice("format", source.format, formats))
        path = loaded.source_path(source)
        try:
            tasks = registries.load_tasks(source, path, loaded.path)
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
    return build_cohort(loaded, per_source)


def check_verifiers(cohort: Cohort, verifiers: Iterable[str]) -> None:
    """Every task's verifier is provided by some plugin."""
    names = list(verifiers)
    for task in cohort.tasks:
        if task.grading not in names:
            raise SpecError(
                task.path,
                None,
                f"the task needs verifier {task.grading!r}, which no plugin provides ({', '.join(names)})",
            )


def make_subjects(loaded: LoadedSpec, kinds: Registries) -> dict[str, Subject]:
    """Instantiate each subject; its errors get the key path of its entry in the spec."""
    subjects: dict[str, Subject] = {}
    for i, spec in enumerate(loaded.subjects):
        try:
            subjects[spec.name] = kinds.subject_kinds[spec.kind](spec)
        except SpecError as e:
            in_spec = spec.declared_in == loaded.path
            key = f"subjects[{i}].{e.key}" if in_spec and e.key else e.key
            raise SpecError(spec.declared_in, key, e.message) from None
    return subjects


# -- what a run says once about its tasks (seen with -q too) ------------------------------
def _task_file(task: Task) -> Path:
    """The file a task's keys come from (its directory when it has none of the known names)."""
    return next((task.path / n for n in TASK_FILES if (task.path / n).is_file()), task.path)


def ignored_keys(task: Task) -> list[str]:
    """``task.format: not used by pytest-maka`` for each key of the task's file no model knows."""
    hints = task.metadata.get("ignored_key_hints") or {}
    return [lenient.message(key, hints) for key in task.metadata.get("ignored_keys") or []]


def ignored_key_lines(tasks: Iterable[Task]) -> list[str]:
    """One line per ignored key across the cohort (its step index dropped), naming the tasks."""
    by_key: dict[str, list[str]] = {}
    for task in tasks:
        hints = task.metadata.get("ignored_key_hints") or {}
        for key in task.metadata.get("ignored_keys") or []:
            shown = lenient.message(_STEP_INDEX.sub("[]", key), {_STEP_INDEX.sub("[]", key): hints.get(key, "")})
            by_key.setdefault(shown.rstrip(), []).append(task.id)
    lines = []
    for shown, ids in by_key.items():
        names = ", ".join(dict.fromkeys(ids))
        lines.append(f"maka: {shown}, ignored as Harbor ignores it ({len(set(ids))} task(s): {names})")
    return lines


def strict_problems(tasks: Iterable[Task]) -> list[str]:
    """What ``--maka-strict`` refuses: every invalid task's problems, every ignored key."""
    out = []
    for task in tasks:
        if task.invalid:
            out.append(task.invalid)
        out.extend(f"{_task_file(task)}: {line}" for line in ignored_keys(task))
    return out
