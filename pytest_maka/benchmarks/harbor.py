"""Harbor task layout (also Terminal-Bench 2): our native task format.

task.toml  instruction.md  environment/{Dockerfile, workspace/}  tests/test.sh  solution/solve.sh
[.harborignore]: files it names are left out of every upload (and of the task's digest).
"""

from __future__ import annotations

from pathlib import Path

from ..core import inputs
from ..core.errors import TaskError
from ..core.task import Task, digest_tree
from . import detect, harbor_toml, ignore
from .cache import materialize
from .harbor_toml import AgentSection, EnvironmentSection, VerifierSection

FORMAT = "harbor"


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


def _unsupported(path: Path, verifier: VerifierSection, env: EnvironmentSection, agent: AgentSection) -> str | None:
    if (path / "steps").is_dir():
        return "multi-step tasks (steps/) are not supported yet"
    if (path / "environment" / "docker-compose.yaml").is_file() or (
        path / "environment" / "docker-compose.yml"
    ).is_file():
        return "multi-container (docker-compose) environments are not supported yet"
    if verifier.environment_mode == "separate":
        return "a separate verifier environment is not supported yet"
    if env.gpus:
        return "GPU environments (environment.gpus) are not supported yet"
    for section, table in (("agent", agent), ("verifier", verifier)):
        if table.user not in (None, "root", 0):
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
    spec = harbor_toml.parse(inputs.read_toml(toml_path, what="task.toml", error=TaskError), toml_path)
    agent, verifier, env = spec.agent, spec.verifier, spec.environment

    root = _filtered_root(path)
    instruction_path = path / "instruction.md"
    if not instruction_path.is_file():
        raise TaskError(path, "instruction.md", "missing: every task needs an instruction")
    instruction = inputs.read_text(instruction_path, what="instruction", error=TaskError)
    tests_dir = root / "tests"
    if not (tests_dir / "test.sh").is_file():
        raise TaskError(
            path, "tests/test.sh", "missing: the hidden verifier is required (a task with no verifier cannot pass)"
        )
    solution_dir = root / "solution"
    environment_dir = root / "environment"
    env_network = harbor_toml.network(env.network_mode, env.allow_internet) or "public"
    return Task(
        id=path.name,
        path=path,
        instruction=instruction,
        digest=digest_tree(root, extra=FORMAT),
        format=FORMAT,
        workdir=env.workdir,
        agent_timeout_sec=agent.timeout_sec,
        verifier_timeout_sec=verifier.timeout_sec,
        build_timeout_sec=env.build_timeout_sec,
        cpus=env.cpus,
        memory_mb=harbor_toml.memory_mb(env, toml_path),
        storage_mb=env.storage_mb,
        environment_dir=environment_dir if environment_dir.is_dir() else None,
        workspace_dir=(environment_dir / "workspace") if (environment_dir / "workspace").is_dir() else None,
        dockerfile=(environment_dir / "Dockerfile") if (environment_dir / "Dockerfile").is_file() else None,
        docker_image=env.docker_image,
        tests_dir=tests_dir,
        solution_dir=solution_dir if (solution_dir / "solve.sh").is_file() else None,
        verifier_env=dict(verifier.env),
        env=dict(env.env),
        network=harbor_toml.network(agent.network_mode, agent.allow_internet) or env_network,
        metadata=dict(spec.metadata),
        grading_options={
            # What the verifier phase declares (it shares the environment); granted only by policy.
            "network": env_network,
            "allowed_hosts": list(agent.allowed_hosts if agent.allowed_hosts is not None else env.allowed_hosts or []),
        },
        unsupported=_unsupported(path, verifier, env, agent),
    )
