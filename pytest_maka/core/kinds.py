"""Kind tables: what the ``pytest_maka_subject_kinds`` / ``pytest_maka_executor_kinds`` hooks return.

A table maps a spec's ``kind:`` name to an entry with ``Options`` (the pydantic model that
validates the spec entry) that is called with the validated entry to make the subject or
executor. A class with ``kind`` and ``Options`` is such an entry itself; a ``Kind`` is one
whose factory imports its class only when a cohort uses the kind (a heavy dependency such as
the Docker SDK stays unimported otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Kind:
    """One row of a kind table: ``kind``, its ``Options`` model and the ``factory`` that makes it."""

    kind: str
    Options: type[BaseModel]
    #: Called with the validated spec entry (a SubjectSpec, or the executor's options).
    factory: Callable[[Any], Any]

    def __call__(self, entry: Any) -> Any:
        return self.factory(entry)


def kind_table(*entries: Any) -> dict[str, Any]:
    """A kind table from classes (with ``kind`` and ``Options``) and ``Kind`` rows, by name."""
    return {entry.kind: entry for entry in entries}
