"""Which format a task source is in, from its files alone.

harbor          a dir with task.toml, or a dir of such dirs (Harbor, Terminal-Bench 2)
terminal-bench  a dir with task.yaml, or a dir of such dirs (legacy Terminal-Bench)
swe-bench       a .json, .jsonl or .parquet file of instances
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..core.errors import TaskError
from ..core.spec import TaskSource
from ..core.task import Task, task_id_for

HARBOR, TERMINAL_BENCH, SWE_BENCH = "harbor", "terminal-bench", "swe-bench"
INSTANCE_SUFFIXES = (".json", ".jsonl", ".parquet")
_MARKERS = {"task.toml": HARBOR, "task.yaml": TERMINAL_BENCH}


def _dir_format(path: Path) -> str | None:
    for marker, fmt in _MARKERS.items():
        if (path / marker).is_file():
            return fmt
    return None


def task_dirs(path: Path) -> list[Path]:
    """The candidate task dirs of a directory source: itself, or its visible subdirectories."""
    if _dir_format(path):
        return [path]
    return [c for c in sorted(path.iterdir()) if c.is_dir() and not c.name.startswith((".", "_"))]


def detect_format(path: Path) -> str | None:
    """The format of ``path``, None when it is none we know; TaskError for a mixed directory."""
    if path.is_file():
        return SWE_BENCH if path.suffix.lower() in INSTANCE_SUFFIXES else None
    if not path.is_dir():
        return None
    own = _dir_format(path)
    if own:
        return own
    found = {fmt: child for child in task_dirs(path) if (fmt := _dir_format(child))}
    if len(found) > 1:
        names = ", ".join(f"{child.name} ({fmt})" for fmt, child in sorted(found.items()))
        raise TaskError(path, None, f"mixes task formats ({names}); put each format in its own directory")
    return next(iter(found), None)


def invalid_task(path: Path, error: str, fmt: str) -> Task:
    """A placeholder for a task dir that does not load: it carries the error, nothing runs.

    Its cells are skipped with that one line (``--maka-strict`` makes it a usage error), so one
    broken task in a directory of published tasks does not stop the others.
    """
    path = path.resolve()
    return Task(
        id=task_id_for(path.name),
        path=path,
        instruction="",
        digest=hashlib.sha256(f"invalid/1\0{error}".encode()).hexdigest(),
        format=fmt,
        invalid=error,
        unsupported=f"invalid task: {error}",
    )


def wrong_dir(child: Path, expected: str) -> Task:
    """A subdirectory that is not a task of the source's format: a TaskError when it is a task
    of another format; else a placeholder whose cells are skipped with the reason (like a task
    that does not load: a stray ``docs/`` or a folder of more tasks does not stop the others)."""
    marker = {v: k for k, v in _MARKERS.items()}[expected]
    other = _dir_format(child)
    if other:
        hint = f" (it is a {other} task: give it its own tasks entry)"
        raise TaskError(child, None, f"not a task directory: expected {marker} ({expected} layout){hint}")
    nested = sum(1 for c in task_dirs(child) if _dir_format(c)) if child.is_dir() else 0
    dirs = "task directory" if nested == 1 else "task directories"
    hint = f" (it holds {nested} {dirs}: give it its own tasks entry)" if nested else ""
    why = f"not a task directory: expected {marker} ({expected} layout){hint}; leave it out with exclude"
    return invalid_task(child, str(TaskError(child, None, why)), expected)


def claims_directory_source(
    fmt: str, source: TaskSource, path: Path, spec_path: Path, *, takes_options: bool = False
) -> bool:
    """True when ``source`` is a directory source of format ``fmt``.

    Raises TaskError for options such a source does not take (any, unless ``takes_options``:
    then the adapter validates them), or for a file in its place.
    """
    if (source.format or detect_format(path)) != fmt:
        return False
    if source.adapter_options and not takes_options:
        key = next(iter(source.adapter_options))
        raise TaskError(
            spec_path,
            f"tasks[].{key}",
            f"unknown key for the {fmt} format; expected: path, format, include, exclude, limit",
        )
    if path.is_file():
        raise TaskError(path, None, f"a {fmt} source is a task directory or a directory of them")
    return True
