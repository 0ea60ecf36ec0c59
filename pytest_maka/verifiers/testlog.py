"""Terminal-Bench's verifier: run ``/tests/run-tests.sh``, parse its output, resolved iff every test passed.

Unlike Terminal-Bench, output in which the parser finds no test is no verdict (never a
pass), and a log claiming every test passed while the script failed is no verdict either.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

from ..core.task import TESTS_DIR, Task
from ..executors.base import ExecResult, Sandbox
from . import parsers
from .base import Verdict, VerifierBase, VerifyContext, network_starved

RUN_TESTS = "run-tests.sh"


def read_log(ctx: VerifyContext) -> str:
    """The verifier's stdout then stderr (a terminal would have shown both)."""
    parts = []
    for path in (ctx.stdout_path, ctx.stderr_path):
        if path.is_file():
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def outcome_lists(results: dict[str, str]) -> dict[str, list[str]]:
    """``{status: [test ids]}``, sorted, for the record."""
    out: dict[str, list[str]] = {}
    for test, status in sorted(results.items()):
        out.setdefault(status.lower(), []).append(test)
    return out


class TestLogVerifier(VerifierBase):
    """Grading ``terminal-bench``: options ``parser`` (default pytest) and ``script`` (run-tests.sh)."""

    __test__ = False  # not a pytest test class despite the name
    #: Terminal-Bench tests often import the subject's code from the workdir (docs/security.md).
    imports_workdir: ClassVar[bool] = True
    name: ClassVar[str] = "terminal-bench"

    def tests_payload(self, task: Task, scratch: Path) -> Path | None:
        """tests/ and run-tests.sh together, as Terminal-Bench copies them to /tests."""
        dest = scratch / "terminal-bench-tests"
        if dest.exists():
            shutil.rmtree(dest)
        if task.tests_dir is not None and task.tests_dir.is_dir():
            shutil.copytree(task.tests_dir, dest, symlinks=True)
        else:
            dest.mkdir(parents=True)
        script = task.grading_options.get("script_path")
        if script:
            shutil.copyfile(script, dest / RUN_TESTS)
        return dest

    def run(self, sandbox: Sandbox, task: Task, ctx: VerifyContext) -> ExecResult:
        env = {**ctx.env, "TEST_DIR": TESTS_DIR}
        return ctx.run(sandbox, f"bash {TESTS_DIR}/{RUN_TESTS}", cwd=task.workdir, env=env)

    def grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        return network_starved(self._grade(task, result, ctx), task, ctx)

    def _grade(self, task: Task, result: ExecResult, ctx: VerifyContext) -> Verdict:
        name = task.grading_options.get("parser", "pytest")
        parse = parsers.get(name)
        if parse is None:
            known = ", ".join(parsers.names())
            return Verdict(passed=None, error=f"no test-log parser named {name!r} (known: {known})")
        results = parse(read_log(ctx))
        details: dict[str, Any] = {"parser": name, "tests": outcome_lists(results)}
        if not results:
            return Verdict(
                passed=None,
                error=f"the {name!r} parser found no test result in the verifier's output "
                f"(exit code {result.exit_code}); an empty parse is not a pass",
                details=details,
            )
        bad = sorted(t for t, s in results.items() if s not in parsers.OK_STATUSES)
        details.update(tests_total=len(results), tests_failed=len(bad))
        if not bad and result.exit_code != 0:
            return Verdict(
                passed=None,
                error=f"the log shows {len(results)} test(s) passing but {RUN_TESTS} exited with code "
                f"{result.exit_code}; refusing to grade a contradicting run",
                details=details,
            )
        passed = not bad
        score = 1.0 if passed else 0.0
        if bad:
            shown = ", ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")
            details["reason"] = f"{len(bad)} of {len(results)} test(s) did not pass: {shown}"
        return Verdict(passed=passed, score=score, rewards={"resolved": score}, source="test log", details=details)
