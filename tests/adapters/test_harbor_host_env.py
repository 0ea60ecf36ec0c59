"""``${VAR}`` in a Harbor task's env tables, filled from the host as Harbor 0.25 fills them
(``harbor.utils.env.resolve_env_vars``); the run-level behaviour is in tests/plugin/test_harbor_cohort.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.benchmarks import harbor
from pytest_maka.benchmarks.host_env import HostEnv

from .test_harbor_toml import task_dir


def test_templates_are_filled_defaults_taken_and_literals_kept() -> None:
    host = HostEnv({"TOKEN": "abc-123", "EMPTY": ""})
    env = {"A": "${TOKEN}", "B": "${NOPE:-dflt}", "C": "${EMPTY:-x}", "D": "pre-${TOKEN}", "E": "${}"}
    assert host.fill("environment.env", env) == {"A": "abc-123", "B": "dflt", "C": "", "D": "pre-${TOKEN}", "E": "${}"}
    assert host.values == ["abc-123", ""] and host.problem() is None
    assert host.fill("agent.env", {"K": "${NOPE}"}) == {"K": "${NOPE}"}
    assert host.problem() == "agent.env.K = '${NOPE}': takes a variable the host environment does not set" + (
        " (set it, or give a default)"
    )


def test_a_separate_verifier_environments_env_is_filled_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAKA_T_VERIFIER_KEY", "v-key-99")
    root = task_dir(
        tmp_path,
        '[verifier]\nenvironment_mode = "separate"\n[verifier.environment.env]\nKEY = "${MAKA_T_VERIFIER_KEY}"\n',
    )
    task = harbor.load_task(root)
    assert task.verifier_environment is not None and task.verifier_environment.env == {"KEY": "v-key-99"}
    assert task.host_values == ("v-key-99",) and task.unsupported is None


def test_a_steps_verifier_env_tables_are_filled_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Harbor merges the task's ``[verifier.env]`` with the step's and fills both; so is a step's own
    separate verifier environment's env."""
    monkeypatch.setenv("MAKA_T_TASK", "task-val-1")
    monkeypatch.setenv("MAKA_T_STEP", "step-val-2")
    monkeypatch.setenv("MAKA_T_STEP_ENV", "step-env-3")
    root = task_dir(
        tmp_path,
        """\
        [verifier.env]
        TASK = "${MAKA_T_TASK}"
        BOTH = "task"
        [[steps]]
        name = "one"
        [steps.verifier.env]
        STEP = "${MAKA_T_STEP}"
        BOTH = "${MAKA_T_NOPE:-step}"
        [[steps]]
        name = "two"
        [steps.verifier]
        environment_mode = "separate"
        [steps.verifier.environment]
        docker_image = "debian:bookworm-slim"
        [steps.verifier.environment.env]
        KEY = "${MAKA_T_STEP_ENV}"
        """,
    )
    for name in ("one", "two"):
        (root / "steps" / name).mkdir(parents=True)
        (root / "steps" / name / "instruction.md").write_text(f"Step {name}.")
    task = harbor.load_task(root)
    assert task.unsupported is None and task.invalid is None, (task.unsupported, task.invalid)
    one, two = task.steps
    assert one.verifier_env == {"TASK": "task-val-1", "BOTH": "step", "STEP": "step-val-2"}
    assert two.verifier_env == {"TASK": "task-val-1", "BOTH": "task"}
    assert two.verifier_environment is not None and two.verifier_environment.env == {"KEY": "step-env-3"}
    assert {"task-val-1", "step-val-2", "step-env-3"} <= set(task.host_values)


def test_an_unset_variable_of_a_step_skips_the_task_naming_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAKA_T_UNSET", raising=False)
    root = task_dir(
        tmp_path,
        '[verifier.env]\nA = "${MAKA_T_UNSET}"\n[[steps]]\nname = "one"\n[steps.verifier.env]\nB = "${MAKA_T_UNSET}"\n'
        '[[steps]]\nname = "two"\n',
    )
    for name in ("one", "two"):
        (root / "steps" / name).mkdir(parents=True)
        (root / "steps" / name / "instruction.md").write_text(f"Step {name}.")
    task = harbor.load_task(root)
    assert task.unsupported == (
        "verifier.env.A = '${MAKA_T_UNSET}', steps[0].verifier.env.B = '${MAKA_T_UNSET}': takes a variable the "
        "host environment does not set (set it, or give a default)"
    )
