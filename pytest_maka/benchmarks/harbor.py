"""Harbor task layout (also Terminal-Bench 2): our native task format.

task.toml  instruction.md  environment/{Dockerfile | docker-compose.yaml, workspace/}  tests/test.sh
solution/solve.sh  [steps/<name>/{instruction.md, tests/, solution/, workdir/[setup.sh]}]
[.harborignore]: files it names are left out of every upload (and of the task's digest).
"""

from __future__ import annotations

import glob
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..core import compose_file, inputs
from ..core.errors import TaskError
from ..core.task import CollectHook, Task, TaskPackage, Tpu, check_workdir, digest_tree, task_id_for
from . import detect, harbor_parts, harbor_toml, ignore, lenient
from .cache import materialize
from .fields import Problems, Text, source_options
from .host_env import HostEnv

FORMAT = "harbor"


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


class HarborOptions(BaseModel):
    """The adapter options of a harbor source (keys beside path/include/...)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    #: How a reward.json with several keys and no ``reward`` key passes (verifiers/reward.py).
    reward_rule: Literal["all", "mean", "key"] = "all"
    reward_threshold: float = Field(default=1.0, allow_inf_nan=False)
    reward_key: Text | None = None

    @model_validator(mode="after")
    def _key_given(self) -> HarborOptions:
        if (self.reward_rule == "key") != (self.reward_key is not None):
            raise ValueError("reward_key is required with reward_rule: key, and only then")
        return self

    def grading(self) -> dict[str, Any]:
        return {"rule": self.reward_rule, "threshold": self.reward_threshold, "key": self.reward_key}


def parse_options(raw: dict[str, Any], spec_path: Path) -> HarborOptions:
    return source_options(HarborOptions, raw, spec_path, FORMAT)  # type: ignore[no-any-return]


def discover(path: Path, options: HarborOptions | None = None) -> list[Task]:
    """One task dir, or a directory whose non-hidden subdirectories are all task dirs.

    A task dir whose files are invalid becomes a Task marked ``invalid`` (its cells are
    skipped with that one line, or the run stops under ``--maka-strict``); the others load.
    """
    tasks = []
    for child in detect.task_dirs(path):
        if not is_task_dir(child):
            tasks.append(detect.wrong_dir(child, FORMAT))
            continue
        try:
            tasks.append(load_task(child, options))
        except TaskError as e:
            tasks.append(detect.invalid_task(child, str(e), FORMAT))
    return tasks


def _host_gpus() -> int:
    return len(glob.glob("/dev/nvidia[0-9]*"))


def _unsupported(spec: harbor_toml.TaskToml) -> str | None:
    """What no executor here can give the task (executor-specific features are Task.features)."""
    env = spec.environment
    if env.os != "linux":
        return f"{env.os} environments (environment.os = {env.os!r}) are not supported"
    if env.tpu is not None:
        return "TPU environments (environment.tpu) are not supported"
    if env.gpus and _host_gpus() < env.gpus:
        return f"the task needs {env.gpus} GPU(s) (environment.gpus) and this machine has {_host_gpus()}"
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


def _compose_main(compose: Path) -> compose_file.MainService:
    """The compose file's main service over Harbor's base, read with stand-ins for its variables."""
    check = compose_file.harbor_variables(compose.parent, Path("/nonexistent/logs"), image="maka-check")
    return compose_file.harbor_main(compose, check)


def _instruction(path: Path) -> str:
    instruction_path = path / "instruction.md"
    if not instruction_path.is_file():
        raise TaskError(path, "instruction.md", "missing: every task needs an instruction")
    return inputs.read_text(instruction_path, what="instruction", error=TaskError)


def _has_verifier(path: Path, tests_dir: Path) -> None:
    if not (tests_dir / "test.sh").is_file():
        raise TaskError(
            path, "tests/test.sh", "missing: the hidden verifier is required (a task with no verifier cannot pass)"
        )


def load_task(path: Path, options: HarborOptions | None = None) -> Task:
    """Parse and validate one Harbor task directory (a TaskError names every problem it has)."""
    path = path.resolve()
    options = options or HarborOptions()
    toml_path = path / "task.toml"
    problems = Problems()
    raw = problems.check(lambda: inputs.read_toml(toml_path, what="task.toml", error=TaskError))
    parsed = problems.check(lambda: harbor_toml.parse(raw, toml_path)) if raw is not None else None
    root = _filtered_root(path)
    compose = harbor_parts.compose_file(root / "environment")
    main = problems.check(lambda: _compose_main(compose)) if compose is not None else None
    if parsed is None:  # the files a task needs whatever its task.toml says
        declares_steps = isinstance(raw, dict) and "steps" in raw
        if not declares_steps:
            problems.check(lambda: _instruction(path))
            problems.check(lambda: _has_verifier(path, root / "tests"))
        problems.raise_any()
    assert parsed is not None
    spec, unknown = parsed
    agent, verifier, env = spec.agent, spec.verifier, spec.environment
    workdir = env.workdir
    if main is not None and main.working_dir and "workdir" not in env.model_fields_set:
        try:  # the main service's, when the task sets none
            workdir = check_workdir(main.working_dir)
        except ValueError as exc:
            problems.found.append(str(TaskError(compose, "services.main.working_dir", str(exc))))
    host = HostEnv(os.environ)  # ${VAR} in the env tables, filled as Harbor fills them
    steps = problems.check(lambda: harbor_parts.steps(spec, root, toml_path, workdir, host)) or ()
    verifier_env = None
    if not spec.steps:  # per step otherwise
        verifier_env = problems.check(lambda: harbor_parts.verifier_environment(spec, root, toml_path))
    tests_dir = root / "tests"
    bundled = verifier_env is not None and verifier_env.bundled_tests
    if spec.steps:  # the first step's (its problems are the steps' own)
        instruction = steps[0].instruction if steps else None
    else:
        instruction = problems.check(lambda: _instruction(path))
    separate_unbuilt = spec.verifier.mode == "separate" and verifier_env is None
    if env.os == "linux" and not spec.steps and not bundled and not separate_unbuilt:  # Windows: test.bat, skipped
        problems.check(lambda: _has_verifier(path, tests_dir))
    problems.raise_any()
    assert instruction is not None
    solution_dir = root / "solution"
    environment_dir = root / "environment"
    env_network = harbor_parts.env_network(env)
    agent_network = harbor_toml.network(agent.network_mode, agent.allow_internet) or env_network
    verifier_network = harbor_toml.network(verifier.network_mode, None) or env_network
    agent_hosts = agent.allowed_hosts if agent.network_mode is not None else env.allowed_hosts
    verifier_hosts = verifier.allowed_hosts if verifier.network_mode is not None else env.allowed_hosts
    metadata = dict(spec.metadata)
    if spec.task is not None:
        metadata["task"] = spec.task.model_dump(mode="json")
    if spec.source is not None:
        metadata["source"] = spec.source
    metadata.update(lenient.Leniency(unknown).metadata())
    meaning = lenient.meaning(unknown, [s.name for s in spec.steps or []])
    package = spec.task
    if verifier_env is not None and verifier_env.env:
        verifier_env = replace(verifier_env, env=host.fill("verifier.environment.env", verifier_env.env))
    env_vars, verifier_vars = host.fill("environment.env", env.env), host.fill("verifier.env", verifier.env)
    agent_vars, solution_vars = host.fill("agent.env", agent.env), host.fill("solution.env", spec.solution.env)
    return Task(
        id=task_id_for(path.name),
        path=path,
        instruction=instruction,
        digest=digest_tree(root, extra=FORMAT),
        format=FORMAT,
        workdir=workdir,
        agent_timeout_sec=agent.timeout_sec,
        verifier_timeout_sec=verifier.timeout_sec,
        build_timeout_sec=env.build_timeout_sec,
        cpus=env.cpus,
        memory_mb=harbor_toml.memory_mb(env, toml_path),
        storage_mb=harbor_toml.storage_mb(env, toml_path),
        environment_dir=environment_dir if environment_dir.is_dir() else None,
        workspace_dir=(environment_dir / "workspace") if (environment_dir / "workspace").is_dir() else None,
        dockerfile=(environment_dir / "Dockerfile") if (environment_dir / "Dockerfile").is_file() else None,
        docker_image=env.docker_image,
        tests_dir=tests_dir if tests_dir.is_dir() else None,
        solution_dir=solution_dir if (solution_dir / "solve.sh").is_file() else None,
        verifier_env=verifier_vars,
        env=env_vars,
        network=agent_network,
        metadata=metadata,
        grading_options={"multi_reward": options.grading()},
        unsupported=meaning or _unsupported(spec) or host.problem() or (main.unsupported if main is not None else None),
        schema_version=spec.schema_version or spec.version,
        package=TaskPackage(
            name=package.name,
            version=package.version,
            description=package.description,
            authors=tuple((a.name, a.email) for a in package.authors),
            keywords=tuple(package.keywords),
        )
        if package is not None
        else None,
        source=spec.source,
        os=env.os,
        gpus=env.gpus or 0,
        gpu_types=tuple(env.gpu_types or ()),
        tpu=Tpu(type=env.tpu.type, topology=env.tpu.topology) if env.tpu else None,
        healthcheck=harbor_parts.healthcheck(env.healthcheck),
        agent_user=agent.user,
        verifier_user=verifier.user,
        agent_env=agent_vars,
        solution_env=solution_vars,
        host_values=tuple(host.values),
        verifier_network=verifier_network,
        verifier_allowed_hosts=tuple(verifier_hosts or ()),
        agent_allowed_hosts=tuple(agent_hosts or ()),
        artifacts=harbor_parts.artifacts(spec.artifacts, workdir),
        verifier_environment=verifier_env,
        verifier_collect=tuple(
            CollectHook(command=c.command, service=c.service, timeout_sec=c.timeout_sec, user=c.user)
            for c in verifier.collect
        ),
        compose_file=compose,
        steps=steps,
        multi_step_reward_strategy=spec.multi_step_reward_strategy or "mean",
        mcp_servers=harbor_parts.mcp_servers(env.mcp_servers),
        skills_dir=env.skills_dir,
    )
