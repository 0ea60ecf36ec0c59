"""The executor interface: a session-wide Executor hands out one fresh Sandbox per attempt.

Contract every executor keeps (checked by tests/conformance for each one):
- ``lease()`` yields a fresh environment built from the task; nothing a previous attempt
  did is visible in it. Leaving the context removes it, on success, error or Ctrl-C.
- ``exec()`` returns only when every process the command started is gone, also on timeout
  (the whole process tree is killed, then the call returns with ``timed_out=True``).
- Output beyond ``max_output_bytes`` per stream is dropped and flagged, never buffered.
- Only the variables in ``env`` reach the command; the host environment does not.
- ``network=False`` means the command cannot reach any network, loopback of the host included.
- ``put`` overwrites what is at the destination; ``get`` never follows a symlink, never
  leaves a live link in its copy and keeps the byte and entry caps (``executors.copyout``).

Everything else is optional and declared here with what the kernel does without it:

- On the executor: ``capabilities`` (``ExecutorCapabilities``, all off by default: a task that
  needs one is skipped with the reason ``core.task_parts.FEATURES`` gives) and ``host_needs``
  (default: nothing). ``ExecutorBase`` holds these defaults. ``capabilities.separate_verifier``
  means the executor also implements ``VerifierEnvironments``; ``SharedCapacity``: its leases
  take slots shared host-wide and report their wait (``LeaseRequest.slot_wait``); ``TaskChecks``:
  a task it cannot run as given is skipped at collection with the reason, once.
- On the sandbox: the Protocols of ``SANDBOX_CAPABILITIES`` below (declared in
  ``executors/capabilities.py``, re-exported here), each checked with ``isinstance`` and each
  with its default. ``EgressSandbox`` is the important one: inside its
  phase ``network=True`` reaches only the egress proxy; without it an allowlist phase is an
  infra failure, never an open network. ``ProtectedRestore`` undoes, after the subject stopped,
  what it changed where the verifier would run it, or refuses with ``SubjectFault``.
  ``ChangeWatch`` lists, for an environment the verifier sees live (fidelity first, DESIGN.md
  §3), what the subject changed outside the workdir and which of those files the verification
  read or executed (the taint rule). docs/security.md has each executor's way; docs/extending.md
  has the whole contract in one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from ..core.cell import Cell
from ..core.hostreqs import Need
from ..core.task import Task
from .capabilities import (
    ChangeWatch,
    EgressSandbox,
    ExecAhead,
    ImageEnvironment,
    PhaseUsers,
    ProtectedRestore,
    ReadOnlySystemView,
    ReportsFullDisk,
    SharedCapacity,
    TaskChecks,
    VerdictChannel,
    VerifierEnvironments,
)
from .copyout import CopyReport

__all__ = [
    "SANDBOX_CAPABILITIES",
    "ChangeWatch",
    "EgressSandbox",
    "ExecAhead",
    "ExecResult",
    "ExecSettings",
    "Executor",
    "ExecutorBase",
    "ExecutorCapabilities",
    "ImageEnvironment",
    "LeaseIterator",
    "LeaseRequest",
    "PhaseUsers",
    "Process",
    "ProtectedRestore",
    "ReadOnlySystemView",
    "ReportsFullDisk",
    "Sandbox",
    "SandboxCapability",
    "SharedCapacity",
    "TaskChecks",
    "VerdictChannel",
    "VerifierEnvironments",
]


@dataclass(frozen=True)
class ExecResult:
    """What one command did, as measured by the executor."""

    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    #: Resource limits the command ran into (e.g. ``memory``, ``pids``), where the executor can tell.
    limits_hit: tuple[str, ...] = ()
    #: The command ran in a sandbox set up ahead (``ExecAhead``), released when it was due.
    set_up_ahead: bool = False


@dataclass(frozen=True)
class ExecSettings:
    """What a phase decides about every command it runs: env, limits, where output goes."""

    env: Mapping[str, str]
    timeout_sec: float | None
    stdout_path: Path
    stderr_path: Path
    network: bool
    max_output_bytes: int

    def run(self, sandbox: Sandbox, command: str, *, cwd: str | None, **overrides: Any) -> ExecResult:
        """``sandbox.exec(command)`` with these settings; ``overrides`` replace single ones."""
        settings = {
            "env": self.env,
            "timeout_sec": self.timeout_sec,
            "stdout_path": self.stdout_path,
            "stderr_path": self.stderr_path,
            "network": self.network,
            "max_output_bytes": self.max_output_bytes,
            **overrides,
        }
        return sandbox.exec(command, cwd=cwd, **settings)


class Process(Protocol):
    """A live process inside a sandbox (``Sandbox.spawn``): byte streams, wait, kill of its tree."""

    #: Writable; closing it sends end-of-file to the process.
    stdin: IO[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code once the process has exited, or None if it still runs after ``timeout``."""
        ...

    def kill(self, grace_sec: float = 1.0) -> None:
        """SIGTERM the whole tree, SIGKILL what is left after ``grace_sec``; returns when it is gone."""
        ...


