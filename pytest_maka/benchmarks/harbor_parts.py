"""The structured parts of a Harbor task: steps, separate verifier environments, artifacts, MCP.

Harbor 0.25's resolution rules, written as our own: a step's verifier mode beats the task's;
a separate verifier's image is, in order, the step's ``[steps.verifier.environment]
docker_image``, a ``Dockerfile`` in the step's ``tests/``, the task's ``[verifier.environment]
docker_image``, a ``Dockerfile`` in ``tests/``, else the task's own environment.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from dataclasses import replace
from pathlib import Path

from ..core import inputs
from ..core.errors import TaskError
from ..core.network import DeclaredNetwork
from ..core.task import Artifact, Healthcheck, McpServer, Step, VerifierEnvironment, digest_tree
from .cache import materialize
from .harbor_toml import (
    ArtifactSection,
    EnvironmentSection,
    HealthcheckSection,
    McpServerSection,
    StepSection,
    TaskToml,
    VerifierSection,
    memory_mb,
    network,
    storage_mb,
)
from .host_env import HostEnv

#: Harbor reads only this name (a docker-compose.yml in environment/ is task material, not its definition).
COMPOSE_NAMES = ("docker-compose.yaml",)


def compose_file(directory: Path) -> Path | None:
    return next((directory / n for n in COMPOSE_NAMES if (directory / n).is_file()), None)


def healthcheck(section: HealthcheckSection | None) -> Healthcheck | None:
    if section is None:
        return None
    return Healthcheck(**section.model_dump(include=set(type(section).model_fields)))


def artifacts(entries: list[ArtifactSection], workdir: str) -> tuple[Artifact, ...]:
    """Each entry with an absolute source (a relative one lies under the workdir)."""
    out = []
    for section in entries:
        source = section.source if section.source.startswith("/") else posixpath.join(workdir, section.source)
        out.append(
            Artifact(
                source=posixpath.normpath(source),
                destination=section.destination,
                exclude=tuple(section.exclude),
                service=None if section.service in (None, "main") else section.service,
            )
        )
    return tuple(out)


def mcp_servers(sections: list[McpServerSection]) -> tuple[McpServer, ...]:
    return tuple(
        McpServer(
            name=s.name,
            transport="streamable-http" if s.transport == "http" else s.transport,
            url=s.url,
            command=s.command,
            args=tuple(s.args),
            headers=dict(s.headers),
        )
        for s in sections
    )


def env_network(env: EnvironmentSection) -> DeclaredNetwork:
    return network(env.network_mode, env.allow_internet) or "public"


def verifier_environment(
    spec: TaskToml, root: Path, file: Path, step: StepSection | None = None, step_tests: Path | None = None
) -> VerifierEnvironment | None:
    """The separate environment the verifier of the task (or of ``step``) runs in; None: shared."""
    mode = (step.verifier.mode if step else None) or spec.verifier.mode or "shared"
    if mode != "separate":
        return None
    own = (step.verifier.environment if step else None) or spec.verifier.environment
    config = own or spec.environment
    prefix = "verifier.environment" if own else "environment"
    candidates: list[tuple[VerifierSection, Path]] = []
    if step is not None and step_tests is not None:
        candidates.append((step.verifier, step_tests))
    candidates.append((spec.verifier, root / "tests"))
    context: Path | None = None
    image: str | None = None
    bundled = True
    for verifier, directory in candidates:
        if verifier.environment is not None and verifier.environment.docker_image:
            image = verifier.environment.docker_image
            break
        if (directory / "Dockerfile").is_file():
            context = directory
            break
    else:
        bundled = False
        image = spec.environment.docker_image
        environment_dir = root / "environment"
        context = environment_dir if (environment_dir / "Dockerfile").is_file() else None
    if image is None and context is None:
        raise TaskError(file, "verifier.environment_mode", "separate: no image (docker_image) and no Dockerfile")
    return VerifierEnvironment(
        build_context=context if image is None else None,
        dockerfile=(context / "Dockerfile") if context is not None and image is None else None,
        docker_image=image,
        bundled_tests=bundled,
        workdir=config.workdir,
        env=dict(config.env),
        cpus=config.cpus,
        memory_mb=memory_mb(config, file, prefix),
        storage_mb=storage_mb(config, file, prefix),
        build_timeout_sec=config.build_timeout_sec,
        network=env_network(config),
        allowed_hosts=tuple(config.allowed_hosts or ()),
    )


def _merged_tests(top: Path, own: Path | None) -> Path:
    """The step's tests with the task's top-level ``tests/`` under them (the step's files win)."""
    if own is None or not own.is_dir():
        return top
    if not top.is_dir():
        return own

    def build(dest: Path) -> None:
        shutil.copytree(top, dest, symlinks=True, dirs_exist_ok=True)
        shutil.copytree(own, dest, symlinks=True, dirs_exist_ok=True)

    key = digest_tree(top, extra="harbor-step-tests/1") + digest_tree(own)[:32]
    return materialize("harbor-step-tests", key, build)


def _inside(root: Path, step_dir: Path, names: tuple[str, ...]) -> None:
    """A step's inputs are the task's own files: none of them may be a link out of the task."""
    base = root.resolve()
    for path in (step_dir, *(step_dir / n for n in names)):
        if os.path.lexists(path) and not path.resolve().is_relative_to(base):
            raise TaskError(path, None, "a step's inputs must stay inside the task directory (a symlink leads out)")


def steps(spec: TaskToml, root: Path, file: Path, workdir: str, host: HostEnv) -> tuple[Step, ...]:
    """Every ``[[steps]]`` entry with its directory ``steps/<name>/`` read and checked; ``${VAR}``
    in its verifier's env tables filled from ``host`` (Harbor merges the task's and the step's)."""
    task_verifier_env = host.fill("verifier.env", spec.verifier.env)
    out = []
    for i, section in enumerate(spec.steps or []):
        where = f"steps[{i}]"
        step_dir = root / "steps" / section.name
        if not step_dir.is_dir():
            raise TaskError(file, f"{where}.name", f"no directory steps/{section.name}/ for this step")
        _inside(root, step_dir, ("instruction.md", "tests", "solution", "workdir"))
        instruction_path = step_dir / "instruction.md"
        if not instruction_path.is_file():
            raise TaskError(step_dir, "instruction.md", "missing: every step needs an instruction")
        own_tests = step_dir / "tests"
        verifier_env = verifier_environment(spec, root, file, section, own_tests)
        if verifier_env is not None and verifier_env.env:
            own = section.verifier.environment is not None
            table = f"{where}.verifier.environment.env" if own else _shared_env_table(spec)
            verifier_env = replace(verifier_env, env=host.fill(table, verifier_env.env))
        tests = _merged_tests(root / "tests", own_tests)
        linux = spec.environment.os == "linux"  # a Windows task's verifier is test.bat: skipped as unsupported
        if linux and not (tests / "test.sh").is_file() and not (verifier_env and verifier_env.bundled_tests):
            raise TaskError(step_dir, "tests/test.sh", "missing: neither the step nor the task has a test.sh")
        solution = step_dir / "solution"
        workdir_dir = step_dir / "workdir"
        agent, verifier = section.agent, section.verifier
        agent_timeout = agent.timeout_sec if "timeout_sec" in agent.model_fields_set else spec.agent.timeout_sec
        out.append(
            Step(
                name=section.name,
                instruction=inputs.read_text(instruction_path, what="instruction", error=TaskError),
                tests_dir=tests,
                solution_dir=solution if (solution / "solve.sh").is_file() else None,
                workdir_dir=workdir_dir if workdir_dir.is_dir() else None,
                setup_script=(workdir_dir / "setup.sh") if (workdir_dir / "setup.sh").is_file() else None,
                agent_timeout_sec=agent_timeout,
                verifier_timeout_sec=(
                    verifier.timeout_sec if "timeout_sec" in verifier.model_fields_set else spec.verifier.timeout_sec
                ),
                agent_user=agent.user if agent.user is not None else spec.agent.user,
                verifier_user=verifier.user if verifier.user is not None else spec.verifier.user,
                verifier_env={**task_verifier_env, **host.fill(f"{where}.verifier.env", verifier.env)},
                healthcheck=healthcheck(section.healthcheck),
                min_reward=section.min_reward,
                artifacts=artifacts(section.artifacts, workdir),
                verifier_environment=verifier_env,
                agent_network=network(agent.network_mode, agent.allow_internet),
                verifier_network=network(verifier.network_mode, None),
                agent_allowed_hosts=tuple(agent.allowed_hosts or ()) if agent.network_mode else (),
                verifier_allowed_hosts=tuple(verifier.allowed_hosts or ()) if verifier.network_mode else (),
            )
        )
    return tuple(out)


def _shared_env_table(spec: TaskToml) -> str:
    """The table a step's verifier environment takes its env from when it declares none of its own."""
    return "verifier.environment.env" if spec.verifier.environment is not None else "environment.env"
