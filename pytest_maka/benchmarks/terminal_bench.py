"""Legacy Terminal-Bench task layout (``task.yaml``), graded by parsing the test output.

task.yaml  Dockerfile  [docker-compose.yaml]  run-tests.sh  tests/  [solution.sh | solution.yaml]
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import Field

from ..core import compose_file, inputs
from ..core.errors import TaskError
from ..core.task import DEFAULT_BUILD_TIMEOUT_SEC, TESTS_DIR, Task, check_workdir, digest_tree, task_id_for
from ..verifiers import parsers
from . import detect
from .cache import materialize
from .fields import Problems, Seconds, Section, Text, validate

FORMAT = detect.TERMINAL_BENCH
GRADING = "terminal-bench"
DEFAULT_AGENT_TIMEOUT_SEC = 360.0
DEFAULT_TEST_TIMEOUT_SEC = 60.0
DEFAULT_WORKDIR = "/app"
#: Terminal-Bench's compose variables, as they apply inside our environments.
COMPOSE_VARIABLES = {
    "T_BENCH_TEST_DIR": TESTS_DIR,
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_METADATA_KEYS = ("difficulty", "category", "tags", "author_name", "author_email", "run_tests_in_same_shell")
Scalar = str | int | float | bool | None


class TaskYaml(Section):
    """``task.yaml``: the keys we read, strictly typed; the rest is the task's metadata."""

    instruction: str | None = None
    descriptions: list[dict[str, Any]] | None = None
    parser_name: Text | None = None
    max_agent_timeout_sec: Seconds | None = None
    max_test_timeout_sec: Seconds | None = None


class Build(Section):
    context: str = "."
    dockerfile: str = "Dockerfile"


class ClientService(Section):
    """The ``client`` service of docker-compose.yaml: the task's one environment."""

    build: str | Build | None = None
    image: Text | None = None
    environment: dict[str, Scalar] | list[str] | None = None
    working_dir: str | None = None


class Compose(Section):
    services: dict[str, Any] = Field(default_factory=dict)


def discover(path: Path) -> list[Task]:
    tasks = []
    for child in detect.task_dirs(path):
        if not (child / "task.yaml").is_file():
            tasks.append(detect.wrong_dir(child, FORMAT))
            continue
        try:
            tasks.append(load_task(child))
        except TaskError as e:
            tasks.append(detect.invalid_task(child, str(e), FORMAT))
    return tasks


def _substitute(value: str) -> str:
    """Compose-style ``${VAR}``/``${VAR:-default}`` with Terminal-Bench's variables; others empty."""
    return _VAR.sub(lambda m: COMPOSE_VARIABLES.get(m.group(1) or m.group(3), m.group(2) or ""), value)


def _read_yaml(path: Path) -> Any:
    return inputs.read_yaml(path, what=path.name, error=TaskError)


def _instruction(data: TaskYaml, file: Path) -> str:
    text = data.instruction
    if text is None:  # the oldest layout: descriptions: [{key: base, description: ...}]
        for entry in data.descriptions or []:
            if entry.get("key", "base") == "base":
                text = entry.get("description")
                break
    if not isinstance(text, str) or not text.strip():
        raise TaskError(file, "instruction", "missing: every task needs an instruction")
    return text


def _env_map(raw: dict[str, Scalar] | list[str] | None) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {k: _substitute(str(v)) for k, v in raw.items() if v is not None}
    out = {}
    for item in raw:
        key, _, value = item.partition("=")
        out[key] = _substitute(value)
    return out


def _environment(path: Path) -> dict[str, Any]:
    """The client service of docker-compose.yaml (or the default: ./Dockerfile)."""
    compose_path = next((path / n for n in ("docker-compose.yaml", "docker-compose.yml") if (path / n).is_file()), None)
    out: dict[str, Any] = {
        "context": path,
        "dockerfile": path / "Dockerfile",
        "env": {},
        "image": None,
        "workdir": DEFAULT_WORKDIR,
        "unsupported": None,
        "compose_file": None,
        "service": "client",
    }
    if compose_path is None:
        return out
    raw = _read_yaml(compose_path)
    services = validate(Compose, raw if isinstance(raw, dict) else {}, compose_path).services
    if not services:
        raise TaskError(compose_path, "services", "expected at least one service (the task's environment)")
    # The environment is 'client', else the first service listed, as ``harbor tasks migrate`` takes it.
    main = "client" if "client" in services else str(next(iter(services)))
    out["service"] = main
    if len(services) > 1:  # sidecars: the executor runs them with Docker Compose (Task.features)
        out["compose_file"] = compose_path
        check = compose_file.compose_variables("maka-check", main, Path("/nonexistent/logs"))
        out["unsupported"] = compose_file.main_service(compose_path, main, check).unsupported
    client = validate(ClientService, services[main] or {}, compose_path, prefix=f"services.{main}")
    build = Build(context=client.build) if isinstance(client.build, str) else client.build
    if build is not None:
        context = (path / _substitute(build.context)).resolve()
        out["context"] = context
        out["dockerfile"] = context / _substitute(build.dockerfile)
    elif client.image:
        out["image"], out["dockerfile"] = _substitute(client.image), None
    out["env"] = _env_map(client.environment)
    if client.working_dir:
        try:
            out["workdir"] = check_workdir(_substitute(client.working_dir))
        except ValueError as e:
            raise TaskError(compose_path, f"services.{main}.working_dir", str(e)) from None
    return out


