"""Harbor 0.25 task.toml: every key accepted, strictly, into typed task fields (no engine needed).

Fixtures in tests/fixtures/harbor (origin in ORIGIN.md): tasks written by Harbor 0.25's own
`harbor tasks init`, and task.toml files of public Harbor-format repositories.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from pytest_maka.benchmarks import harbor, lenient
from pytest_maka.core.errors import TaskError
from pytest_maka.core.task import Artifact, Healthcheck, McpServer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "harbor"


def task_dir(tmp_path: Path, toml: str, *, name: str = "t", tests: bool = True) -> Path:
    root = tmp_path / name
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "instruction.md").write_text("Do it.")
    if tests:
        (root / "tests").mkdir()
        (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "task.toml").write_text(textwrap.dedent(toml))
    return root


def test_tasks_written_by_harbor_tasks_init_load(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "init", tmp_path / "init")
    tasks = {t.id: t for t in harbor.discover(tmp_path / "init")}
    assert all(t.invalid is None for t in tasks.values()), [t.invalid for t in tasks.values()]
    separate = tasks["init-separate"]
    assert separate.schema_version == "1.4"
    assert separate.package is not None and separate.package.name == "maka/init-separate"
    assert separate.package.authors == (("Maka Test", "maka@example.invalid"),)
    assert separate.metadata["task"]["description"] == "made by harbor tasks init"  # in every record's task_metadata
    env = separate.verifier_environment
    assert env is not None and env.bundled_tests and env.dockerfile == separate.path / "tests" / "Dockerfile"
    assert separate.features == {"separate-verifier"}
    shared = tasks["init-shared"]
    assert shared.verifier_environment is None and shared.features == frozenset()
    steps = tasks["init-steps"]
    assert [s.name for s in steps.steps] == ["step-1", "step-2"] and steps.features == {
        "multi-step",
        "separate-verifier",
    }
    assert steps.instruction == steps.steps[0].instruction
    for step in steps.steps:
        assert step.verifier_environment is not None and step.verifier_environment.build_context == step.tests_dir


def test_public_task_tomls_load(tmp_path: Path) -> None:
    relay = task_dir(tmp_path, (FIXTURES / "public" / "durable-relay-integrity.task.toml").read_text(), name="relay")
    task = harbor.load_task(relay)
    assert task.schema_version == "1.0" and task.package is not None
    assert task.package.keywords[:2] == ("go", "durability") and task.network == "public"
    compose = task_dir(
        tmp_path, (FIXTURES / "public" / "docker-compose-env-file-substitution-hard.task.toml").read_text()
    )
    (compose / "environment" / "docker-compose.yml").write_text("services: {web: {image: nginx}}\n")
    task = harbor.load_task(compose)
    assert task.compose_file is None and task.features == frozenset(), "Harbor reads only docker-compose.yaml"
    (compose / "environment" / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    assert harbor.load_task(compose).features == {"compose"}


FULL = """\
schema_version = "1.4"
source = "maka-fixtures"
artifacts = ["/app/out.json", {source = "results", destination = "r", exclude = ["*.tmp"]}]
multi_step_reward_strategy = "final"

[task]
name = "maka/full"
version = "2.0.0"
description = "every key"
authors = [{name = "A", email = "a@example.invalid"}]
keywords = ["k"]

[metadata]
anything = {goes = true}

[agent]
timeout_sec = 30
user = "agent"
network_mode = "allowlist"
allowed_hosts = ["api.example.com"]

[verifier]
timeout_sec = 40
user = 1000
env = {A = "1"}
environment_mode = "separate"
network_mode = "no-network"

[[verifier.collect]]
command = "dump-state > /app/state.json"
timeout_sec = 5

[verifier.environment]
docker_image = "python:3.11-slim"
workdir = "/srv"
memory = "1G"

[environment]
build_timeout_sec = 100
os = "Linux"
cpus = 2
memory_mb = 512
storage = "2G"
gpus = 0
gpu_types = ["H100"]
env = {B = "2"}
skills_dir = "/skills"
workdir = "/app"
network_mode = "public"

[environment.healthcheck]
command = "curl -f localhost:8000"
interval_sec = 1
start_period_sec = 0
retries = 5

[[environment.mcp_servers]]
name = "files"
transport = "stdio"
command = "mcp-files"
args = ["--root", "/app"]

[[environment.mcp_servers]]
name = "web"
transport = "http"
url = "http://localhost:9000/mcp"

