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
