"""A step's declared networks and verifier environment in its view of the task, and the plan built from it."""

from __future__ import annotations

from pathlib import Path

from pytest_maka.benchmarks.harbor import load_task
from pytest_maka.core.spec import Policy
from pytest_maka.core.steps import step_views
from pytest_maka.egress.plan import build_plan

from ..steps_helpers import write_steps_task


def _task(tmp_path: Path, **top: str) -> Path:
    return write_steps_task(
        tmp_path,
        "nets",
        [
            {
                "name": "one",
                "agent_toml": ['network_mode = "allowlist"', 'allowed_hosts = ["api.example.com"]'],
                "verifier_toml": ['network_mode = "public"', 'environment_mode = "separate"'],
            },
            {"name": "two"},
        ],
        **top,
    )


def test_a_step_s_declared_networks_replace_the_task_s_and_an_undeclared_one_keeps_them(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path))
    one, two = step_views(task)
    assert (one.network, one.agent_allowed_hosts) == ("allowlist", ("api.example.com",))
    assert one.grading_options == task.grading_options and "allowed_hosts" not in one.grading_options
    assert one.verifier_network == one.verifier_declared == "public"
    assert (two.network, two.verifier_network, two.grading_options) == (
        task.network,
        task.verifier_network,
        task.grading_options,
    ), "a step that declares nothing is the task's"
    assert task.network == "none", "the task's environment declares no-network"
    assert one.verifier_environment is not None and not one.verifier_environment.bundled_tests
    assert two.verifier_environment is None


def test_the_plan_is_decided_per_step(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path))
    one, two = step_views(task)
    policy = Policy(agent_network=True, verifier_network=True, setup_egress=["deb.debian.org"])
    first, second = build_plan(one, policy), build_plan(two, policy)
    assert (first.agent.mode, [p.text for p in first.agent.allow]) == ("allowlist", ["api.example.com"])
    assert first.verifier.mode == "all"
    assert (second.agent.mode, second.verifier.mode) == ("none", "all")  # verifier_network grants; none is not honoured
    assert first.setup.mode == second.setup.mode == "allowlist", "the setup phase is the policy's, for every step"
    ungranted = build_plan(one, Policy())
    assert ungranted.agent.mode == "none" and ungranted.agent.not_granted == ("api.example.com",)