[solution]
env = {C = "3"}
"""


def test_every_harbor_key_lands_in_a_typed_field(tmp_path: Path) -> None:
    task = harbor.load_task(task_dir(tmp_path, FULL))
    assert (task.schema_version, task.source, task.os) == ("1.4", "maka-fixtures", "linux")
    assert task.artifacts == (
        Artifact(source="/app/out.json"),
        Artifact(source="/app/results", destination="r", exclude=("*.tmp",)),
    )
    assert task.multi_step_reward_strategy == "final" and task.metadata["anything"] == {"goes": True}
    assert (task.agent_user, task.verifier_user, task.agent_timeout_sec, task.verifier_timeout_sec) == (
        "agent",
        1000,
        30,
        40,
    )
    assert (task.network, task.agent_allowed_hosts) == ("allowlist", ("api.example.com",))
    assert task.verifier_declared == "none" and "network" not in task.grading_options
    assert (
        task.verifier_collect[0].command == "dump-state > /app/state.json"
        and task.verifier_collect[0].service == "main"
    )
    env = task.verifier_environment
    assert env is not None and (env.docker_image, env.workdir, env.memory_mb, env.bundled_tests) == (
        "python:3.11-slim",
        "/srv",
        1024,
        True,
    )
    assert (task.cpus, task.memory_mb, task.storage_mb, task.gpus, task.gpu_types) == (2, 512, 2048, 0, ("H100",))
    assert task.healthcheck == Healthcheck(command="curl -f localhost:8000", interval_sec=1, retries=5)
    assert task.mcp_servers == (
        McpServer(name="files", transport="stdio", command="mcp-files", args=("--root", "/app")),
        McpServer(name="web", transport="streamable-http", url="http://localhost:9000/mcp"),
    )
    assert (task.skills_dir, task.env, task.solution_env, task.verifier_env) == (
        "/skills",
        {"B": "2"},
        {"C": "3"},
        {"A": "1"},
    )
    assert task.features == {"separate-verifier", "users", "healthcheck"}
    assert task.unsupported is None


@pytest.mark.parametrize(
    ("change", "path", "hint"),
    [
        (("timeout_sec = 30", "timeout_secs = 30"), "agent.timeout_secs", "timeout_sec"),
        (("memory_mb = 512", "memroy_mb = 512"), "environment.memroy_mb", "memory_mb"),
        (("retries = 5", "retry = 5"), "environment.healthcheck.retry", None),
        (('keywords = ["k"]', 'tags = ["k"]'), "task.tags", None),
        (('args = ["--root", "/app"]', "argv = []"), "environment.mcp_servers[0].argv", None),
        (("timeout_sec = 5", "timeout = 5"), "verifier.collect[0].timeout", None),
        (('workdir = "/srv"', 'wrkdir = "/srv"'), "verifier.environment.wrkdir", "workdir"),
        (('env = {C = "3"}', 'envs = {C = "3"}'), "solution.envs", "env"),
        (('exclude = ["*.tmp"]', 'excludes = ["*.tmp"]'), "artifacts[1].excludes", "exclude"),
        (('name = "maka/full"', 'name = "maka/full"\nformat = "harbor"'), "task.format", None),
    ],
)
def test_an_unknown_key_at_any_level_is_kept_and_named(
    tmp_path: Path, change: tuple[str, str], path: str, hint: str | None
) -> None:
    """Harbor's models ignore keys they do not declare, in every table: the task loads, the key
    is kept in its metadata and named (with a hint when one letter off a known key)."""
    assert change[0] in FULL
    task = harbor.load_task(task_dir(tmp_path, FULL.replace(*change, 1)))
    assert task.invalid is None and task.unsupported is None
    assert task.metadata["ignored_keys"] == [path]
    assert task.metadata.get("ignored_key_hints", {}).get(path) == hint
    assert path in task.metadata["ignored_values"]
    assert lenient.message(path, task.metadata.get("ignored_key_hints")).startswith(f"{path}: not used by pytest-maka")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("timeout_sec = 40", "timeout_sec = 0"), "verifier.timeout_sec: expected a number greater than 0 (got 0)"),
        (("timeout_sec = 30", "timeout_sec = -5"), "agent.timeout_sec: expected a number greater than 0 (got -5)"),
        (
            ("interval_sec = 1", "interval_sec = 0"),
            "environment.healthcheck.interval_sec: expected a number greater than 0",
        ),
        (
            ("start_period_sec = 0", "start_period_sec = -1"),
            "environment.healthcheck.start_period_sec: expected a number of at least 0",
        ),
        (
            ("build_timeout_sec = 100", "build_timeout_sec = -1"),
            "environment.build_timeout_sec: expected a number greater than 0",
        ),
        (('name = "maka/full"', 'name = "full"'), "task.name: expected a package name 'org/name'"),
        (
            ('multi_step_reward_strategy = "final"', 'multi_step_reward_strategy = "max"'),
            "multi_step_reward_strategy: Input should be 'mean' or 'final'",
        ),
        (
            ('network_mode = "public"', 'network_mode = "public"\nallowed_hosts = ["x.org"]'),
            'allowed_hosts is only valid with network_mode = "allowlist"',
        ),
        (
            ('environment_mode = "separate"', 'environment_mode = "shared"'),
            'environment_mode = "shared" cannot have a [verifier.environment]',
        ),
        (('transport = "stdio"', 'transport = "sse"'), "environment.mcp_servers[0]: transport 'sse' needs 'url'"),
        (('"/app/out.json"', '"../etc/passwd"'), "artifacts[0].source: expected a path without '..'"),
    ],
)
def test_strict_at_every_level(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    assert change[0] in FULL
    root = task_dir(tmp_path, FULL.replace(*change, 1))
    with pytest.raises(TaskError) as info:
        harbor.load_task(root)
    assert str(info.value).startswith(str(root / "task.toml") + ": "), str(info.value)
    assert expected in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_separate_verifier_resolution_follows_harbor(tmp_path: Path) -> None:
    root = task_dir(tmp_path, '[verifier]\nenvironment_mode = "separate"\n')
    env = harbor.load_task(root).verifier_environment
    assert (
        env is not None and not env.bundled_tests and env.build_context == root / "environment"
    )  # a copy of the task's
    (root / "tests" / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY . /tests/\n")
    env = harbor.load_task(root).verifier_environment
    assert env is not None and env.bundled_tests and env.build_context == root / "tests"
    (root / "task.toml").write_text('[verifier.environment]\ndocker_image = "verifier:1"\n')  # implies separate
    env = harbor.load_task(root).verifier_environment
    assert env is not None and env.docker_image == "verifier:1" and env.build_context is None


def test_bundled_tests_need_no_host_test_sh_but_a_shared_verifier_does(tmp_path: Path) -> None:
    root = task_dir(tmp_path, '[verifier.environment]\ndocker_image = "verifier:1"\n', tests=False)
    assert harbor.load_task(root).verifier_environment is not None
    (root / "task.toml").write_text("")
    with pytest.raises(TaskError, match=r"tests/test\.sh: missing"):
        harbor.load_task(root)


def test_an_invalid_task_is_one_placeholder_the_rest_load(tmp_path: Path) -> None:
    task_dir(tmp_path, "[agent]\ntimeout_sec = 10\n", name="good")
    task_dir(tmp_path, "[agent]\ntimeout_sec = 0\n", name="typo")
    tasks = {t.id: t for t in harbor.discover(tmp_path)}
    assert tasks["good"].invalid is None
    bad = tasks["typo"]
    assert bad.invalid is not None and bad.invalid.startswith(
        f"{tmp_path / 'typo' / 'task.toml'}: agent.timeout_sec: expected"
    )
    assert bad.unsupported == f"invalid task: {bad.invalid}"


@pytest.mark.parametrize("source", ["/tests/test.sh", "/logs/verifier/reward.txt", "/", "/solution"])
def test_an_artifact_cannot_carry_the_verifiers_own_paths(tmp_path: Path, source: str) -> None:
    """A separate verifier gets the artifacts at their paths: /tests or a reward file would be planted."""
    root = task_dir(tmp_path, f'artifacts = ["{source}"]\n')
    with pytest.raises(TaskError, match=r"artifacts\[0\]\.source: an artifact cannot be /"):
        harbor.load_task(root)


@pytest.mark.parametrize(("runtime", "skipped"), [("runsc", True), ("nvidia", True), ("runc", False)])
def test_a_container_runtime_is_honoured_only_when_it_is_the_default(
    tmp_path: Path, runtime: str, skipped: bool
) -> None:
    task = harbor.load_task(task_dir(tmp_path, f'[environment]\nruntime = "{runtime}"\n'))
    assert task.metadata["ignored_keys"] == ["environment.runtime"]
    if skipped:
        assert task.unsupported == (
            f"environment.runtime = '{runtime}': a container runtime other than the engine's default is not supported"
        )
    else:
        assert task.unsupported is None


def test_every_problem_of_a_task_is_named_not_the_first_of_them(tmp_path: Path) -> None:
    """A task with several problems names each (it was the first plus "(+N more problems)")."""
    root = task_dir(tmp_path, "[agent]\ntimeout_sec = 0\n[verifier]\ntimeout_sec = -1\n", tests=False)
    (root / "instruction.md").unlink()
    with pytest.raises(TaskError) as info:
        harbor.load_task(root)
    text = str(info.value)
    assert "more problem" not in text and "\n" not in text
    for part in (
        "agent.timeout_sec: expected a number greater than 0",
        "verifier.timeout_sec: expected a number greater than 0",
        f"{root}: instruction.md: missing",
        f"{root}: tests/test.sh: missing",
    ):
        assert part in text, text
    assert text.startswith(f"{root / 'task.toml'}: agent.timeout_sec"), text
    (root / "task.toml").write_text("[agent]\ntimeout_sec = 0\n")  # a bad file: the files are still checked
    with pytest.raises(TaskError) as again:
        harbor.load_task(root)
    text = str(again.value)
    assert "instruction.md: missing" in text and "tests/test.sh: missing" in text, text
