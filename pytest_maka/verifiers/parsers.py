"""Test-log parsers: turn a test command's output into ``{test id: status}``.

A registry by name. Plugins add parsers through the ``pytest_maka_log_parsers`` hook
(declared in ``pytest_maka/verifiers/hookspecs.py``); ``configure()`` merges them in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

#: Status words, as pytest prints them.
PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = "PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"
STATUSES = (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS)
#: Outcomes that count as "the test did not fail".
OK_STATUSES = frozenset({PASSED, XFAIL, SKIPPED})

LogParser = Callable[[str], dict[str, str]]

_SUMMARY = re.compile(r"^=+ short test summary info =+\s*$", re.MULTILINE)
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+?)\s*$")
_VERBOSE_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_SECTION_END = re.compile(r"^=+ .* =+\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: SWE-bench logs delimit the test run with these markers (eval scripts print them).
_START, _END = ">>>>> Start Test Output", ">>>>> End Test Output"


def clean(text: str) -> str:
    """Drop ANSI colours and carriage returns; keep only the delimited test output if marked."""
    text = _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    start = text.rfind(_START)
    if start >= 0:
        end = text.find(_END, start)
        text = text[start + len(_START) : end if end >= 0 else len(text)]
    return text


def _summary_id(status: str, rest: str) -> str:
    if status == SKIPPED:  # "SKIPPED [1] tests/test_a.py:12: reason" -> location
        match = re.match(r"\[\d+\] (\S+?):?(?: |$)", rest)
        return match.group(1) if match else rest
    return rest.split(" - ", 1)[0].strip()


def parse_pytest(text: str) -> dict[str, str]:
    """pytest's ``-rA`` "short test summary info" section (the last one), plus ``-v`` lines.

    Only the last summary section is read, so output printed by the tests themselves
    (shown in earlier sections) cannot stand in for pytest's own summary; summary lines
    override verbose lines for the same test.
    """
    text = clean(text)
    results: dict[str, str] = {}
    sections = list(_SUMMARY.finditer(text))
    body_end = sections[-1].start() if sections else len(text)
    for line in text[:body_end].splitlines():
        match = _VERBOSE_LINE.match(line)
        if match:
            results[match.group(1)] = match.group(2)
    if sections:
        for line in text[sections[-1].end() :].splitlines():
            if _SECTION_END.match(line):
                break
            match = _SUMMARY_LINE.match(line)
            if match:
                results[_summary_id(match.group(1), match.group(2))] = match.group(1)
    return results


_UNITTEST_LINE = re.compile(
    r"^(\w+) \(([\w.]+)\)[^\n]*? \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$", re.MULTILINE
)
_UNITTEST_STATUS = {
    "ok": PASSED,
    "FAIL": FAILED,
    "ERROR": ERROR,
    "expected failure": XFAIL,
    "unexpected success": FAILED,
}


def parse_unittest(text: str) -> dict[str, str]:
    """Verbose unittest / Django runner lines: ``test_x (module.Class) ... ok``."""
    results: dict[str, str] = {}
    for name, where, outcome in _UNITTEST_LINE.findall(clean(text)):
        status = SKIPPED if outcome.startswith("skipped") else _UNITTEST_STATUS[outcome]
        results[f"{name} ({where})"] = status
    return results


#: Terminal-Bench's SWE-bench tasks: their run-tests.sh grades with swebench itself and prints
#: one word (``PASSED`` when the instance is resolved) between these lines.
SWEBENCH_START, SWEBENCH_END = "SWEBench results starts here", "SWEBench results ends here"


def parse_swebench(text: str) -> dict[str, str]:
    """Terminal-Bench's ``swebench`` parser: ``{"tests": PASSED}`` when the text from the first
    start line to the last end line is ``PASSED`` alone, ``FAILED`` otherwise; ``{}`` (no verdict)
    without both lines. A block printed by the code under test cannot make a pass: it lies
    inside the span, which is then no longer ``PASSED`` alone."""
    text = (
        _ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    )  # not clean(): the block follows the test output
    if SWEBENCH_START not in text:
        return {}
    rest = text.split(SWEBENCH_START, 1)[1]
    if SWEBENCH_END not in rest:  # an end line only before the start is none
        return {}
    block = rest.rsplit(SWEBENCH_END, 1)[0].strip()
    return {"tests": PASSED if block == PASSED else FAILED}


BUILTIN: dict[str, LogParser] = {
    "pytest": parse_pytest,
    "unittest": parse_unittest,
    "django": parse_unittest,
    "swebench": parse_swebench,
    # SWE-bench's names for the same formats.
    "parse_log_pytest": parse_pytest,
    "parse_log_django": parse_unittest,
}
_registry: dict[str, LogParser] = dict(BUILTIN)


def configure(extra: Iterable[dict[str, LogParser]]) -> None:
    """Rebuild the registry: the built-in parsers plus every plugin's (later ones win)."""
    merged = dict(BUILTIN)
    for parsers in extra:
        merged.update(parsers or {})
    _registry.clear()
    _registry.update(merged)


def get(name: str) -> LogParser | None:
    return _registry.get(name)


def names() -> list[str]:
    return sorted(_registry)
