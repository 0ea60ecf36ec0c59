"""Harbor's verifier: run tests/test.sh; read reward.json (preferred) or reward.txt from /logs/verifier.

The format is read strictly (docs/security.md): a reward is a JSON number written in ASCII
(``-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?``), in reward.txt alone on its line
(surrounding ASCII whitespace allowed), in reward.json as the values of one flat object
without duplicate keys. Python's ``float()`` is not the grammar: it accepts ``1_0``,
non-ASCII digits, ``+1``, ``inf`` and ``nan``, none of which a verifier writes on purpose.
A pass is a reward whose decimal value is exactly 1: ``1.0000000000000001`` is not 1 even
though it rounds to the float 1.0.

reward.json with several keys and no ``reward`` key (Harbor's multi-reward recipe) is judged
by the task source's MultiReward rule: by default it passes iff every key is exactly 1, and
its score is the mean of the keys.

Both files present: Harbor's versions disagree on which one wins (reward.json first in some,
reward.txt first in others), and code the verifier runs (the subject's program, imported by
a test) can write the one the test script does not. So two files are read together and a
contradiction is never a pass: the verdict passes only when each file passes; when one passes
and the other does not (a failing or malformed reward), it is a failure with the reason in the
record. Neither passing: reward.json gives the verdict unless it is malformed and reward.txt
is a number (a malformed file beside a failing one never makes the failure verdict-less).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..core.task import TESTS_DIR, Task
from ..executors.base import ExecResult, Sandbox
from .base import PlannedExec, Verdict, VerifierBase, VerifyContext, network_starved

PASS_REWARD = 1.0
#: Larger reward files are not a verdict (a reward is a few bytes).
MAX_REWARD_BYTES = 64 * 1024
#: RFC 8259's number, ASCII digits only.
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", re.ASCII)
#: What may surround the number in reward.txt (``echo 1 > reward.txt`` adds a newline).
SPACE = " \t\r\n"


@dataclass(frozen=True)
class MultiReward:
    """How a reward.json with several keys and no ``reward`` key decides (a task source option).

    ``all``: pass iff every key is exactly 1. ``mean``: pass iff the mean reaches ``threshold``.
    ``key``: the key named ``key`` decides, as ``reward`` would. The score is the mean, or
    that key's value for ``key``.
    """

    rule: Literal["all", "mean", "key"] = "all"
    threshold: float = 1.0
    key: str | None = None

    @classmethod
    def of(cls, task: Task) -> MultiReward:
        options = task.grading_options.get("multi_reward") or {}
        return cls(**options)

    def decide(self, values: dict[str, Decimal]) -> tuple[float | None, bool | None, str | None]:
        """(score, passed, error) for several keys without ``reward``."""
        if self.rule == "key":
            if self.key not in values:
                return None, None, f"reward.json has no key {self.key!r} (the source's reward_key)"
            score, exact = _score(values[self.key])
            return score, exact, None
        mean = sum(values.values(), Decimal(0)) / len(values)
        if self.rule == "all":
            return float(mean), all(v == 1 for v in values.values()), None
        return float(mean), mean >= Decimal(str(self.threshold)), None


class RewardError(ValueError):
    """A reward file that does not say a number in the format's terms."""


