"""Harbor's verifier: run tests/test.sh; read reward.json (preferred) or reward.txt from /logs/verifier."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

from ..core.task import Task
from ..executors.base import ExecResult, Sandbox
from .base import Verdict, VerifyContext

PASS_REWARD = 1.0


def _read_regular(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file():
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def read_reward(verifier_dir: Path) -> Verdict:
    """Harbor's rule: reward.json (flat ``{name: number}``) wins over reward.txt (one number).

    A reward of exactly 1 is a pass. Missing, empty or non-numeric rewards give no verdict.
    """
    text = _read_regular(verifier_dir / "reward.json")
    if text is not None:
        return _from_json(text)
    text = _read_regular(verifier_dir / "reward.txt")
    if text is None:
        return Verdict(passed=None, error="the verifier wrote no reward (reward.txt or reward.json)")
    try:
        score = _finite(float(text.strip()))
    except ValueError:
        score = None
    if score is None:
        return Verdict(passed=None, error=f"reward.txt is not a number: {text.strip()[:60]!r}", source="reward.txt")
    return Verdict(passed=score == PASS_REWARD, score=score, rewards={"reward": score}, source="reward.txt")


def _from_json(text: str) -> Verdict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return Verdict(passed=None, error=f"reward.json is not valid JSON: {e.msg}", source="reward.json")
    if not isinstance(data, dict) or not data:
        return Verdict(
            passed=None, error="reward.json must be a non-empty flat object of numbers", source="reward.json"
        )
    rewards: dict[str, float] = {}
    for key, value in data.items():
        number = _finite(value)
        if number is None:
            return Verdict(passed=None, error=f"reward.json: {key!r} is not a number", source="reward.json")
        rewards[str(key)] = number
    if "reward" in rewards:
        score = rewards["reward"]
    elif len(rewards) == 1:
        score = next(iter(rewards.values()))
    else:
        return Verdict(
            passed=None, error="reward.json has several keys but no 'reward' key", rewards=rewards, source="reward.json"
        )
    return Verdict(passed=score == PASS_REWARD, score=score, rewards=rewards, source="reward.json")


class RewardVerifier:
    """Runs ``task.verifier_command`` (``bash /tests/test.sh``) in the workdir; a reward of 1 passes."""

    name: ClassVar[str] = "reward"

    def tests_payload(self, task: Task, scratch: Path) -> Path | None:
        return task.tests_dir

    def run(self, sandbox: Sandbox, task: Task, ctx: VerifyContext) -> ExecResult:
        return ctx.run(sandbox, task.verifier_command, cwd=task.workdir)

    def grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        return read_reward(ctx.verifier_dir)
