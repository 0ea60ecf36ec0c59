"""The pure rules of multi-step tasks: early stop, the cell's score and pass rule, the step view."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_maka.core.steps import (
    StepOutcome,
    cell_verdict,
    min_reward_failure,
    step_task,
    step_views,
    stop_reason,
)
from pytest_maka.core.task import Artifact, Step, Task
from pytest_maka.core.taxonomy import Status

OK, FAIL, INCOMPLETE = Status.AGENT_SUCCESS, Status.AGENT_FAILURE, Status.AGENT_INCOMPLETE


def passed(name: str, **rewards: float) -> StepOutcome:
    return StepOutcome(name, OK, passed=True, score=1.0, rewards=rewards or {"reward": 1.0})


def failed(name: str, score: float = 0.0, status: Status = FAIL, **rewards: float) -> StepOutcome:
    return StepOutcome(name, status, passed=False, score=score, rewards=rewards or {"reward": score})


def test_min_reward_scalar_gates_the_reward_key_and_a_missing_key_is_below_any_threshold() -> None:
    assert min_reward_failure({"reward": 1.0}, 1.0) is None
    assert min_reward_failure({"reward": 0.5}, 0.5) is None
    assert min_reward_failure({"reward": 0.4}, 0.5) == "reward = 0.4, below min_reward 0.5"
    assert min_reward_failure({"other": 1.0}, 0.0) == "reward = missing, below min_reward 0"
    assert min_reward_failure(None, 0.0) == "reward = missing, below min_reward 0"
    assert min_reward_failure({"reward": 0.0}, None) is None


def test_min_reward_mapping_gates_every_key_named() -> None:
    gates = {"correctness": 0.8, "style": 0.5}
    assert min_reward_failure({"correctness": 0.9, "style": 0.5, "reward": 0.0}, gates) is None
    assert min_reward_failure({"correctness": 0.9, "style": 0.4}, gates) == "style = 0.4, below min_reward 0.5"
    assert min_reward_failure({"correctness": 0.9}, gates) == "style = missing, below min_reward 0.5"


def test_stop_reason_non_official_steps_always_stop_official_ones_only_by_min_reward() -> None:
    assert stop_reason(failed("a"), None) is None  # a failed step without a gate: the next one runs
    assert stop_reason(failed("a"), 1.0) == "step 'a': reward = 0, below min_reward 1"
    assert stop_reason(passed("a"), 1.0) is None
    for status in (Status.INFRA_FAILURE, Status.VERIFIER_FAILURE, Status.BUDGET_EXHAUSTED, Status.AGENT_ABORTED):
        assert stop_reason(StepOutcome("a", status), None) == f"step 'a' ended {status.value}"
    # No verdict (a refused step scores nothing): below any gate, whatever rewards it carries.
    assert stop_reason(StepOutcome("a", FAIL, passed=None, rewards={"reward": 1.0}), 0.0) is not None


def test_mean_passes_only_when_every_step_ran_and_passed() -> None:
    v = cell_verdict([passed("a"), passed("b")], 2, "mean")
    assert (v.passed, v.score, v.rewards, v.decisive, v.reason) == (True, 1.0, {"reward": 1.0}, 1, None)
    v = cell_verdict([passed("a"), failed("b", 0.5)], 2, "mean")
    assert (v.passed, v.score, v.rewards, v.decisive) == (False, 0.75, {"reward": 0.75}, 1)
    assert v.reason == "step 2 of 2 ('b') failed"
    v = cell_verdict([failed("a"), passed("b")], 2, "mean")
    assert (v.passed, v.score, v.decisive) == (False, 0.5, 0)


def test_mean_over_steps_with_a_verdict_missing_keys_count_zero() -> None:
    a = StepOutcome("a", OK, passed=True, score=1.0, rewards={"x": 1.0, "y": 1.0})
    b = StepOutcome("b", FAIL, passed=False, score=0.5, rewards={"x": 1.0})
    no_verdict = StepOutcome("c", FAIL)  # excluded from the denominator (Harbor's rule) but fails the cell
    v = cell_verdict([a, b, no_verdict], 3, "mean")
    assert v.rewards == {"x": 1.0, "y": 0.5}
    assert v.score == 0.75
    assert v.passed is False and v.decisive == 1


def test_a_stopped_run_never_passes_whatever_the_strategy() -> None:
    for strategy in ("mean", "final"):
        v = cell_verdict([passed("a")], 3, strategy)
        assert v.passed is False
        assert v.reason == "step 1 of 3 ('a') passed; 2 step(s) not run"


def test_final_takes_the_last_step_that_ran_as_it_is() -> None:
    v = cell_verdict([failed("a"), passed("b", reward=1.0, extra=0.5)], 2, "final")
    assert (v.passed, v.score, v.rewards, v.decisive) == (True, 1.0, {"reward": 1.0, "extra": 0.5}, 1)
    v = cell_verdict([passed("a"), failed("b", 0.25, status=INCOMPLETE)], 2, "final")
    assert (v.passed, v.score, v.decisive) == (False, 0.25, 1)
    v = cell_verdict([passed("a"), StepOutcome("b", FAIL)], 2, "final")  # the last step has no verdict
    assert (v.passed, v.score, v.rewards) == (False, None, {})
    assert v.reason == "step 2 of 2 ('b') no verdict"


def test_cell_verdict_refuses_what_it_cannot_score() -> None:
    with pytest.raises(ValueError, match="at least one step"):
        cell_verdict([], 2)
    with pytest.raises(ValueError, match="multi_step_reward_strategy 'max'"):
        cell_verdict([passed("a")], 1, "max")


def _task(tmp_path: Path) -> Task:
    steps = (
        Step(name="one", instruction="do one", tests_dir=tmp_path / "t1", solution_dir=tmp_path / "s1"),
        Step(
            name="two",
            instruction="do two",
            tests_dir=tmp_path / "t2",
            agent_timeout_sec=5.0,
            verifier_timeout_sec=7.0,
            verifier_env={"K": "v"},
            artifacts=(Artifact(source="/app/two.txt"),),
        ),
    )
    return Task(
        id="multi",
        path=tmp_path,
        instruction="do one",
        digest="d",
        solution_dir=tmp_path / "solution",
        artifacts=(Artifact(source="/app/all.txt"),),
        steps=steps,
    )


def test_step_view_is_a_single_step_task_with_the_step_s_parts(tmp_path: Path) -> None:
    task = _task(tmp_path)
    one, two = step_views(task)
    assert one.instruction == "do one" and one.tests_dir == tmp_path / "t1" and one.solution_dir == tmp_path / "s1"
    assert two.instruction == "do two" and two.tests_dir == tmp_path / "t2"
    assert two.solution_dir == tmp_path / "solution", "a step without a solution falls back to the task's"
    assert (two.agent_timeout_sec, two.verifier_timeout_sec, two.verifier_env) == (5.0, 7.0, {"K": "v"})
    assert [a.source for a in two.artifacts] == ["/app/all.txt", "/app/two.txt"]
    assert one.steps == () and two.steps == () and "multi-step" not in two.features
    assert two.digest == task.digest and two.id == task.id, "the view is the same cell's task"
    assert step_views(one) == (one,)
    assert step_task(task, task.steps[0]) == one