@dataclass
class LeaseRequest:
    """What an attempt asks of an executor."""

    cell: Cell
    attempt: int
    #: Host directory for this attempt's artifacts (executor may write logs there).
    attempt_dir: Path
    #: Host scratch directory the executor may use and must not outlive the lease.
    scratch_dir: Path
    #: Extra read-only uploads wanted before the subject starts: sandbox path -> host path.
    uploads: Mapping[str, Path] = field(default_factory=dict)
    #: Epoch seconds by which the whole attempt must end (budgets.cell_timeout_sec), or None.
    #: An executor that waits for capacity waits no longer than this.
    deadline: float | None = None
    #: Host directories bound read-only into the sandbox (an installed agent): sandbox path -> host path.
    mounts: Mapping[str, Path] = field(default_factory=dict)
    #: A phase of the attempt's network plan is ``allowlist``: the executor may make its egress
    #: proxy ready while the lease starts, instead of in the first such phase (a hint only).
    egress: bool = False
    #: Set by an executor with ``SharedCapacity``: seconds the lease waited for a slot (the
    #: attempt's ``timings.slot_wait``, not part of its ``setup``); None when it took one at once.
    slot_wait: float | None = None


@runtime_checkable
class Sandbox(Protocol):
    """One attempt's environment: exec, put, get, and a description of its isolation."""

    def exec(
        self,
        command: str,
        *,
        env: Mapping[str, str],
        timeout_sec: float | None,
        stdout_path: Path,
        stderr_path: Path,
        network: bool = False,
        cwd: str | None = None,
        max_output_bytes: int = 8 * 1024 * 1024,
    ) -> ExecResult: ...

    def spawn(self, command: str, *, env: Mapping[str, str], cwd: str | None = None, network: bool = False) -> Process:
        """Start ``sh -c command`` and return at once; the lease's end stops it if still running."""
        ...

    def read_file(self, sandbox_path: str, max_bytes: int) -> bytes:
        """At most ``max_bytes`` of a regular file; never through a symlink leaving the environment.

        Raises FileNotFoundError when no regular file is there (a symlink at the path counts as none).
        """
        ...

    def write_file(self, sandbox_path: str, data: bytes) -> None:
        """Create or replace a regular file (parents made); a symlink at the path is replaced, not followed."""
        ...

    def put(self, host_path: Path, sandbox_path: str) -> None: ...

    def get(self, sandbox_path: str, host_path: Path, *, report: CopyReport | None = None) -> bool:
        """Copy out by the rules of ``executors.copyout`` (no link followed or kept as a live
        link, capped), noting what it did in ``report``; False when nothing is at ``sandbox_path``."""
        ...

    def remove(self, sandbox_path: str) -> None: ...

    def workspace_snapshot(self, dest: Path, *, report: CopyReport | None = None) -> Path:
        """A host directory holding the workdir's current content (may be ``dest`` or a live path);
        a copy keeps the rules and caps of ``get``."""
        ...

    def baseline_workspace(self) -> Path | None:
        """A host directory with the workdir as it was before the subject started, if known."""
        ...

    def isolation(self, *, agent_network: bool, verifier_network: bool) -> dict[str, Any]:
        """What this sandbox really provides, for the record."""
        ...


