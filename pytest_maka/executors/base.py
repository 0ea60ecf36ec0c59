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
  means the executor also implements ``VerifierEnvironments``.
- On the sandbox: the Protocols of ``SANDBOX_CAPABILITIES`` below, each checked with
  ``isinstance`` and each with its default. ``EgressSandbox`` is the important one: inside its
  phase ``network=True`` reaches only the egress proxy; without it an allowlist phase is an
  infra failure, never an open network. ``ProtectedRestore`` undoes, after the subject stopped,
  what it changed where the verifier would run it, or refuses with ``SubjectFault``.
  ``ChangeWatch`` lists, for an environment the verifier sees live (fidelity first, DESIGN.md
  §3), what the subject changed outside the workdir and which of those files the verification
  read or executed (the taint rule). docs/security.md has each executor's way; docs/extending.md
  has the whole contract in one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from ..core.cell import Cell
from ..core.hostreqs import Need
from ..core.taint import Touched
from ..core.task import Task, VerifierEnvironment
from .copyout import CopyReport

if TYPE_CHECKING:  # only for annotations: egress/ and separate.py import this module
    from ..egress.log import EgressLog
    from ..egress.plan import PhasePlan
    from .separate import ArtifactReport


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


LeaseIterator = Iterator[Sandbox]
