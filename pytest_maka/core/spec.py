"""The cohort spec: pydantic models, loading, and one-line error messages."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import hostpattern, inputs
from .errors import SpecError, unknown_choice
from .matrix import expand as expand_matrix
from .task import MAX_TIMEOUT_SEC
from .validation import first_error as _first_error
from .validation import key_path  # noqa: F401  (re-exported)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
#: Names end up in node ids and file names: long enough for anyone, short enough for any filesystem.
MAX_NAME = 128


def _path_text(value: str) -> str:
    """A relative or absolute path the OS can take: not empty, no part over 255 bytes, under 4096."""
    raw = os.fsencode(value)
    if not value.strip():
        raise ValueError("expected a path, got an empty string")
    if len(raw) >= 4096 or any(len(part) > 255 for part in raw.split(b"/")):
        raise ValueError("path too long for the filesystem (a part over 255 bytes, or 4096 in all)")
    return value


#: A path written in a spec (tasks[].path, a subject file, a template).
PathText = Annotated[str, AfterValidator(_path_text)]
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=MAX_NAME)]


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSource(BaseModel):
    """One entry of ``tasks:``. Adapter-specific options are kept as extras for the adapter."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: PathText
    format: str | None = None
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    limit: int | None = Field(default=None, ge=1)

    @field_validator("include", "exclude")
    @classmethod
    def _globs_not_empty(cls, v: list[str]) -> list[str]:
        for pattern in v:
            if not pattern.strip():
                raise ValueError("a glob pattern must not be empty")
        return v

    @property
    def adapter_options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _host_entry(entry: str) -> str:
    """An allowlist entry (``host[:port]``, ``*.domain[:port]``, an IP literal), validated."""
    hostpattern.parse(entry)
    return entry


HostEntry = Annotated[str, AfterValidator(_host_entry)]


class SubjectEntry(BaseModel):
    """One entry of ``subjects:``; the keys beyond name/kind are validated by the kind."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: Name
    kind: str
    #: Hosts this subject needs in its agent phase (e.g. its model provider), reached through the egress proxy.
    egress: list[HostEntry] = Field(default_factory=list)


#: Schemes of a Dask scheduler address (``distributed``'s comm backends).
CLUSTER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


def cluster_address(value: str) -> str:
    """A Dask scheduler address ``SCHEME://HOST:PORT``, validated (a ValueError says what is wrong)."""
    expected = f"expected a Dask scheduler address such as tcp://HOST:8786 (schemes: {', '.join(CLUSTER_SCHEMES)})"
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{expected} (got {value!r})") from None
    if parts.scheme not in CLUSTER_SCHEMES or not parts.hostname or port is None or port == 0:
        raise ValueError(f"{expected} (got {value!r})")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{expected}, nothing after the port (got {value!r})")
    return value.strip()


class ClusterEntry(StrictModel):
    """``executor.cluster``: the Dask cluster that runs every attempt (``--maka-cluster`` wins)."""

    address: Annotated[str, AfterValidator(cluster_address)]
    #: Bytes of an attempt's files a worker sends back to the controller (the rest is dropped, listed).
    max_transfer_bytes: int = Field(default=1024**3, ge=1024)
    #: Seconds an attempt may wait while no worker of the cluster can run a cell (none has the
    #: ``cells`` resource) before it is an infra failure saying so.
    no_worker_timeout_sec: float = Field(default=300.0, gt=0, le=7 * 24 * 3600)


