"""The argument parsers' own words for a refused command line, as the pinned CLIs print them."""

from __future__ import annotations

import pytest

from pytest_maka.core.provider import ProviderEvidence
from pytest_maka.executors.base import ExecResult
from pytest_maka.subjects.presets.setup_errors import rejected_flags, setup_error

#: Printed by the pinned versions for ``--maka-bogus-flag`` (2026-12-04); aider and mini from argparse and click.
REFUSALS = {
    "claude-code": "error: unknown option '--maka-bogus-flag'",
    "codex": "error: unexpected argument '--maka-bogus-flag' found\n  tip: to pass it as a value, use '--'",
    "gemini-cli": "Usage: gemini [options]\n...\nUnknown arguments: maka-bogus-flag, makaBogusFlag",
    "qwen-code": "Unknown arguments: maka-bogus-flag, makaBogusFlag",
    "pi": "Error: Unknown option: --maka-bogus-flag",
    "aider": "usage: aider [-h]\naider: error: unrecognized arguments: --maka-bogus-flag",
    "mini-swe-agent": "Usage: mini [OPTIONS]\nTry 'mini --help' for help.\nError: No such option: --maka-bogus-flag",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_each_presets_parser_refusal_is_recognised(kind: str) -> None:
    line = rejected_flags(REFUSALS[kind])
    assert line is not None and "maka-bogus-flag" in line


def test_ordinary_failures_are_not_setup_errors() -> None:
    for text in ("Error: API key not valid", "the tests failed: unknown option in config.yml", ""):
        assert rejected_flags(text) is None


def _exited(code: int | None, timed_out: bool = False) -> ExecResult:
    return ExecResult(exit_code=code, timed_out=timed_out, duration_s=0.1)


def test_only_a_run_that_never_reached_the_model_is_a_setup_error() -> None:
    text = REFUSALS["claude-code"]
    none = ProviderEvidence()
    assert setup_error("claude-code 2.1.332", _exited(1), text, none) == (
        "setup error: claude-code 2.1.332 rejected its command line (error: unknown option '--maka-bogus-flag'); "
        "the preset's flags or args: do not fit it"
    )
    assert setup_error("a 1", _exited(0), text, none) is None
    assert setup_error("a 1", _exited(None, timed_out=True), text, none) is None
    assert setup_error("a 1", _exited(1), text, ProviderEvidence(answered=True)) is None  # it talked to its model
    assert setup_error("a 1", _exited(1), text, ProviderEvidence(statuses=(401,))) is None