def _read_regular(path: Path) -> str | None:
    """The file's text if it is a regular file (never through a symlink); None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_REWARD_BYTES + 1)
    if len(data) > MAX_REWARD_BYTES:
        raise RewardError(f"{path.name} is larger than {MAX_REWARD_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RewardError(f"{path.name} is not UTF-8 text") from None


def parse_number(text: str) -> Decimal:
    """The exact value of one reward number; RewardError unless ``text`` is one in the grammar."""
    if not NUMBER.fullmatch(text):
        raise RewardError(f"not a number: {text[:60]!r}")
    value = Decimal(text)
    if not math.isfinite(float(value)):
        raise RewardError(f"out of range: {text[:60]!r}")
    return value


def _score(value: Decimal) -> tuple[float, bool]:
    """(the reward as a float for the record, whether it is exactly 1)."""
    return float(value), value == 1


def _reward_txt(text: str) -> Verdict:
    try:
        value = parse_number(text.strip(SPACE))
    except RewardError as e:
        return Verdict(passed=None, error=f"reward.txt is {e}", source="reward.txt")
    score, exact = _score(value)
    return Verdict(passed=exact, score=score, rewards={"reward": score}, source="reward.txt")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RewardError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise RewardError(f"{name} is not a number")


def _reward_json(text: str, multi: MultiReward) -> Verdict:
    try:
        data = json.loads(
            text,
            parse_float=parse_number,
            parse_int=parse_number,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_duplicates,
        )
    except RewardError as e:
        return Verdict(passed=None, error=f"reward.json: {e}", source="reward.json")
    except (json.JSONDecodeError, RecursionError) as e:
        reason = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        return Verdict(passed=None, error=f"reward.json is not valid JSON: {reason}", source="reward.json")
    if not isinstance(data, dict) or not data:
        return Verdict(
            passed=None, error="reward.json must be a non-empty flat object of numbers", source="reward.json"
        )
    values: dict[str, Decimal] = {}
    for key, value in data.items():
        if not isinstance(value, Decimal):
            return Verdict(passed=None, error=f"reward.json: {key!r} is not a number", source="reward.json")
        values[key] = value
    rewards = {key: float(value) for key, value in values.items()}
    if "reward" in values or len(values) == 1:
        score, exact = _score(values["reward"] if "reward" in values else next(iter(values.values())))
        return Verdict(passed=exact, score=score, rewards=rewards, source="reward.json")
    score, passed, error = multi.decide(values)
    details = {"multi_reward": multi.rule}
    return Verdict(passed=passed, score=score, rewards=rewards, error=error, source="reward.json", details=details)


def _read_one(verifier_dir: Path, name: str, multi: MultiReward) -> Verdict | None:
    """The verdict of one reward file; None when it is absent."""
    try:
        text = _read_regular(verifier_dir / name)
    except RewardError as e:
        return Verdict(passed=None, error=str(e), source=name)
    if text is None:
        return None
    return _reward_json(text, multi) if name == "reward.json" else _reward_txt(text)


def _says(verdict: Verdict) -> str:
    """What one reward file says, for the record."""
    if verdict.passed is None:
        return f"no reward ({verdict.error})"
    return f"{verdict.score:g} ({'a pass' if verdict.passed else 'not a pass'})"


def _both(txt: Verdict, jsn: Verdict) -> Verdict:
    """reward.txt and reward.json both present: a pass only when both pass."""
    files = {"reward.txt": _says(txt), "reward.json": _says(jsn)}
    if txt.passed and jsn.passed:
        return replace(jsn, source="reward.json+reward.txt", details={**jsn.details, "reward_files": files})
    if txt.passed or jsn.passed:
        scores = [v.score for v in (txt, jsn) if v.passed is not None and v.score is not None]
        reason = (
            f"the reward files contradict each other (reward.txt: {files['reward.txt']}; reward.json: "
            f"{files['reward.json']}): a contradiction is never a pass"
        )
        details = {**jsn.details, "reward_files": files, "reward_contradiction": True, "reason": reason}
        return Verdict(
            passed=False,
            score=min(scores) if scores else 0.0,
            rewards=jsn.rewards or txt.rewards,
            source="reward.json+reward.txt",
            details=details,
        )
    chosen = txt if jsn.passed is None and txt.passed is not None else jsn
    return replace(chosen, details={**chosen.details, "reward_files": files})


def read_reward(verifier_dir: Path, multi: MultiReward | None = None) -> Verdict:
    """The verdict of the reward files in ``verifier_dir``: reward.json (flat ``{name: number}``)
    and/or reward.txt (one number); with both, a pass only when both say one (module docstring).

    A reward of exactly 1 is a pass. Missing, empty, oversized or malformed rewards give no verdict.
    """
    multi = multi or MultiReward()
    jsn = _read_one(verifier_dir, "reward.json", multi)
    txt = _read_one(verifier_dir, "reward.txt", multi)
    if jsn is not None and txt is not None:
        return _both(txt, jsn)
    found = jsn if jsn is not None else txt
    if found is None:
        return Verdict(passed=None, error="the verifier wrote no reward (reward.txt or reward.json)")
    return found


class RewardVerifier(VerifierBase):
    """Runs ``task.verifier_command`` (``bash /tests/test.sh``) in the workdir; a reward of 1 passes."""

    name: ClassVar[str] = "reward"

    def tests_payload(self, task: Task, scratch: Path) -> Path | None:
        return task.tests_dir

    def run(self, sandbox: Sandbox, task: Task, ctx: VerifyContext) -> ExecResult:
        return ctx.run(sandbox, task.verifier_command, cwd=task.workdir)

    def planned_exec(self, task: Task) -> PlannedExec:
        return PlannedExec(task.verifier_command, task.workdir, (TESTS_DIR,) if task.tests_dir is not None else ())

    def grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        return network_starved(read_reward(ctx.verifier_dir, MultiReward.of(task)), task, ctx)
