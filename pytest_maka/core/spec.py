"""The cohort spec: pydantic models, loading, and one-line error messages."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import SpecError
from .matrix import expand as expand_matrix

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSource(BaseModel):
    """One entry of ``tasks:``. Adapter-specific options are kept as extras for the adapter."""

    model_config = ConfigDict(extra="allow", frozen=True)

    path: str
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


class SubjectEntry(BaseModel):
    """One entry of ``subjects:``; the keys beyond name/kind are validated by the kind."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    kind: str


class ExecutorEntry(BaseModel):
    """``executor:``; the keys beyond kind are validated by the executor kind."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = "local"


class Retries(StrictModel):
    infra: int = Field(default=2, ge=0, le=20)
    verifier: int = Field(default=0, ge=0, le=20)


class Budgets(StrictModel):
    """Limits set by the experimenter. Timeouts override the task's own when given."""

    agent_timeout_sec: float | None = Field(default=None, gt=0)
    verifier_timeout_sec: float | None = Field(default=None, gt=0)
    timeout_multiplier: float = Field(default=1.0, gt=0)
    cell_timeout_sec: float | None = Field(default=None, gt=0)
    cohort_timeout_sec: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0)
    max_output_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)


class Policy(StrictModel):
    """Safety policy. Everything defaults to the safe side."""

    allow_unsandboxed: bool = False
    agent_network: bool = False
    verifier_network: bool = False


class CohortSpec(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    tasks: list[TaskSource] = Field(min_length=1)
    subjects: list[SubjectEntry | str] = Field(min_length=1)
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


def key_path(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """Render a pydantic location as ``subjects[2].kind``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in {"str", "SubjectEntry"} or str(part).startswith("function-"):
            continue  # union branch labels add nothing for a reader
        else:
            out += f".{part}" if out else str(part)
    return out


def _first_error(
    exc: ValidationError, file: Path, prefix: str = "", model: type | None = None, also: tuple[str, ...] = ()
) -> SpecError:
    errors = exc.errors(include_url=False)
    # For union entries (subjects) pydantic reports one error per branch; prefer the
    # branch that is a mapping, since that is what a user who wrote a mapping meant.
    errors.sort(key=lambda e: any(str(p) == "str" for p in e["loc"]))
    err = errors[0]
    key = key_path(err["loc"], prefix)
    etype = err["type"]
    if etype == "extra_forbidden":
        allowed = sorted(model.model_fields) if model is not None else []
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        if parent and model is not None:
            allowed = sorted({*_allowed_keys_at(model, err["loc"][:-1]), *also})
        msg = "unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    elif etype == "missing":
        msg = "missing required key"
    else:
        given = err.get("input")
        shown = "" if isinstance(given, (dict, list)) else f" (got {given!r})"
        msg = f"{err['msg']}{shown}"
    more = len(errors) - 1
    if more > 0 and etype != "union_tag_invalid":
        msg += f" (+{more} more problem{'s' if more > 1 else ''})"
    return SpecError(file, key or None, msg)


def _allowed_keys_at(model: type, loc: tuple[Any, ...] | list[Any]) -> list[str]:
    """The field names of the model found at ``loc`` (best effort)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", {})
        if part not in fields:
            return []
        ann = fields[part].annotation
        args = getattr(ann, "__args__", ())
        candidates = [a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = candidates[0] if candidates else None
        if current is None:
            return []
    return sorted(getattr(current, "model_fields", {}))


def read_yaml(path: Path, *, what: str = "cohort spec") -> Any:
    """Read a YAML file; syntax errors become one line naming file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(path, None, f"{what} not found") from None
    except OSError as e:
        raise SpecError(path, None, f"cannot read {what}: {e.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(path, where, f"invalid YAML: {problem}") from None


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
        if not target.exists():
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
        raise SpecError(
            file, join("kind"), f"unknown subject kind {entry.kind!r}; expected one of: {', '.join(sorted(kinds))}"
        )
    extras = dict(entry.model_extra or {})
    try:
        options = model.model_validate(extras, context={"base_dir": file.parent})
    except ValidationError as e:
        raise _first_error(e, file, prefix=prefix, model=model, also=("name", "kind")) from None
    material = _canonical({"kind": entry.kind, "options": options.model_dump(mode="json")})
    digest = hashlib.sha256(material.encode()).hexdigest()
    return SubjectSpec(name=entry.name, kind=entry.kind, options=options, declared_in=file, digest=digest)


def _resolve_executor(entry: ExecutorEntry, kinds: dict[str, type[BaseModel]], file: Path) -> ExecutorSpec:
    model = kinds.get(entry.kind)
    if model is None:
        raise SpecError(
            file, "executor.kind", f"unknown executor kind {entry.kind!r}; expected one of: {', '.join(sorted(kinds))}"
        )
    try:
        options = model.model_validate(dict(entry.model_extra or {}), context={"base_dir": file.parent})
    except ValidationError as e:
        raise _first_error(e, file, prefix="executor", model=model) from None
    return ExecutorSpec(kind=entry.kind, options=options)