class ExecutorEntry(BaseModel):
    """``executor:``; the keys beyond kind (and cluster) are validated by the executor kind."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = "local"
    #: ``tcp://HOST:PORT`` or ``{address: ..., max_transfer_bytes: ...}``: run the cells on a Dask cluster.
    cluster: ClusterEntry | None = None

    @field_validator("cluster", mode="before")
    @classmethod
    def _address_alone(cls, v: Any) -> Any:
        if v is None or isinstance(v, dict):
            return v
        if isinstance(v, str):
            return {"address": cluster_address(v)}
        raise ValueError("expected a Dask scheduler address (tcp://HOST:PORT) or a mapping with keys address, ...")


class Retries(StrictModel):
    infra: int = Field(default=2, ge=0, le=20)
    verifier: int = Field(default=0, ge=0, le=20)
    #: First pause before an infra retry; doubled per retry of a cell, with +-50% jitter.
    backoff_sec: float = Field(default=2.0, ge=0, le=600)
    backoff_max_sec: float = Field(default=60.0, ge=0, le=3600)
    #: Infra and verifier retries the whole run may spend (default: a quarter of the cells, at least 5).
    cohort_max: int | None = Field(default=None, ge=0)


class Budgets(StrictModel):
    """Limits set by the experimenter. Timeouts override the task's own when given."""

    agent_timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SEC)
    verifier_timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SEC)
    timeout_multiplier: float = Field(default=1.0, gt=0, le=100)
    cell_timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SEC)
    cohort_timeout_sec: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SEC)
    max_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0)
    #: USD the whole run may spend: cells that would start after it are budget_exhausted, running ones stopped.
    cohort_max_cost_usd: float | None = Field(default=None, ge=0)
    max_output_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    #: Bytes copied out of /logs/agent, and of the workdir, per attempt (the rest is dropped, flagged).
    max_artifact_bytes: int = Field(default=512 * 1024 * 1024, ge=1024)


class Policy(StrictModel):
    """Safety policy. Everything defaults to the safe side."""

    allow_unsandboxed: bool = False
    agent_network: bool = False
    verifier_network: bool = False
    #: Hosts every subject may reach in its agent phase, through the egress proxy.
    egress: list[HostEntry] = Field(default_factory=list)
    #: Hosts the verifier phase may reach through the egress proxy (e.g. a package index).
    verifier_egress: list[HostEntry] = Field(default_factory=list)
    #: The setup phase (environment set-up, before the subject starts): grants what the task's
    #: environment declares, and hosts it may reach through the egress proxy.
    setup_network: bool = False
    setup_egress: list[HostEntry] = Field(default_factory=list)
    #: A pass that depended on code the subject changed outside the workdir (a tainted pass,
    #: core/taint.py) counts as an agent_failure instead ("tainted"); off: recorded and shown apart.
    refuse_tainted: bool = False


class CohortSpec(StrictModel):
    name: Name
    description: str = ""
    tasks: list[TaskSource] = Field(min_length=1)
    subjects: list[SubjectEntry | PathText] = Field(min_length=1)
    repetitions: int = Field(default=1, ge=1, le=1000)
    executor: ExecutorEntry = Field(default_factory=ExecutorEntry)
    retries: Retries = Field(default_factory=Retries)
    budgets: Budgets = Field(default_factory=Budgets)
    policy: Policy = Field(default_factory=Policy)


@dataclass(frozen=True)
class SubjectSpec:
    """A validated subject: its kind's options model plus where it was declared."""

    name: str
    kind: str
    options: BaseModel
    declared_in: Path
    digest: str
    #: Allowlist entries this subject needs in its agent phase.
    egress: tuple[str, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.declared_in.parent


@dataclass(frozen=True)
class ExecutorSpec:
    kind: str
    options: BaseModel


@dataclass(frozen=True)
class LoadedSpec:
    """The validated spec with subjects and executor resolved against their kinds."""

    path: Path
    spec: CohortSpec
    subjects: tuple[SubjectSpec, ...]
    executor: ExecutorSpec

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def source_path(self, source: TaskSource) -> Path:
        return (self.base_dir / source.path).resolve()


def read_yaml(path: Path, *, what: str = "cohort spec") -> Any:
    """Read a YAML file through the bounded loader; every problem is one line naming the file."""
    return inputs.read_yaml(path, what=what, error=SpecError)


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))


