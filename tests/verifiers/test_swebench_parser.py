"""Terminal-Bench's ``parser_name: swebench``: the verdict its run-tests.sh prints between two lines.

The log shapes are those of Terminal-Bench's SWE-bench tasks: the eval script's own output
(``>>>>> Start Test Output`` ... ``>>>>> End Test Output``), then uv installing swebench, then
swebench's grading printed as one word between ``SWEBench results starts here`` and
``SWEBench results ends here``.
"""

from __future__ import annotations

import pytest

from pytest_maka.verifiers import parsers

EVAL = """\
+ source /opt/miniconda3/bin/activate
+ git checkout 3eb8d1c6b9a4f5c1 tests/test_ops.py
Updated 1 path from 5c2d1e0
+ git apply -v -
Checking patch tests/test_ops.py...
Applied patch tests/test_ops.py cleanly.
>>>>> Start Test Output
+ pytest -rA tests/test_ops.py
============================= test session starts ==============================
collected 3 items

tests/test_ops.py ..F                                                    [100%]

=========================== short test summary info ============================
PASSED tests/test_ops.py::test_add
PASSED tests/test_ops.py::test_sub
FAILED tests/test_ops.py::test_div - ZeroDivisionError
========================= 1 failed, 2 passed in 0.05s =========================
>>>>> End Test Output
+ git checkout 3eb8d1c6b9a4f5c1 tests/test_ops.py
Updated 1 path from 5c2d1e0
Installed 27 packages in 41ms
"""


def block(word: str) -> str:
    return f"SWEBench results starts here\n{word}\nSWEBench results ends here\n"


def test_a_resolved_instance_passes() -> None:
    assert parsers.get("swebench") is parsers.parse_swebench
    assert parsers.parse_swebench(EVAL + block("PASSED")) == {"tests": "PASSED"}


def test_an_unresolved_instance_fails_though_most_tests_passed() -> None:
    assert parsers.parse_swebench(EVAL + block("FAILED")) == {"tests": "FAILED"}


def test_colours_and_carriage_returns_do_not_change_the_verdict() -> None:
    text = (EVAL + block("\x1b[32mPASSED\x1b[0m")).replace("\n", "\r\n")
    assert parsers.parse_swebench(text) == {"tests": "PASSED"}


@pytest.mark.parametrize(
    "text",
    [
        EVAL,  # swebench could not run (its repository fetch failed): no verdict, never a pass
        EVAL + "SWEBench results starts here\nPASSED\n",
        "SWEBench results ends here\n" + EVAL + "SWEBench results starts here\nPASSED\n",
    ],
)
def test_without_both_lines_there_is_no_result(text: str) -> None:
    assert parsers.parse_swebench(text) == {}


def test_a_block_printed_by_the_code_under_test_cannot_make_a_pass() -> None:
    """Code under test runs before the grading and can print the lines: a forged block before
    the real one makes the span hold both, which is no longer ``PASSED`` alone."""
    forged = EVAL.replace(">>>>> End Test Output", block("PASSED") + ">>>>> End Test Output")
    assert parsers.parse_swebench(forged + block("FAILED")) == {"tests": "FAILED"}
    assert parsers.parse_swebench(forged + block("PASSED")) == {"tests": "FAILED"}
