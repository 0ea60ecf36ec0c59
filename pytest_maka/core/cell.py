"""Cell identity: ``TASK[SUBJECT-rN]`` for people, a digest-carrying key for files."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from .spec import SubjectSpec
from .task import Task

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")


@dataclass(frozen=True)
class Cell:
    """One (task, subject, repetition)."""

    task: Task
    subject: SubjectSpec
    repetition: int

    @property
    def params(self) -> str:
        """The part inside the brackets: ``SUBJECT-rN``."""
        return f"{self.subject.name}-r{self.repetition}"

    @property
    def id(self) -> str:
        return f"{self.task.id}[{self.params}]"

    @cached_property
    def digest(self) -> str:
        """Changes whenever the task's files or the subject's definition change."""
        return hashlib.sha256(f"{self.task.digest}:{self.subject.digest}".encode()).hexdigest()

    @cached_property
    def key(self) -> str:
        """Directory- and ledger-safe identity that also carries the definition digest."""
        base = f"{self.task.id}__{self.subject.name}__r{self.repetition}"
        return f"{_UNSAFE.sub('_', base)}-{self.digest[:12]}"