def _solution(path: Path) -> tuple[Path | None, str | None]:
    """A solution dir with solve.sh for the oracle, or a note on why there is none."""
    script = path / "solution.sh"
    if script.is_file():
        return materialize(
            "terminal-bench-solution",
            digest_tree(script, extra="solution/1"),
            lambda dest: shutil.copyfile(script, dest / "solve.sh"),
        ), None
    if (path / "solution.yaml").is_file():
        return None, "solution.yaml (tmux keystroke solutions) is not supported; the oracle needs solution.sh"
    return None, None


def _mapping(yaml_path: Path) -> dict[str, Any]:
    raw = _read_yaml(yaml_path)
    if not isinstance(raw, dict):
        raise TaskError(yaml_path, None, "expected a mapping with keys instruction, parser_name, ...")
    return raw


def load_task(path: Path) -> Task:
    """Parse and validate one legacy Terminal-Bench task directory."""
    path = path.resolve()
    yaml_path = path / "task.yaml"
    problems = Problems()
    raw = problems.check(lambda: _mapping(yaml_path))
    data = problems.check(lambda: validate(TaskYaml, raw, yaml_path)) if raw is not None else None
    instruction = problems.check(lambda: _instruction(data, yaml_path)) if data is not None else None
    run_tests = path / "run-tests.sh"
    if not run_tests.is_file():
        problems.found.append(
            str(TaskError(path, "run-tests.sh", "missing: the verifier is required (a task with no tests cannot pass)"))
        )
    env = problems.check(lambda: _environment(path))
    if env is not None and env["dockerfile"] is not None and not env["dockerfile"].is_file():
        problems.found.append(
            str(TaskError(path, "Dockerfile", f"missing: the environment's Dockerfile ({env['dockerfile']})"))
        )
    problems.raise_any()
    assert raw is not None and data is not None and env is not None and instruction is not None
    parser = data.parser_name or "pytest"
    unsupported = env["unsupported"]
    if parsers.get(parser) is None and unsupported is None:
        unsupported = f"no test-log parser named {parser!r} (known: {', '.join(parsers.names())})"
    solution_dir, solution_note = _solution(path)
    metadata = {k: raw[k] for k in _METADATA_KEYS if k in raw}
    if solution_note:
        metadata["solution_unsupported"] = solution_note
    tests_dir = path / "tests"
    return Task(
        id=task_id_for(path.name),
        path=path,
        instruction=instruction,
        digest=digest_tree(path, extra=FORMAT),
        format=FORMAT,
        workdir=env["workdir"],
        agent_timeout_sec=data.max_agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC,
        verifier_timeout_sec=data.max_test_timeout_sec or DEFAULT_TEST_TIMEOUT_SEC,
        build_timeout_sec=DEFAULT_BUILD_TIMEOUT_SEC,
        environment_dir=env["context"] if env["dockerfile"] is not None else None,
        dockerfile=env["dockerfile"],
        docker_image=env["image"],
        tests_dir=tests_dir if tests_dir.is_dir() else None,
        solution_dir=solution_dir,
        verifier_command=f"bash {TESTS_DIR}/run-tests.sh",
        verifier_env={"TEST_DIR": TESTS_DIR},
        env={k: v for k, v in env["env"].items() if k != "TEST_DIR"},
        network="public",
        metadata=metadata,
        grading=GRADING,
        grading_options={"parser": parser, "script_path": str(run_tests)},
        unsupported=unsupported,
        compose_file=env["compose_file"],
        compose_service=env["service"],
    )
