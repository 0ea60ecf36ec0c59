"""Every extension seam is complete in its contract file (subjects/, executors/, verifiers/ base.py).

The kernel never probes a subject, executor, verifier or sandbox for a member by name: what
it calls is declared on the Protocol, and what is optional has its default on the base class
or is a capability Protocol listed with its default.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pytest_maka import builtins
from pytest_maka.contracts import contract_gaps, contract_problem, protocol_members
from pytest_maka.core.kinds import Kind
from pytest_maka.core.spec import SubjectSpec
from pytest_maka.core.task_parts import FEATURES
from pytest_maka.executors import base as executors_base
from pytest_maka.executors import capabilities as executors_capabilities
from pytest_maka.executors.base import (
    SANDBOX_CAPABILITIES,
    Executor,
    ExecutorBase,
    ExecutorCapabilities,
    Sandbox,
    SharedCapacity,
    TaskChecks,
    VerifierEnvironments,
)
from pytest_maka.executors.local import LocalExecutor
from pytest_maka.subjects.base import Subject, SubjectBase
from pytest_maka.verifiers import base as verifiers_base
from pytest_maka.verifiers.base import PlansExec, Verifier, VerifierBase

PACKAGE = Path(builtins.__file__).resolve().parent

#: What a kind must define itself; everything else of its Protocol has a default on the base.
REQUIRED = {
    Subject: {"kind", "reference", "Options", "spec", "run"},
    Executor: {"kind", "Options", "check", "isolated", "lease"},
    Verifier: {"name", "tests_payload", "run", "grade"},
}
BASES = {Subject: SubjectBase, Executor: ExecutorBase, Verifier: VerifierBase}


class _NoOptions(BaseModel):
    pass


def _capability_protocols() -> list[type]:
    """Every optional capability Protocol of the contract files."""
    return [c.protocol for c in SANDBOX_CAPABILITIES] + [VerifierEnvironments, SharedCapacity, TaskChecks, PlansExec]


def _contract_names() -> dict[str, set[str]]:
    """The members of each role's contract, by the word its objects are named with in the code."""
    sandbox = {name for p in [Sandbox, *(c.protocol for c in SANDBOX_CAPABILITIES)] for name in protocol_members(p)}
    return {
        "subject": set(protocol_members(Subject)),
        "executor": set(protocol_members(Executor))
        | set(protocol_members(VerifierEnvironments))
        | set(protocol_members(SharedCapacity))
        | set(protocol_members(TaskChecks))
        | {"features"},
        "verifier": set(protocol_members(Verifier)) | set(protocol_members(PlansExec)),
        "sandbox": sandbox,
    }