def load_spec(
    path: Path,
    subject_kinds: dict[str, type[BaseModel]],
    executor_kinds: dict[str, type[BaseModel]],
) -> LoadedSpec:
    """Load and validate a cohort spec.

    ``subject_kinds`` and ``executor_kinds`` map a kind name to the pydantic model that
    validates that kind's options (everything in the entry except name/kind).
    """
    path = Path(path).resolve()
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise SpecError(path, None, "expected a mapping with keys name, tasks, subjects, ...")
    try:
        spec = CohortSpec.model_validate(raw)
    except ValidationError as e:
        raise _first_error(e, path, model=CohortSpec) from None

    for i, source in enumerate(spec.tasks):
        target = (path.parent / source.path).resolve()
        try:
            found = target.exists()
        except OSError as e:
            raise SpecError(path, f"tasks[{i}].path", f"cannot use this path: {e.strerror or e}") from None
        if not found:
            raise SpecError(path, f"tasks[{i}].path", f"no such file or directory: {target}")

    subjects: list[SubjectSpec] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(spec.subjects):
        declared_in, key_prefix = path, f"subjects[{i}]"
        if isinstance(entry, str):
            declared_in = (path.parent / entry).resolve()
            data = read_yaml(declared_in, what="subject file")
            if not isinstance(data, dict):
                raise SpecError(declared_in, None, "expected a mapping with keys name, kind, ...")
            try:
                entry = SubjectEntry.model_validate(data)
            except ValidationError as e:
                raise _first_error(e, declared_in) from None
            key_prefix = ""
        raw = {"name": entry.name, "kind": entry.kind, **(entry.model_extra or {})}
        if entry.egress:  # a declared field, not an extra: carried into every variant explicitly
            raw["egress"] = list(entry.egress)
        for variant in expand_matrix(raw, declared_in, key_prefix):  # one subject per matrix combination
            subject = _resolve_subject(SubjectEntry.model_validate(variant), subject_kinds, declared_in, key_prefix)
            where = f"{key_prefix}.name" if key_prefix else "name"
            if subject.name in seen:
                raise SpecError(
                    declared_in, where, f"duplicate subject name {subject.name!r} (first at {seen[subject.name]})"
                )
            seen[subject.name] = key_prefix or str(declared_in)
            subjects.append(subject)

    executor = _resolve_executor(spec.executor, executor_kinds, path)
    return LoadedSpec(path=path, spec=spec, subjects=tuple(subjects), executor=executor)


def _resolve_subject(entry: SubjectEntry, kinds: dict[str, type[BaseModel]], file: Path, prefix: str) -> SubjectSpec:
    join = (lambda k: f"{prefix}.{k}") if prefix else (lambda k: k)
    model = kinds.get(entry.kind)
    if model is None:
        raise SpecError(file, join("kind"), unknown_choice("subject kind", entry.kind, set(kinds)))
    extras = dict(entry.model_extra or {})
    try:
        options = model.model_validate(extras, context={"base_dir": file.parent})
    except ValidationError as e:
        raise _first_error(e, file, prefix=prefix, model=model, also=("name", "kind", "egress")) from None
    identity: dict[str, Any] = {"kind": entry.kind, "options": options.model_dump(mode="json")}
    if entry.egress:
        identity["egress"] = entry.egress
    digest = hashlib.sha256(_canonical(identity).encode()).hexdigest()
    return SubjectSpec(
        name=entry.name,
        kind=entry.kind,
        options=options,
        declared_in=file,
        digest=digest,
        egress=tuple(entry.egress),
    )


def _resolve_executor(entry: ExecutorEntry, kinds: dict[str, type[BaseModel]], file: Path) -> ExecutorSpec:
    model = kinds.get(entry.kind)
    if model is None:
        raise SpecError(file, "executor.kind", unknown_choice("executor kind", entry.kind, set(kinds)))
    try:
        options = model.model_validate(dict(entry.model_extra or {}), context={"base_dir": file.parent})
    except ValidationError as e:
        raise _first_error(e, file, prefix="executor", model=model, also=("cluster", "kind")) from None
    return ExecutorSpec(kind=entry.kind, options=options)
