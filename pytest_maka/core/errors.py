"""User-facing errors: one message naming the file, the key path and what was expected."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """Printable on any terminal as one line: control characters and undecodable bytes escaped."""
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def unknown_choice(what: str, value: str, choices: Iterable[str]) -> str:
    """``unknown WHAT 'x'; did you mean 'y'? expected one of: ...`` (the question only when a choice is close)."""
    known = sorted(set(choices))
    near = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown {what} {value!r}; {hint}expected one of: {', '.join(known)}"


class MakaUserError(Exception):
    """A mistake in the user's input. Printed as one line, never with a traceback."""

    def __init__(self, file: str | Path | None, key: str | None, message: str) -> None:
        self.file = str(file) if file is not None else None
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.key) if p]
        prefix = ": ".join(parts)
        return one_line(f"{prefix}: {self.message}" if prefix else self.message)


class SpecError(MakaUserError):
    """The cohort spec is malformed or names something that does not exist."""


class TaskError(MakaUserError):
    """A task directory (or instance file) is not a valid task."""


class ExecutorUnavailable(Exception):
    """The executor cannot run at all on this machine (one-line reason)."""


class InfraError(Exception):
    """The platform failed during an attempt: classified as infra_failure.

    ``retryable=False``: another attempt would fail the same way (e.g. a deterministic image
    build failure), so the cell is not retried.
    """

    def __init__(self, message: str = "", *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class DeadlineReached(Exception):
    """An experimenter's deadline (the whole-cell deadline) passed while the harness was still
    preparing the attempt, e.g. building its image: classified as budget_exhausted."""


class SubjectFault(Exception):
    """What the subject left makes a fair verification impossible: classified as agent_failure.

    Raised by harness steps after the subject stopped (restore, copy-out) when the cause is
    the subject's own doing, e.g. changed protected paths that cannot be restored. ``paths``
    names what it changed, for the record.
    """

    def __init__(self, message: str, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.paths = list(paths or [])
