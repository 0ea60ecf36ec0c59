"""The optional capabilities of a sandbox or an executor, each a Protocol checked with ``isinstance``.

``executors/base.py`` re-exports every one and indexes them with the kernel's behaviour
without them (``SANDBOX_CAPABILITIES``); an executor implements those it can.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..core.taint import Touched
from ..core.task import Task, VerifierEnvironment

if TYPE_CHECKING:  # only for annotations: these modules import executors/base.py
    from ..egress.log import EgressLog
    from ..egress.plan import PhasePlan
    from .base import LeaseRequest, Sandbox
    from .separate import ArtifactReport


@runtime_checkable
class ReportsFullDisk(Protocol):
    """Optional sandbox capability: whether the lease's own disk (nothing else writes there) is full.

    Read when the verifier gave no verdict: a verifier that could not write its reward because
    the subject filled the disk is the subject's failure, not the verifier's.
    """

    def full_disk(self) -> str | None: ...


@runtime_checkable
class ProtectedRestore(Protocol):
    """Optional sandbox capability: put back protected paths before the verifier runs.

    Called once per verification, after every process of the subject is gone and before
    ``/logs/verifier`` and ``/tests`` are replaced. Returns what it found for the record:
    ``{"mechanism": str, "changed": [paths], "changed_count": int, "restored": [paths]}``
    (``changed`` lists changes outside the workdir and ``/logs``, capped; paths as text).
    Raises ``SubjectFault`` (with the paths) when a change cannot be undone: the attempt is
    then not verified and counts as the subject's failure. Must not run any program the
    subject could have replaced.
    """

    def restore_protected(self, scratch: Path) -> dict[str, Any]: ...


@runtime_checkable
class VerdictChannel(Protocol):
    """Optional sandbox capability: lay out the verdict channel (``/tests`` and ``/logs/verifier``)
    of a verification, private to it where the sandbox can make it so.

    ``open_verdict(tests, scratch)`` is called after the subject stopped, in place of the
    kernel's putting ``/tests`` and emptying ``/logs/verifier``: from then on the sandbox's
    commands see a fresh copy of ``tests`` at ``/tests`` (nothing there when None) and an empty
    ``/logs/verifier``; ``put``, ``get`` and ``remove`` of those paths reach them. A private
    channel is seen by no other process of the environment (one the subject left). Calling it
    again starts a fresh channel (the next step's). ``close_verdict()``, after the kernel copied
    ``/logs/verifier`` out, ends it. ``verdict_channel()`` says, for the record, whether it was
    private (``private: ...``) or not (``shared: ...``, and what the sandbox saw).
    docs/security.md, "The verdict channel".
    """

    def open_verdict(self, tests: Path | None, scratch: Path) -> None: ...

    def close_verdict(self) -> None: ...

    def verdict_channel(self) -> str: ...


@runtime_checkable
class ChangeWatch(Protocol):
    """Optional sandbox capability: what the subject changed outside the workdir, and which of
    those files a verification then read or executed (``core.taint``).

    Nothing of it may run a program of the sandbox's: the subject could have replaced it.
    """

    #: How changes and accesses are found, for the record.
    watch_mechanism: str

    def outside_changes(self) -> list[tuple[str, int]]:
        """(path, kind: 0 modified, 1 added, 2 deleted) outside the workdir, /logs and /tests.
        ValueError: they cannot be listed (what the subject left is too deep for the engine)."""
        ...

    def ensure_running(self) -> None:
        """The environment runs (started again if it stopped, unless that would run what the
        subject changed: SubjectFault)."""
        ...

    def watch_access(self, paths: Sequence[str]) -> list[Touched]:
        """From now on, note reads and executions of ``paths``; returns those watched.
        RuntimeError: the watch cannot run here."""
        ...

    def accessed(self) -> list[Touched]:
        """The watched paths read or executed since ``watch_access`` (the watch ends)."""
        ...

    def leftover_processes(self) -> tuple[int, int | None]:
        """(processes the subject left running, the environment's process limit or None)."""
        ...

    def verdict_rewritten(self) -> bool:
        """After a verification: a process still running (one the subject left) keeps
        rewriting the reward files."""
        ...


@runtime_checkable
class ExecAhead(Protocol):
    """Optional sandbox capability: set a later ``exec`` up ahead, while the process is idle.

    ``exec_ahead`` names a command that will run later with these settings (the verifier's,
    said while the subject runs) and the paths put before it; ``verdict``: it will run inside
    the verdict channel (``VerdictChannel.open_verdict``). The sandbox may prepare what it
    can of that command's environment, but starts nothing of the command; an ``exec`` of the
    same command, env, cwd and network later gets exactly the isolation and limits of a fresh
    one (what was prepared is used only if nothing it depends on changed, else discarded).
    """

    def exec_ahead(
        self,
        command: str,
        *,
        env: Mapping[str, str],
        cwd: str | None = None,
        network: bool = False,
        puts: Sequence[str] = (),
        verdict: bool = False,
    ) -> None: ...


@runtime_checkable
class ImageEnvironment(Protocol):
    """Optional sandbox capability: the environment's own variables (Docker: the image's ENV).

    The kernel lays its variables over these, so tools the image put on its PATH are found.
    """

    def image_env(self) -> dict[str, str]: ...


@runtime_checkable
class PhaseUsers(Protocol):
    """Optional sandbox capability: run a phase as a user the environment defines.

    ``as_user`` and ``give`` raise InfraError naming the user when the environment lacks it.
    """

    def as_user(self, user: str | int | None, phase: str) -> AbstractContextManager[None]: ...

    def give(self, paths: list[str], user: str | int | None, phase: str) -> None: ...


@runtime_checkable
class EgressSandbox(Protocol):
    """Optional sandbox capability: enforce an allowlist phase (start its proxy, route
    ``network=True`` through it). Without it an allowlist phase is an infra failure."""

    def egress_phase(self, name: str, plan: PhasePlan, log: EgressLog) -> AbstractContextManager[Any]:
        """A context manager: the proxy runs for the block; what it saw goes to ``log``."""
        ...


@runtime_checkable
class ReadOnlySystemView(Protocol):
    """Optional sandbox capability: say whether the host's system shows read-only in the sandbox.

    True: a failed attempt whose outputs show writes refused there gets the record's
    ``read_only_system`` note (the task may need a writable system). Without it: no note.
    """

    @property
    def read_only_system(self) -> bool: ...


@runtime_checkable
class VerifierEnvironments(Protocol):
    """Optional executor capability (``capabilities.separate_verifier``): a fresh environment for
    the verifier, ``environment_mode = "separate"`` (docs/security.md).

    The lifecycle (``run/separate.py``) stops the subject's environment, carries the task's
    declared artifacts out of it with ``carry_out`` and leases the verifier's environment with
    ``verifier_lease``; nothing else of the subject's environment reaches the verifier.
    """

    def stop_environment(self, sandbox: Sandbox) -> None:
        """Stop every process of ``sandbox`` for good; its files stay readable by ``carry_out``."""
        ...

    def carry_out(self, sandbox: Sandbox, source: str, dest: Path, report: ArtifactReport) -> str | None:
        """Copy ``source`` (absolute in the stopped sandbox) to host ``dest``, following no link:
        neither one on the way to ``source`` nor one inside it. Returns why nothing was copied
        (``"absent"``, ``"a symbolic link"``, ...), or None when it was."""
        ...

    def verifier_lease(
        self, sandbox: Sandbox, request: LeaseRequest, environment: VerifierEnvironment
    ) -> AbstractContextManager[Sandbox]:
        """A fresh sandbox built from ``environment`` (images cached per digest), removed on exit."""
        ...

    def describe_verifier(self, sandbox: Sandbox) -> dict[str, Any]:
        """For the record: which environment verified (image digest, container)."""
        ...


@runtime_checkable
class SharedCapacity(Protocol):
    """Optional executor capability: each lease holds one slot of a capacity every run on this
    host shares (file locks under a host directory), waiters of all processes served in order
    of arrival.

    While a lease waits for a slot its attempt's phase is ``SLOT_WAIT_PHASE``; the lease puts
    the seconds it waited in ``LeaseRequest.slot_wait``, which the kernel records as
    ``timings.slot_wait`` (not as ``setup``). Without it, capacity is the executor's affair
    and any wait counts as setup.
    """

    def shared_capacity(self) -> Mapping[str, int]:
        """Slots per target (e.g. Docker engine URL), the same for every run on this host."""
        ...


@runtime_checkable
class TaskChecks(Protocol):
    """Optional executor capability: a task this executor cannot run as given, found before any
    cell runs (Docker: a compose file Docker Compose rejects).

    Asked once per task at collection; a reason skips every cell of the task with it (one line).
    Without it the same problem shows in each attempt (``infra_failure``, not retried).
    """

    def task_problem(self, task: Task) -> str | None:
        """One line naming the file and what is wrong, or None."""
        ...
