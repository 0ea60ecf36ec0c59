"""Harbor task layout (also Terminal-Bench 2): our native task format.

task.toml  instruction.md  environment/{Dockerfile, workspace/}  tests/test.sh  solution/solve.sh
[.harborignore]: files it names are left out of every upload (and of the task's digest).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ..core.errors import TaskError
from ..core.task import (
    DEFAULT_AGENT_TIMEOUT_SEC,
    DEFAULT_BUILD_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC,
    DEFAULT_WORKDIR,
    Task,
    digest_tree,
)
from . import detect, ignore
from .cache import materialize

FORMAT = "harbor"
_SECTIONS = {"version", "metadata", "agent", "verifier", "environment", "solution", "source"}


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def discover(path: Path) -> list[Task]:
    """One task dir, or a directory whose non-hidden subdirectories are all task dirs."""
    tasks = []
    for child in detect.task_dirs(path):
        if not is_task_dir(child):
            raise detect.wrong_dir(child, FORMAT)
        tasks.append(load_task(child))
    return tasks


def _section(data: dict[str, Any], name: str, file: Path) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise TaskError(file, name, "expected a table")
    return value


def _number(table: dict[str, Any], key: str, file: Path, section: str, default: Any) -> Any:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise TaskError(file, f"{section}.{key}", f"expected a non-negative number (got {value!r})")
    return value


def _memory_mb(env: dict[str, Any], file: Path) -> int | None:
    if "memory_mb" in env:
        return int(_number(env, "memory_mb", file, "environment", None))
    legacy = env.get("memory")
    if legacy is None:
        return None
    text = str(legacy).strip().upper()
    units = {"G": 1024, "M": 1, "K": 1 / 1024}
    try:
        if text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(float(text))
    except (ValueError, IndexError):
        raise TaskError(file, "environment.memory", f"expected a size such as '1G' (got {legacy!r})") from None


def _str_map(table: dict[str, Any], key: str, file: Path, section: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise TaskError(file, f"{section}.{key}", "expected a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def _network(table: dict[str, Any], file: Path, section: str, default: str | None = None) -> str:
    """A declared network: public (Harbor's default), none or allowlist."""
    mode = table.get("network_mode")
    if mode is None and "allow_internet" in table:
        mode = "public" if table["allow_internet"] else "no-network"
    if mode is None and default is not None:
        return default
    known = {None: "public", "public": "public", "no-network": "none", "allowlist": "allowlist"}
    if mode not in known:
        raise TaskError(file, f"{section}.network_mode", f"expected public, no-network or allowlist (got {mode!r})")
    return known[mode]


def _hosts(agent: dict[str, Any], env: dict[str, Any], file: Path) -> list[str]:
    hosts = agent.get("allowed_hosts", env.get("allowed_hosts", []))
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise TaskError(file, "environment.allowed_hosts", "expected a list of host names")
    return hosts


def _unsupported(path: Path, verifier: dict[str, Any], env: dict[str, Any], agent: dict[str, Any]) -> str | None:
    if (path / "steps").is_dir():
        return "multi-step tasks (steps/) are not supported yet"
    if (path / "environment" / "docker-compose.yaml").is_file() or (
        path / "environment" / "docker-compose.yml"
    ).is_file():
        return "multi-container (docker-compose) environments are not supported yet"
    if verifier.get("environment_mode") == "separate":
        return "a separate verifier environment is not supported yet"
    if env.get("gpus"):
        return "GPU environments (environment.gpus) are not supported yet"
    for section, table in (("agent", agent), ("verifier", verifier)):
        if table.get("user") not in (None, "root", 0):
            return f"running the {section} as another user ({section}.user) is not supported yet"
    return None


def _filtered_root(path: Path) -> Path:
    """The task dir itself, or a cached copy without what .harborignore names."""
    rules = ignore.load_rules(path)
    if rules is None:
        return path
    return materialize(
        "harbor-filtered",
        digest_tree(path, extra="harborignore/1"),
        lambda dest: ignore.copy_filtered(path, dest, rules),
    )


def load_task(path: Path) -> Task:
    """Parse and validate one Harbor task directory."""
    path = path.resolve()
    toml_path = path / "task.toml"
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise TaskError(toml_path, None, f"invalid TOML: {e}") from None
    unknown = sorted(set(data) - _SECTIONS)
    if unknown:
        raise TaskError(toml_path, unknown[0], f"unknown section; expected one of: {', '.join(sorted(_SECTIONS))}")
    agent = _section(data, "agent", toml_path)
    verifier = _section(data, "verifier", toml_path)
    env = _section(data, "environment", toml_path)
    metadata = _section(data, "metadata", toml_path)

    root = _filtered_root(path)
    instruction_path = path / "instruction.md"
    if not instruction_path.is_file():
        raise TaskError(path, "instruction.md", "missing: every task needs an instruction")
    tests_dir = root / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskError(
            path, "tests/test.sh", "missing: the hidden verifier is required (a task with no verifier cannot pass)"
        )
    solution_dir = root / "solution"
    environment_dir = root / "environment"
    workdir = str(env.get("workdir", DEFAULT_WORKDIR))
    if not workdir.startswith("/"):
        raise TaskError(toml_path, "environment.workdir", f"expected an absolute path (got {workdir!r})")

    return Task(
        id=path.name,
        path=path,
        instruction=instruction_path.read_text(encoding="utf-8"),
        digest=digest_tree(root, extra=FORMAT),
        format=FORMAT,
        workdir=workdir,
        agent_timeout_sec=_number(agent, "timeout_sec", toml_path, "agent", DEFAULT_AGENT_TIMEOUT_SEC),
        verifier_timeout_sec=_number(verifier, "timeout_sec", toml_path, "verifier", DEFAULT_VERIFIER_TIMEOUT_SEC),
        build_timeout_sec=_number(env, "build_timeout_sec", toml_path, "environment", DEFAULT_BUILD_TIMEOUT_SEC),
        cpus=_number(env, "cpus", toml_path, "environment", None),
        memory_mb=_memory_mb(env, toml_path),
        storage_mb=_number(env, "storage_mb", toml_path, "environment", None),
        environment_dir=environment_dir if environment_dir.is_dir() else None,
        workspace_dir=(environment_dir / "workspace") if (environment_dir / "workspace").is_dir() else None,
        dockerfile=(environment_dir / "Dockerfile") if (environment_dir / "Dockerfile").is_file() else None,
        docker_image=env.get("docker_image"),
        tests_dir=tests_dir,
        solution_dir=solution_dir if (solution_dir / "solve.sh").is_file() else None,
        verifier_env=_str_map(verifier, "env", toml_path, "verifier"),
        env=_str_map(env, "env", toml_path, "environment"),
        network=_network(agent, toml_path, "agent", default=_network(env, toml_path, "environment")),
        metadata=dict(metadata),
        grading_options={
            # What the verifier phase declares (it shares the environment); granted only by policy.
            "network": _network(env, toml_path, "environment"),
            "allowed_hosts": _hosts(agent, env, toml_path),
        },
        unsupported=_unsupported(path, verifier, env, agent),
    )
