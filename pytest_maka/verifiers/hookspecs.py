"""Hooks the bundled test-log verifiers add (declared from their plugin's ``pytest_addhooks``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.hookspec
def pytest_maka_log_parsers() -> dict[str, Callable[[str], dict[str, str]]]:
    """Test-log parsers by name: ``parse(text) -> {test id: PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS}``.

    Tasks name their parser (Terminal-Bench ``parser_name``, SWE-bench ``log_parser``);
    an empty result means "no test found", which is never a pass.
    """
