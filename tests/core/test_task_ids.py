"""Task ids made from directory names: always an id, never two names for one id silently."""

from __future__ import annotations

import re

import pytest

from pytest_maka.core.spec import NAME_PATTERN
from pytest_maka.core.task import task_id_for


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("plain-task_1.2+x", "plain-task_1.2+x"),
        ("001. tasks-distributed-ledger-audit", "001.-tasks-distributed-ledger-audit"),
        ("  (draft) café  task ", "draft-caf-task-"),
        ("..hidden", "hidden"),
        ("日本語", "task"),
    ],
)
def test_a_directory_name_becomes_an_id(name: str, expected: str) -> None:
    assert task_id_for(name) == expected
    assert re.match(NAME_PATTERN, task_id_for(name))
