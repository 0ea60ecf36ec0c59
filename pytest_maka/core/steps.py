"""Multi-step tasks, the pure part: when the remaining steps stop, and the cell's score and verdict.

Harbor 0.25's rules, written as our own (docs/multi-step.md):

- ``min_reward`` gates the next steps on this step's rewards: a number gates the ``reward``
  key, a mapping gates each key named; a missing key, or a step without a verdict, is below
  any threshold. A step whose class is not official (infra, verifier, budget, policy,
  cancelled) ends the loop whatever its reward.
- The cell's rewards: ``mean`` averages each key over the steps that got a verdict (a key a
  step lacks counts 0); ``final`` takes the last step that ran, as it is.
- The cell passes only when every step ran and the strategy's steps passed: under ``mean``
  every step's verdict passed, under ``final`` the last step's did. A stopped run never passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .task import Step, Task
from .taxonomy import OFFICIAL, Status

MinReward = float | Mapping[str, float] | None


@dataclass(frozen=True)
class StepOutcome:
    """One step that ran: its class and its verdict (``passed`` None: no verdict)."""

    name: str
    status: Status
    passed: bool | None = None
    score: float | None = None
    rewards: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CellVerdict:
    """What the steps add up to. ``decisive`` indexes the step whose facts explain the class."""

    passed: bool
    score: float | None
    rewards: dict[str, float]
    decisive: int
    reason: str | None = None


def min_reward_failure(rewards: Mapping[str, float] | None, min_reward: MinReward) -> str | None:
    """Why ``rewards`` do not meet ``min_reward`` (one line), or None when they do."""
    if min_reward is None:
        return None
    gates = {"reward": float(min_reward)} if isinstance(min_reward, (int, float)) else dict(min_reward)
    for key, threshold in gates.items():
        actual = (rewards or {}).get(key, -math.inf)
        if actual < threshold:
            shown = "missing" if actual == -math.inf else f"{actual:g}"
            return f"{key} = {shown}, below min_reward {threshold:g}"
    return None


def stop_reason(outcome: StepOutcome, min_reward: MinReward) -> str | None:
    """Why no step after ``outcome`` runs, or None when the next one does."""
    if outcome.status not in OFFICIAL:
        return f"step {outcome.name!r} ended {outcome.status.value}"
    rewards = outcome.rewards if outcome.passed is not None else None
    failure = min_reward_failure(rewards, min_reward)
    return f"step {outcome.name!r}: {failure}" if failure else None


def mean_rewards(outcomes: Sequence[StepOutcome]) -> dict[str, float]:
    """Each key's mean over the steps with a verdict (a key a step lacks counts 0)."""
    verified = [o.rewards for o in outcomes if o.passed is not None]
    keys = sorted({k for rewards in verified for k in rewards})
    return {k: sum(r.get(k, 0.0) for r in verified) / len(verified) for k in keys}


def cell_verdict(outcomes: Sequence[StepOutcome], total: int, strategy: str = "mean") -> CellVerdict:
    """The cell's verdict from the steps that ran (in order) out of ``total`` declared."""
    if not outcomes:
        raise ValueError("a multi-step cell needs at least one step that ran")
    if strategy not in ("mean", "final"):
        raise ValueError(f"unknown multi_step_reward_strategy {strategy!r} (expected 'mean' or 'final')")
    last = len(outcomes) - 1
    complete = len(outcomes) == total
    if strategy == "final":
        final = outcomes[last]
        rewards = dict(final.rewards) if final.passed is not None else {}
        score = final.score if final.passed is not None else None
        passed = complete and final.passed is True
        decisive = last
    else:
        rewards = mean_rewards(outcomes)
        scores = [o.score for o in outcomes if o.passed is not None and o.score is not None]
        score = sum(scores) / len(scores) if scores else None
        failing = [i for i, o in enumerate(outcomes) if o.passed is not True]
        passed = complete and not failing
        decisive = failing[0] if failing else last
    reason = None
    if not passed:
        step = outcomes[decisive]
        verdict = {True: "passed", False: "failed", None: "no verdict"}[step.passed]
        reason = f"step {decisive + 1} of {total} ({step.name!r}) {verdict}"
        if not complete:
            reason += f"; {total - len(outcomes)} step(s) not run"
    return CellVerdict(passed=passed, score=score, rewards=rewards, decisive=decisive, reason=reason)


def step_task(task: Task, step: Step) -> Task:
    """The task as one step sees it: that step's instruction, tests, solution, timeouts,
    networks and verifier environment.

    The step's solution stands in for the task's own (Harbor's oracle falls back to the
    task's ``solution/``); the view has no steps of its own, so subjects and verifiers see
    a single-step task. A step's declared ``network_mode`` (with its ``allowed_hosts``)
    replaces the task's for that phase, as Harbor's per-step explicit phase policy does;
    an undeclared one keeps the task's.
    """
    return replace(
        task,
        instruction=step.instruction,
        tests_dir=step.tests_dir,
        solution_dir=step.solution_dir or task.solution_dir,
        agent_timeout_sec=step.agent_timeout_sec,
        verifier_timeout_sec=step.verifier_timeout_sec,
        verifier_env=dict(step.verifier_env),
        agent_user=step.agent_user,
        verifier_user=step.verifier_user,
        artifacts=(*task.artifacts, *step.artifacts),
        verifier_environment=step.verifier_environment,
        steps=(),
        **_step_networks(task, step),
    )


def _step_networks(task: Task, step: Step) -> dict[str, Any]:
    """The Task fields a step's declared networks replace (none when it declares none)."""
    out: dict[str, Any] = {}
    if step.agent_network is not None:  # the verifier keeps what the task declared for it
        out.update(network=step.agent_network, agent_allowed_hosts=step.agent_allowed_hosts)
        out.update(verifier_network=task.verifier_declared)
    if step.verifier_network is not None:
        out.update(verifier_network=step.verifier_network, verifier_allowed_hosts=step.verifier_allowed_hosts)
    return out


def step_views(task: Task) -> tuple[Task, ...]:
    """Each step's view of a multi-step task, in order; a single-step task is its own one view."""
    return tuple(step_task(task, s) for s in task.steps) if task.steps else (task,)
