"""The taint rule around one verification (DESIGN.md §3, ``core/taint.py``).

``arm`` runs after the tests are in and before the verifier: it lists what the subject
changed outside the workdir and, when there is anything, starts the sandbox's access watch on
those files (nothing starts for a subject that changed nothing there). ``settle`` runs after
the verification: it reads which of them the verifier read or executed and writes the
attempt's taint record, refused under ``policy.refuse_tainted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InfraError
from ..core.taint import ReadOnlySystem, Touched, judge, read_only_evidence
from ..executors.base import ChangeWatch, ReadOnlySystemView, Sandbox
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
    #: The changes could be listed.
    listed: bool = True
    #: Processes the subject left running when the verifier started, and the process limit.
    leftovers: tuple[int, int | None] = (0, None)


def arm(sandbox: Sandbox) -> Armed | None:
    """List the subject's changes outside the workdir and watch the files among them (None:
    the sandbox offers no watch)."""
    if not isinstance(sandbox, ChangeWatch):
        return None
    mechanism = sandbox.watch_mechanism
    leftovers = sandbox.leftover_processes()
    try:
        changes = sandbox.outside_changes()
    except ValueError as exc:
        return Armed(
            mechanism,
            problem=f"the engine cannot list the container's changes: {exc}",
            listed=False,
            leftovers=leftovers,
        )
    changed = [printable(p) for p, _kind in changes]
    files = [p for p, kind in changes if kind != 2]
    if not files:
        return Armed(mechanism, changed=changed, leftovers=leftovers)
    try:
        sandbox.watch_access(files)
    except (RuntimeError, InfraError) as exc:
        return Armed(mechanism, changed=changed, problem=f"the access watch cannot run: {exc}", leftovers=leftovers)
    return Armed(mechanism, changed=changed, watched=True, leftovers=leftovers)


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
    if passed is not False and isinstance(sandbox, ChangeWatch) and sandbox.verdict_rewritten():
        # the environment stays live: a process the subject left writes the verdict channel
        work.subject_fault = "a process the subject left kept rewriting the reward files after the verifier ended"
    left, limit = armed.leftovers
    if outcome is not None and outcome.ran and passed is None and limit is not None and left >= limit * 0.9:
        # no verdict, and what the subject left running filled the process limit the verifier had
        work.subject_fault = (
            f"the {left} processes the subject left running filled the environment's process limit ({limit}):"
            " the verifier could not run"
        )
    work.taint = judge(
        mechanism=armed.mechanism,
        changed=armed.changed,
        accessed=accessed,
        passed=passed,
        refuse=work.settings.policy.refuse_tainted,
        notes=notes,
        listed=armed.listed,
    )
    if outcome is not None and outcome.ran and passed is None and work.taint.paths:
        # no verdict, after the verifier ran code the subject changed: the subject's result
        shown = ", ".join(work.taint.paths[:5])
        work.subject_fault = f"the verifier gave no verdict after running files the subject changed: {shown}"


#: Outputs of an attempt looked at for writes a read-only system refused (bytes read from each's end).
OUTPUTS = ("agent.stdout.txt", "agent.stderr.txt", "verifier.stdout.txt", "verifier.stderr.txt")
TAIL_BYTES = 1 << 20


def note_read_only_system(work: AttemptWork, sandbox: Sandbox) -> None:
    """On an executor that shows the host's system read-only (``read_only_system``), a failed
    attempt whose outputs show writes refused there gets the record's ``read_only_system``
    note: the task may need a writable system (docs/docker-executor.md, which tasks suit which
    executor). The class stays what the verifier said."""
    if not (isinstance(sandbox, ReadOnlySystemView) and sandbox.read_only_system):
        return
    if work.verifier_outcome is not None and work.verifier_outcome.passed:
        return
    d = work.attempt_dir
    for name in (*OUTPUTS, *sorted(p.name for p in _text_files(d / "agent"))[:20]):
        path = d / name if name in OUTPUTS else d / "agent" / name
        found = read_only_evidence(_tail(path))
        if found:
            work.read_only_system = ReadOnlySystem(evidence=found, seen_in=path.relative_to(d).as_posix())
            return


def _text_files(directory: Path) -> list[Path]:
    try:
        return [p for p in directory.iterdir() if p.is_file() and not p.is_symlink()]
    except OSError:
        return []


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
