"""The taint rule around one verification (DESIGN.md §3, ``core/taint.py``).

``arm`` runs after the tests are in and before the verifier: it lists what the subject
changed outside the workdir and, when there is anything, starts the sandbox's access watch on
those files (nothing starts for a subject that changed nothing there). ``settle`` runs after
the verification: it reads which of them the verifier read or executed and writes the
attempt's taint record, refused under ``policy.refuse_tainted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import InfraError
from ..core.taint import Touched, judge
from ..executors.base import ChangeWatch, Sandbox
from .restore import printable
from .work import AttemptWork


@dataclass
class Armed:
    """What ``arm`` found and started for one verification."""

    mechanism: str
    changed: list[str] = field(default_factory=list)
    watched: bool = False
    #: The watch could not run (or the changes could not be listed): why.
    problem: str | None = None


def arm(sandbox: Sandbox) -> Armed | None:
    """List the subject's changes outside the workdir and watch the files among them (None:
    the sandbox offers no watch)."""
    if not isinstance(sandbox, ChangeWatch):
        return None
    mechanism = sandbox.watch_mechanism
    try:
        changes = sandbox.outside_changes()
    except ValueError as exc:
        return Armed(mechanism, problem=f"the engine cannot list the container's changes: {exc}")
    changed = [printable(p) for p, _kind in changes]
    files = [p for p, kind in changes if kind != 2]
    if not files:
        return Armed(mechanism, changed=changed)
    try:
        sandbox.watch_access(files)
    except (RuntimeError, InfraError) as exc:
        return Armed(mechanism, changed=changed, problem=f"the access watch cannot run: {exc}")
    return Armed(mechanism, changed=changed, watched=True)


def settle(work: AttemptWork, sandbox: Sandbox, armed: Armed | None) -> None:
    """After the verification: the attempt's taint record (``work.taint``)."""
    if armed is None:
        return
    notes = [armed.problem] if armed.problem else []
    accessed: list[Touched] | None = []
    if armed.problem:
        accessed = None
    elif armed.watched and isinstance(sandbox, ChangeWatch):
        try:
            accessed = sandbox.accessed()
        except (RuntimeError, InfraError) as exc:
            notes.append(f"the access watch failed: {exc}")
            accessed = None
    outcome = work.verifier_outcome
    passed = outcome.passed if outcome is not None else None
    work.taint = judge(
        mechanism=armed.mechanism,
        changed=armed.changed,
        accessed=accessed,
        passed=passed,
        refuse=work.settings.policy.refuse_tainted,
        notes=notes,
    )
    if outcome is not None and outcome.ran and passed is None and work.taint.paths:
        # no verdict, after the verifier ran code the subject changed: the subject's result
        shown = ", ".join(work.taint.paths[:5])
        work.subject_fault = f"the verifier gave no verdict after running files the subject changed: {shown}"