@dataclass(frozen=True)
class SandboxCapability:
    """One optional sandbox capability and what the kernel does when a sandbox lacks it."""

    protocol: type
    default: str


#: Every optional sandbox capability, with the kernel's behaviour without it. The kernel checks
#: them with ``isinstance(sandbox, protocol)`` and nowhere probes a sandbox by attribute name.
SANDBOX_CAPABILITIES: tuple[SandboxCapability, ...] = (
    SandboxCapability(EgressSandbox, "an allowlist phase is an infra failure (never an open network)"),
    SandboxCapability(ProtectedRestore, "no restore: a verification sees what the subject changed outside uploads"),
    SandboxCapability(VerdictChannel, "the kernel puts /tests and empties /logs/verifier itself (a shared channel)"),
    SandboxCapability(ChangeWatch, "no taint rule: changes outside the workdir are neither listed nor watched"),
    SandboxCapability(ExecAhead, "the verifier's command is set up when it runs"),
    SandboxCapability(ImageEnvironment, "no environment variables of the image's own"),
    SandboxCapability(PhaseUsers, "a task declaring a phase user is skipped (capabilities.users is off)"),
    SandboxCapability(ReportsFullDisk, "a missing verdict is never put down to a full disk"),
    SandboxCapability(ReadOnlySystemView, "no read_only_system note"),
)


@dataclass(frozen=True)
class ExecutorCapabilities:
    """What an executor runs beyond one plain environment; every flag is off by default.

    One flag per key of ``Task.features`` (``core.task_parts.FEATURES``; the flag
    ``multi_step`` is the key ``multi-step``): a cell whose task needs a flag that is off is
    skipped, its reason naming the feature. ``separate_verifier`` also means the executor
    implements ``VerifierEnvironments``; ``users`` that its sandboxes implement ``PhaseUsers``.
    """

    multi_step: bool = False
    separate_verifier: bool = False
    compose: bool = False
    users: bool = False
    healthcheck: bool = False
    gpus: bool = False
    image: bool = False

    @property
    def features(self) -> frozenset[str]:
        """The ``Task.features`` keys these flags cover."""
        return frozenset(name.replace("_", "-") for name, on in asdict(self).items() if on)

    def missing(self, needed: Iterable[str]) -> list[str]:
        """The keys of ``needed`` (a task's features) this executor lacks, sorted."""
        return sorted(set(needed) - self.features)


class Executor(Protocol):
    """Session-wide: created once per process from the spec's ``executor:`` entry."""

    kind: ClassVar[str]
    #: Validates the spec's ``executor:`` options (all keys but ``kind``).
    Options: ClassVar[type[BaseModel]]
    #: What it runs beyond one plain environment (default ``ExecutorCapabilities()``: nothing).
    capabilities: ExecutorCapabilities

    def check(self) -> None:
        """Raise ExecutorUnavailable with a one-line reason if this executor cannot run here."""
        ...

    @property
    def isolated(self) -> bool:
        """False when commands run without a sandbox (model-backed subjects need an opt-out)."""
        ...

    def host_needs(self, tasks: list[Task], egress_cells: int) -> list[Need]:
        """What this host must have for ``tasks`` (``egress_cells`` of them behind the egress
        proxy), checked before any cell runs (``hostcheck``; default: nothing)."""
        ...

    def prepare(self, tasks: list[Task]) -> None:
        """Once per process before cells run (e.g. check images); may be a no-op."""
        ...

    def lease(self, request: LeaseRequest) -> AbstractContextManager[Sandbox]: ...

    def close(self) -> None: ...


class ExecutorBase:
    """Defaults for the optional parts of the Executor protocol."""

    capabilities: ClassVar[ExecutorCapabilities] = ExecutorCapabilities()

    def host_needs(self, tasks: list[Task], egress_cells: int) -> list[Need]:
        return []

    def prepare(self, tasks: list[Task]) -> None:
        return None

    def close(self) -> None:
        return None


LeaseIterator = Iterator[Sandbox]
