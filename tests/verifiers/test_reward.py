"""Reward files are read by the format's grammar, not by Python's float(): a pass is exactly 1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_maka.verifiers.reward import MAX_REWARD_BYTES, MultiReward, read_reward


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "score", "passed"),
    [
        ("1\n", 1.0, True),
        ("1", 1.0, True),
        ("  1.0 \r\n", 1.0, True),
        ("1.000", 1.0, True),
        ("1e0", 1.0, True),
        ("10E-1", 1.0, True),
        ("0\n", 0.0, False),
        ("0.5", 0.5, False),
        ("-1", -1.0, False),
        # rounds to the float 1.0, but its value is not 1
        ("1.0000000000000001", 1.0, False),
        ("0.99999999999999999", 1.0, False),
    ],
)
def test_reward_txt_numbers(tmp_path: Path, text: str, score: float, passed: bool) -> None:
    verdict = read_reward(write(tmp_path, "reward.txt", text))
    assert (verdict.score, verdict.passed, verdict.source) == (score, passed, "reward.txt")


@pytest.mark.parametrize(
    "text",
    [
        "0_1",
        "1_0",
        "\uff11",  # fullwidth digit one
        "\u0661",  # Arabic-Indic digit one
        "+1",
        ".5",
        "1.",
        "01",
        "inf",
        "nan",
        "Infinity",
        "1e999",
        "0x1",
        "1 1",
        "1\n1\n",
        "\u30001",  # ideographic space is not ASCII whitespace
        "\ufeff1",
        "",
        "true",
        "reward 1",
    ],
)
def test_reward_txt_outside_the_grammar_is_no_verdict(tmp_path: Path, text: str) -> None:
    verdict = read_reward(write(tmp_path, "reward.txt", text))
    assert verdict.passed is None and verdict.score is None
    assert verdict.error is not None and verdict.error.startswith("reward.txt is ")


@pytest.mark.parametrize(
    ("text", "score", "passed"),
    [
        ('{"reward": 1}', 1.0, True),
        ('{"reward": 1.0, "style": 0}', 1.0, True),
        ('{"score": 1}', 1.0, True),
        ('{"reward": 1.0000000000000001}', 1.0, False),
        ('{"reward": 0.5, "style": 1}', 0.5, False),
    ],
)
def test_reward_json_numbers(tmp_path: Path, text: str, score: float, passed: bool) -> None:
    verdict = read_reward(write(tmp_path, "reward.json", text))
    assert (verdict.score, verdict.passed, verdict.source) == (score, passed, "reward.json")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"reward": NaN}', "NaN is not a number"),
        ('{"reward": Infinity}', "Infinity is not a number"),
        ('{"reward": 1e999}', "out of range"),
        ('{"reward": 0, "reward": 1}', "appears twice"),
        ('{"reward": true}', "is not a number"),
        ('{"reward": "1"}', "is not a number"),
        ('{"reward": {"value": 1}}', "is not a number"),
        ('{"reward": [1]}', "is not a number"),
        ("[1]", "non-empty flat object"),
        ("{}", "non-empty flat object"),
        ("1", "non-empty flat object"),
        ('{"reward": 1', "not valid JSON"),
        ('{"a": 1, "b": "1"}', "'b' is not a number"),  # several keys: each must be a number
        ("[" * 60_000, "not valid JSON"),
        ('{"reward": 1' + "0" * 5000 + "}", "out of range"),
    ],
)
def test_reward_json_outside_the_format_is_no_verdict(tmp_path: Path, text: str, error: str) -> None:
    verdict = read_reward(write(tmp_path, "reward.json", text))
    assert verdict.passed is None and verdict.error is not None
    assert error in verdict.error, verdict.error


@pytest.mark.parametrize(
    ("txt", "jsn"),
    [
        ("1\n", '{"reward": 0}'),  # the old rule (reward.json wins) gave this one right by luck
        ("0\n", '{"reward": 1}'),  # code the verifier ran wrote reward.json beside the test's 0
        ("0.5", '{"tests": 1, "style": 1}'),
        ("1", '{"reward": 1, '),  # a malformed file beside a pass
        ("one", '{"reward": 1}'),
        ("1", '{"reward": 1.0000000000000001}'),
    ],
)
def test_reward_files_that_contradict_each_other_never_pass(tmp_path: Path, txt: str, jsn: str) -> None:
    write(tmp_path, "reward.txt", txt)
    write(tmp_path, "reward.json", jsn)
    verdict = read_reward(tmp_path)
    assert verdict.passed is False, "a contradiction is the subject's failure, never a pass nor no verdict"
    assert verdict.details["reward_contradiction"] is True
    assert "contradict" in verdict.details["reason"] and verdict.source == "reward.json+reward.txt"
    assert set(verdict.details["reward_files"]) == {"reward.txt", "reward.json"}


@pytest.mark.parametrize(
    ("txt", "jsn", "passed", "score"),
    [
        ("1\n", '{"reward": 1.0, "tests": 0.5}', True, 1.0),  # both pass: reward.json's details kept
        ("1", '{"tests": 1, "style": 1}', True, 1.0),
        ("0\n", '{"reward": 0.25}', False, 0.25),  # neither passes: reward.json's score
        ("0", '{"reward": ', False, 0.0),  # malformed beside a failure: still a failure, in the denominator
        ("zero", '{"reward": 0}', False, 0.0),
    ],
)
def test_two_reward_files_that_agree(tmp_path: Path, txt: str, jsn: str, passed: bool, score: float) -> None:
    write(tmp_path, "reward.txt", txt)
    write(tmp_path, "reward.json", jsn)
    verdict = read_reward(tmp_path)
    assert (verdict.passed, verdict.score) == (passed, score)
    assert "reward_contradiction" not in verdict.details


def test_two_malformed_reward_files_give_no_verdict(tmp_path: Path) -> None:
    write(tmp_path, "reward.txt", "yes")
    write(tmp_path, "reward.json", "[1]")
    assert read_reward(tmp_path).passed is None


def test_non_utf8_oversized_and_links_are_not_rewards(tmp_path: Path) -> None:
    assert read_reward(write(tmp_path / "a", "reward.txt", b"\xff1")).error == "reward.txt is not UTF-8 text"
    big = read_reward(write(tmp_path / "b", "reward.txt", "1" + " " * MAX_REWARD_BYTES))
    assert big.passed is None and "larger than" in (big.error or "")
    (tmp_path / "target").write_text("1\n")
    (tmp_path / "c").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "c" / "reward.txt")
    assert read_reward(tmp_path / "c").passed is None, "a symlinked reward is never read"
    (tmp_path / "d" / "reward.txt").mkdir(parents=True)
    assert read_reward(tmp_path / "d").error == "the verifier wrote no reward (reward.txt or reward.json)"


@pytest.mark.parametrize(
    ("text", "multi", "passed", "score"),
    [
        ('{"tests": 1, "style": 1}', MultiReward(), True, 1.0),  # default: every key is 1 (was no verdict)
        ('{"tests": 1, "style": 0.5}', MultiReward(), False, 0.75),
        ('{"tests": 1, "style": 1.0000000000000001}', MultiReward(), False, 1.0),  # not exactly 1
        ('{"tests": 1, "style": 0.5}', MultiReward(rule="mean", threshold=0.75), True, 0.75),
        ('{"tests": 1, "style": 0.4}', MultiReward(rule="mean", threshold=0.75), False, 0.7),
        ('{"tests": 1, "style": 0}', MultiReward(rule="key", key="tests"), True, 1.0),
        ('{"reward": 0.5, "style": 1}', MultiReward(), False, 0.5),  # a reward key still decides alone
    ],
)
def test_several_keys_without_reward(tmp_path: Path, text: str, multi: MultiReward, passed: bool, score: float) -> None:
    verdict = read_reward(write(tmp_path, "reward.json", text), multi)
    assert (verdict.passed, verdict.score, verdict.error) == (passed, score, None)
    assert set(verdict.rewards) == set(json.loads(text)), "every key is kept"


def test_reward_key_that_is_missing_gives_no_verdict(tmp_path: Path) -> None:
    verdict = read_reward(write(tmp_path, "reward.json", '{"a": 1, "b": 1}'), MultiReward(rule="key", key="tests"))
    assert verdict.passed is None and "no key 'tests'" in (verdict.error or "")
    assert verdict.rewards == {"a": 1.0, "b": 1.0}


def test_a_reward_file_that_was_a_link_is_a_failure() -> None:
    """Copy-out turns a link into a file holding its text: judged as a link, never as a malformed reward."""
    from pytest_maka.executors.copyout import CopyReport
    from pytest_maka.run.phases import reward_links
    from pytest_maka.verifiers.base import Verdict

    malformed = Verdict(passed=None, error="reward.txt is not a number: '/tmp/x'", source="reward.txt")
    report = CopyReport()
    report.link("verifier/reward.txt", "/tmp/x")
    report.link("verifier/notes/log.txt", "/tmp/y")
    verdict = reward_links(malformed, report)
    assert (verdict.passed, verdict.score, verdict.details["reward_links"]) == (False, 0.0, ["reward.txt"])
    assert "reward.txt was a symbolic link" in verdict.details["reason"]
    other = CopyReport()
    other.link("verifier/notes/log.txt", "/tmp/y")
    passed = Verdict(passed=True, score=1.0, source="reward.txt")
    assert reward_links(passed, other) is passed, "links elsewhere in /logs/verifier change nothing"
    many = CopyReport()
    for i in range(60):
        many.link(f"verifier/l{i}", "/tmp/z")
    assert reward_links(passed, many).passed is False, "too many links to tell: a pass is not taken"
    failed = Verdict(passed=False, score=0.0, source="reward.txt")
    assert reward_links(failed, many) is failed
