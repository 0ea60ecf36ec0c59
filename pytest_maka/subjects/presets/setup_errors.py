"""An agent CLI that rejects the command line the preset built (another version's flags, or ``args:``).

That is a setup error, the harness's or the spec's, not the agent's score: the CLI exited
before its first model request, with its argument parser's own message. Each parser words it
its own way; these are the words, by the library each preset's CLI is built on (checked
against the pinned versions with an unknown flag, 2026-12-04, except where noted).
"""

from __future__ import annotations

import re

from ...core.provider import ProviderEvidence
from ...executors.base import ExecResult

#: commander.js (claude-code), clap (codex), yargs (gemini-cli, qwen-code), pi's own parser,
#: argparse (aider) and click (mini-swe-agent): the last two from the libraries' sources.
REJECTED = re.compile(
    r"error: unknown option '[^']+'"
    r"|error: too many arguments"
    r"|error: unexpected argument '[^']+' found"
    r"|error: unrecognized subcommand '[^']+'"
    r"|^Unknown arguments?: .+$"
    r"|Error: Unknown option: \S+"
    r"|error: unrecognized arguments: .+$"
    r"|No such option: \S+",
    re.MULTILINE,
)


def rejected_flags(output: str) -> str | None:
    """The parser's line when ``output`` (the CLI's stderr and stdout) says it refused its arguments."""
    found = REJECTED.search(output)
    return found[0].strip() if found else None


def setup_error(agent: str, result: ExecResult, output: str, provider: ProviderEvidence) -> str | None:
    """The setup error of a run that exited non-zero before any model request, its parser refusing its arguments."""
    if result.exit_code in (0, None) or result.timed_out:
        return None
    if provider.answered or provider.statuses or provider.unanswered:
        return None
    line = rejected_flags(output)
    if line is None:
        return None
    return f"setup error: {agent} rejected its command line ({line}); the preset's flags or args: do not fit it"