def _calls(name: str) -> list[tuple[Path, int, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                out.append((path, node.lineno, node))
    return out


def test_no_member_of_a_contract_is_probed_by_name() -> None:
    """A ``getattr(x, "egress", None)`` or ``hasattr(x, "features")`` is a member outside its contract."""
    contract = _contract_names()
    probes = []
    for fn in ("getattr", "hasattr"):
        for path, line, call in _calls(fn):
            obj, arg = ast.unparse(call.args[0]).lower(), call.args[1] if len(call.args) > 1 else None
            if not isinstance(arg, ast.Constant):
                continue
            if any(role in obj and arg.value in names for role, names in contract.items()):
                probes.append(f"{path.relative_to(PACKAGE.parent)}:{line} {fn}(..., {arg.value!r})")
    assert not probes, "probed instead of declared: " + "; ".join(probes)


def test_every_capability_checked_with_isinstance_is_declared_in_a_contract_file() -> None:
    """Each Protocol the kernel checks a sandbox, executor or verifier against lives in a base.py."""
    declared = {p.__name__ for p in [Sandbox, *_capability_protocols()]}
    contract_modules = (executors_base, executors_capabilities, verifiers_base)
    checked: set[str] = set()
    for _path, _line, call in _calls("isinstance"):
        target = call.args[1] if len(call.args) > 1 else None
        if isinstance(target, ast.Name) and any(
            getattr(m, target.id, None) is not None and _is_protocol(getattr(m, target.id)) for m in contract_modules
        ):
            checked.add(target.id)
    assert checked, "the scan found no capability check at all"
    assert checked <= declared, f"checked but not in the contract's index: {sorted(checked - declared)}"
    every = {
        name
        for m in contract_modules
        for name, value in vars(m).items()
        if _is_protocol(value) and value.__module__ == m.__name__
    }
    required = {"Sandbox", "Executor", "Process", "Verifier", "Subject"}
    assert every - required <= declared, f"a capability Protocol missing from the index: {sorted(every - declared)}"


def _is_protocol(value: Any) -> bool:
    return isinstance(value, type) and getattr(value, "_is_protocol", False)


@pytest.mark.parametrize("protocol", [Subject, Executor, Verifier], ids=lambda p: p.__name__)
def test_the_base_class_holds_a_default_for_every_optional_member(protocol: type) -> None:
    optional = set(protocol_members(protocol)) - REQUIRED[protocol]
    assert optional, "every seam has optional members"
    base = BASES[protocol]
    assert not [m for m in optional if not hasattr(base, m)], f"{base.__name__} lacks defaults"


def test_defaults_are_the_documented_ones(tmp_path: Path) -> None:
    spec = SubjectSpec("s", "nop", _NoOptions(), tmp_path / "cohort.yaml", "0" * 64)
    subject = SubjectBase(spec)
    assert (subject.egress(), subject.setup_egress(), subject.host_needs()) == ([], [], [])
    assert VerifierBase.imports_workdir is False
    assert ExecutorBase.capabilities == ExecutorCapabilities() and ExecutorCapabilities().features == frozenset()
    assert ExecutorBase().host_needs([], 3) == []


def test_capability_flags_are_exactly_the_task_features() -> None:
    """One flag per key of core.task_parts.FEATURES: a new task feature needs a flag, and back."""
    assert {f.name.replace("_", "-") for f in fields(ExecutorCapabilities)} == set(FEATURES)
    everything = ExecutorCapabilities(**{f.name: True for f in fields(ExecutorCapabilities)})
    assert everything.features == set(FEATURES) and everything.missing(FEATURES) == []
    local = LocalExecutor.capabilities
    assert local.features == {"multi-step"}
    assert local.missing({"compose", "multi-step", "users"}) == ["compose", "users"]


def test_the_built_in_executors_declare_their_capabilities() -> None:
    from pytest_maka.executors.docker.executor import DockerExecutor

    assert DockerExecutor.capabilities.separate_verifier and issubclass(DockerExecutor, VerifierEnvironments)
    assert issubclass(DockerExecutor, SharedCapacity) and not issubclass(LocalExecutor, SharedCapacity)
    assert DockerExecutor.capabilities.missing(FEATURES) == ["gpus"]
    assert contract_gaps(LocalExecutor(), Executor) == []


def test_the_built_in_kinds_are_a_table_with_no_class_that_returns_another(tmp_path: Path) -> None:
    subjects = builtins.pytest_maka_subject_kinds()
    executors = builtins.pytest_maka_executor_kinds()
    for name, entry in {**subjects, **executors}.items():
        assert entry.kind == name and issubclass(entry.Options, BaseModel)
        assert isinstance(entry, Kind) or "__new__" not in vars(entry), f"{name}: a __new__ trick"
    assert isinstance(executors["docker"], Kind) and isinstance(subjects["acp"], Kind)
    from pytest_maka.executors.docker.executor import DockerExecutor
    from pytest_maka.subjects.acp.subject import AcpSubject

    made = executors["docker"](executors["docker"].Options())
    try:
        assert type(made) is DockerExecutor and contract_gaps(made, Executor) == []
    finally:
        made.close()
    options = subjects["acp"].Options(command="true")
    acp = subjects["acp"](SubjectSpec("a", "acp", options, tmp_path / "cohort.yaml", "0" * 64))
    assert type(acp) is AcpSubject and contract_gaps(acp, Subject) == []


def test_the_kind_tables_import_neither_docker_nor_acp_until_a_cohort_uses_them() -> None:
    code = (
        "import sys\n"
        "from pytest_maka import builtins\n"
        "s, e = builtins.pytest_maka_subject_kinds(), builtins.pytest_maka_executor_kinds()\n"
        "e['docker'].Options(); s['acp'].Options(command='true')\n"
        "print(sorted(m for m in ('docker', 'acp') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class _Bare:
    """A third-party subject written against the required members only."""

    kind = "bare"
    reference = False
    Options = _NoOptions

    def __init__(self, spec: SubjectSpec) -> None:
        self.spec = spec

    def run(self, sandbox: Sandbox, task: Any, ctx: Any) -> Any:
        raise AssertionError("never run")


def test_a_kind_missing_members_is_one_line_naming_them(tmp_path: Path) -> None:
    spec = SubjectSpec("s", "bare", _NoOptions(), tmp_path / "cohort.yaml", "0" * 64)
    line = contract_problem({"s": _Bare(spec)}, LocalExecutor(), {})  # type: ignore[dict-item]
    assert line == (
        "subject 's' (_Bare) lacks egress, env, host_needs, mounts, secrets, setup_egress, unsupported, uploads,"
        " version_problem of the Subject contract (pytest_maka/subjects/base.py; subclass SubjectBase for the defaults)"
    )
    assert contract_problem({"s": _Full(spec)}, LocalExecutor(), {}) is None
    assert "lacks Options, run of the Subject contract" in (
        contract_problem({"s": SubjectBase(spec)}, LocalExecutor(), {}) or ""
    )  # type: ignore[dict-item]


class _Full(SubjectBase):
    kind = "full"
    Options = _NoOptions

    def run(self, sandbox: Sandbox, task: Any, ctx: Any) -> Any:
        raise AssertionError("never run")
