"""Checks that what a plugin registered keeps the whole contract of its seam.

Subjects, executors and verifiers are called directly for every member of their Protocol
(``subjects/base.py``, ``executors/base.py``, ``verifiers/base.py``), the optional ones
included; their base classes (``SubjectBase``, ``ExecutorBase``, ``VerifierBase``) hold the
defaults. A registered kind that lacks a member is one usage error at load time naming the
members, never an AttributeError in the middle of a run.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Protocol

from .executors.base import Executor
from .subjects.base import Subject
from .verifiers.base import Verifier


def protocol_members(protocol: type) -> list[str]:
    """The public members (methods, properties, attributes) a Protocol class declares."""
    members: set[str] = set()
    for base in protocol.__mro__:
        if base is object or base is Protocol or base.__module__ == "typing":
            continue
        members |= {n for n in (*vars(base), *inspect.get_annotations(base)) if not n.startswith("_")}
    return sorted(members)


def contract_gaps(obj: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks."""
    return [name for name in protocol_members(protocol) if not hasattr(obj, name)]


def contract_problem(
    subjects: Mapping[str, Subject], executor: Executor, verifiers: Mapping[str, Verifier]
) -> str | None:
    """One line naming the first registered object that lacks a member of its contract, or None."""
    seams: list[tuple[str, str, object, type, str]] = [
        *(("subject", name, s, Subject, "subjects") for name, s in subjects.items()),
        ("executor", executor.kind, executor, Executor, "executors"),
        *(("verifier", name, v, Verifier, "verifiers") for name, v in verifiers.items()),
    ]
    for what, name, obj, protocol, package in seams:
        gaps = contract_gaps(obj, protocol)
        if gaps:
            return (
                f"{what} {name!r} ({type(obj).__name__}) lacks {', '.join(gaps)} of the {protocol.__name__}"
                f" contract (pytest_maka/{package}/base.py; subclass {protocol.__name__}Base for the defaults)"
            )
    return None
